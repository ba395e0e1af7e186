"""Gradient compression for hvx.torch.DistributedOptimizer, as horovod.torch.Compression."""

import torch


class Compressor:
    """Casts a tensor before the exchange and back after it."""

    @staticmethod
    def compress(tensor):
        """Returns (compressed tensor, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _caster(low):
    class _Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != low:
                return tensor.type(low), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.type(ctx)

    return _Cast


FP16Compressor = _caster(torch.float16)
BF16Compressor = _caster(torch.bfloat16)


class Compression:
    """none: as is; fp16 / bf16: floating-point tensors travel as float16 / bfloat16."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
