"""hvx.torch.elastic: Horovod's elastic state objects (TorchState, ObjectState, ElasticSampler).

A state object keeps a committed copy of what it tracks: `commit()` (or `save()`) copies the
current values to host memory, `restore()` puts the last committed values back, undoing what came
after, and `sync()` makes every rank hold rank 0's current values and commits them (so a restore
after a sync returns the synchronized values on every rank, not a rank's own older ones).

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    state.sync()
    for state.epoch in range(state.epoch, epochs):
        for batch_idx, (x, y) in enumerate(loader):
            ...
            sampler.record_batch(batch_idx, batch_size)
            if batch_idx % 100 == 0:
                state.commit()
        sampler.set_epoch(state.epoch + 1)

hvx changes the world size by restarting the job (hvxrun --max-restarts, --host-discovery-script:
hvx/launch/README.md), not inside a running process, so Horovod's `hvd.elastic.run` (shutdown and
init again in the same process) has no counterpart here; the sampler's and the state's
`state_dict()` go into the script's checkpoint, and the sampler resumes it at any world size.
"""

import copy

import torch

from hvx import _C
from hvx.torch.mpi_ops import broadcast_object, rank, size
from hvx.torch.optimizer import broadcast_optimizer_state, broadcast_parameters


def _broadcast_state(obj):
    return broadcast_object(obj, root_rank=0, name="elastic.object_state")


class ObjectState:
    """Plain Python values, one attribute per keyword argument; sync() broadcasts rank 0's.

    bcast_object(obj) broadcasts from rank 0 (by default hvx.torch's broadcast_object); get_rank is
    accepted for Horovod's signature and not needed: rank 0 is always the root."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        del get_rank  # rank 0 is always the root here
        self._bcast_object = bcast_object or _broadcast_state
        self._reset_callbacks = []
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()

    def register_reset_callbacks(self, callbacks):
        """Functions to call from on_reset(), e.g. to rescale the learning rate to a new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self):
        """Called by on_reset() before the state is synchronized again."""

    def commit(self):
        """Copies the tracked values to host memory: what restore() returns to."""
        self.save()

    def check_host_updates(self):
        """Host changes reach an hvx job as a restart, never inside a running process."""

    def save(self):
        self._save_values()

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._save_values()
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _save_values(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            super().__setattr__(attr, copy.deepcopy(value))


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset over the ranks from hvx's shard plan, counting what has been
    processed so that a restore, a sync or a new world size goes on with the samples of the
    epoch not yet processed, each once.

    record_batch(batch_idx, batch_size) after each batch counts batch_size samples on every rank;
    set_epoch(e) starts epoch e from its beginning (call it at the end of an epoch); what an
    iteration yields is planned at the last set_epoch, load_state_dict or sync. Each epoch
    is a permutation drawn from (seed, epoch), the same on every rank; the rest of an epoch is
    padded to equal shares with fewer than size() repeats."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = int(seed)
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Plans the rest of the epoch from the samples processed so far, with the world size and
        rank hvx has now; iterations until the next reset repeat that plan (Horovod's)."""
        self.num_replicas = size() if _C.is_initialized() else 1
        self.rank = rank() if _C.is_initialized() else 0
        self._start = min(self.processed_num, len(self.dataset))
        remaining = len(self.dataset) - self._start
        self.num_samples = -(-remaining // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        plan = _C.shard_plan(len(self.dataset), self.rank, self.num_replicas, self.epoch,
                             self.seed, True, self.shuffle, self._start)
        return iter(list(plan.ids))

    def __len__(self):
        return self.num_samples


class _Handler:
    """Keeps a committed copy of a model, optimizer or sampler through its state_dict()."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)


class _ModelHandler(_Handler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0,
                                                    name="elastic.sampler_state"))


_HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (ElasticSampler, _SamplerHandler)]


def _handler_for(value):
    for kind, handler in _HANDLERS:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """A model, an optimizer, samplers and any other values: modules, optimizers and
    ElasticSamplers through their state_dict() (sync broadcasts rank 0's parameters and optimizer
    state), the rest as in ObjectState. Each is an attribute of the state."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
            handler.save()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].value = value
            handlers[name].save()
        super().__setattr__(name, value)
