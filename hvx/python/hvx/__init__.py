"""hvx for Python.

    import hvx.torch as hvd      # Horovod's torch API over hvx's C++ engine
    import hvx.data              # record files read through hvx's data layer, sharded per rank

Everything runs in hvx's C++ library (hvx/_C.so): the engine and its MPI transport, the launcher
contract (hvxrun sets the ranks), the shard plan and the record reader. These modules translate.
"""

__version__ = "0.1.0"
