"""SyncBatchNorm: batch normalisation whose statistics in training are those of the global batch
(every rank's samples), as horovod.torch.SyncBatchNorm and torch.nn.SyncBatchNorm.

The per-rank sums (count, sum, sum of squares) are summed over the process set by a
differentiable allreduce, so backward sums the statistics' gradients over the ranks as well: the
input gradients are those of one BatchNorm over the concatenated batch. Evaluation uses the
running statistics, which every rank updates identically.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from hvx.torch import mpi_ops


class SyncBatchNorm(_BatchNorm):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=mpi_ops.global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or self.process_set.size() == 1:
            return super().forward(input)
        if self.momentum is None:
            raise ValueError("SyncBatchNorm: momentum=None (cumulative averages) is not "
                             "supported")
        dims = [0] + list(range(2, input.dim()))
        x = input.float()
        local = torch.stack([
            torch.full((self.num_features,), float(x.numel() // self.num_features),
                       dtype=torch.float32, device=x.device),
            x.sum(dims),
            (x * x).sum(dims),
        ])
        total = mpi_ops.allreduce(local, op=mpi_ops.Sum, process_set=self.process_set)
        count = total[0]
        mean = total[1] / count
        var = total[2] / count - mean * mean
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                n = count[0]
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * unbiased)
        shape = [1, self.num_features] + [1] * (input.dim() - 2)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(input.dtype)
