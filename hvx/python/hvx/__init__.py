"""hvx for Python.

    import hvx.torch as hvd      # Horovod's torch API over hvx's C++ engine
    import hvx.data              # record files read through hvx's data layer, sharded per rank

Everything runs in hvx's C++ library (hvx/_C.so): the engine and its MPI transport, the launcher
contract (hvxrun sets the ranks), the shard plan and the record reader. These modules translate.
"""

__version__ = "0.1.0"


def _check_torch():
    """Raises ImportError, naming both versions, unless this interpreter's torch is the one hvx's
    native module (hvx/_C.so) was built against: LibTorch's C++ API and ABI change between
    versions, so the module would otherwise fail to load with an undefined symbol, or worse."""
    import torch

    try:
        from hvx import _torch_build  # generated beside hvx/_C.so
    except ImportError:
        return  # a source tree without a build: importing hvx._C will say so
    built = _torch_build.TORCH_VERSION
    if built and torch.__version__ != built:
        import sys

        raise ImportError(
            "hvx %s was built against torch %s, but this Python (%s) has torch %s (%s). "
            "Install torch==%s, or rebuild hvx against this torch: "
            "HVX_TORCH_PYTHON=%s bazel build //hvx/python:wheel"
            % (__version__, built, sys.executable, torch.__version__, torch.__file__,
               _torch_build.TORCH_DIST_VERSION or built, sys.executable))


_check_torch()
