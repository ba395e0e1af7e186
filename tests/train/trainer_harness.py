"""Runs tools/train on a tiny dataset and reads what each run did from its metrics file.

The trainer's tests assert on data: the JSON lines of logging.metrics_file (hvx/train/README.md,
"The metrics file"), not on the progress lines of its log. Messages meant for a person (what a
resumed run says, an error naming a file) are still checked in the output, as a user reads them.

    trainer = Trainer(tmp_dir)                      # paths from the environment: see run_pytest.sh
    config = trainer.tiny_config("cnn", 240, 40, batch=10, epochs=2)
    run = trainer.run("full", "--config=" + config, overrides=['launch { num_processes: "2" }'])
    run.check()                                     # exit 0, or the output's tail in the failure
    assert [p["global_step"] for p in run.progress] == list(range(1, 25))
"""
import json
import os
import signal
import subprocess
import time


def tool(name):
    """The absolute path of a tool run_pytest.sh was given as NAME=PATH."""
    path = os.environ.get(name)
    if not path:
        raise RuntimeError("%s is not set: run the tests through tests/train/run_pytest.sh" % name)
    return path


class Run:
    """One finished (or started) trainer command: exit status, output and metrics records."""

    def __init__(self, name, args, out_path, err_path, metrics_path):
        self.name = name
        self.args = args
        self.out_path = out_path
        self.err_path = err_path
        self.metrics_path = metrics_path
        self.rc = None
        self._records = None

    @property
    def out(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    @property
    def err(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    @property
    def output(self):
        """stdout and stderr together, as a person reading both would search them."""
        return self.out + self.err

    def tail(self, lines=20):
        both = (self.out + "\n--- stderr ---\n" + self.err).splitlines()
        return "\n".join(both[-lines:])

    def check(self, rc=0):
        """Asserts the exit status, showing the end of the output when it is not `rc`."""
        assert self.rc == rc, "%s exited %s, expected %s:\n%s" % (self.name, self.rc, rc, self.tail())
        return self

    @property
    def records(self):
        """Every record of the metrics file, in order; each line must be one JSON object."""
        if self._records is None:
            self._records = read_metrics(self.metrics_path)
        return self._records

    def events(self, kind):
        return [r for r in self.records if r["event"] == kind]

    @property
    def progress(self):
        return self.events("progress")

    @property
    def evals(self):
        return self.events("eval")

    @property
    def checkpoints(self):
        return self.events("checkpoint")

    @property
    def start(self):
        starts = self.events("start")
        assert starts, "%s wrote no start record to %s" % (self.name, self.metrics_path)
        return starts[-1]

    @property
    def end(self):
        ends = self.events("end")
        assert ends, "%s wrote no end record to %s:\n%s" % (self.name, self.metrics_path, self.tail())
        return ends[-1]

    def steps(self, with_loss=True):
        """(epoch, step, global_step, lr[, loss]) of each progress record: what equal runs share."""
        keys = ("epoch", "step", "global_step", "lr") + (("loss",) if with_loss else ())
        return [tuple(p[k] for k in keys) for p in self.progress]


def read_metrics(path, growing=False):
    """The records of the metrics file at `path` ([] when there is none). With `growing` (a run
    still writing it), a last line not yet ended is left for later instead of failing."""
    records = []
    if path is False or not os.path.exists(path):
        return records
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if growing and not line.endswith("\n"):
                break
            assert line.endswith("\n"), "%s:%d: a line cut short: %r" % (path, number, line)
            record = json.loads(line)
            assert isinstance(record, dict) and "event" in record and "time" in record, (
                "%s:%d: not a metrics record: %r" % (path, number, line))
            records.append(record)
    return records


def steps_of(*runs, with_loss=True):
    """The steps of several runs one after the other (a stopped run and its resumption)."""
    return [s for run in runs for s in run.steps(with_loss)]


class Trainer:
    """tools/train and its tiny test datasets, under one temporary directory."""

    def __init__(self, tmp_dir):
        self.dir = str(tmp_dir)
        self.train = tool("HVX_TRAIN")
        self.env = dict(os.environ)
        # Sanitizer builds: LibTorch's allocations at exit are not leaks of ours.
        asan = self.env.get("ASAN_OPTIONS", "")
        self.env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "detect_leaks=0"

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def tiny_config(self, model, num_train, num_test, batch, epochs, name="tiny"):
        """A Fashion-MNIST-shaped dataset of num_train + num_test images (make_tiny_idx.py) and a
        config `name`.pbtxt training `model` on it (None: no model section, for an override to
        give): 3 train shards, eval batch 16, shuffle seed 7, SGD lr 0.05 momentum 0.9, a progress
        record every step, one thread. Returns its path."""
        idx = self.path(name + "_idx")
        subprocess.run(["python3", tool("HVX_MAKE_IDX"), idx, str(num_train), str(num_test)],
                       check=True)
        shards = self.path(name + "_shards")
        config = self.path(name + ".pbtxt")
        with open(config, "w") as f:
            if model is not None:
                f.write('model { name: "%s" }\n' % model)
            f.write("""data {{
  train_files: "{shards}/train-*"
  eval_files: "{shards}/test-*"
  format: FASHION_MNIST
  batch_size: {batch}
  eval_batch_size: 16
  shuffle_seed: 7
  fashion_mnist_source {{ idx_dir: "{idx}" output_dir: "{shards}" num_train_shards: 3 }}
}}
optimizer {{ lr: 0.05 momentum: 0.9 }}
epochs: {epochs}
logging {{ log_every_steps: 1 }}
seed: 3
threads: 1
""".format(shards=shards, batch=batch, idx=idx, epochs=epochs))
        return config

    def start(self, name, *args, overrides=(), metrics=None, launcher=()):
        """Starts the trainer with `args` and each of `overrides` as --override, its metrics file
        `metrics` (default <dir>/<name>.jsonl, new; False: the config's, as a user's run has), stdout and stderr in <name>.out and .err,
        behind the command `launcher` when given (["hvxrun", "-np", "2", "--"]).
        Returns (Run, Popen); wait with finish()."""
        if metrics is not False:
            metrics = metrics or self.path(name + ".jsonl")
            if metrics == self.path(name + ".jsonl") and os.path.exists(metrics):
                os.unlink(metrics)
        argv = list(launcher) + [self.train] + list(args)
        argv += ["--override=" + o for o in overrides]
        if metrics is not False:
            argv.append('--override=logging { metrics_file: "%s" }' % metrics)
        run = Run(name, argv, self.path(name + ".out"), self.path(name + ".err"), metrics)
        with open(run.out_path, "w") as out, open(run.err_path, "w") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=self.env)
        return run, proc

    def finish(self, run, proc, timeout=200):
        try:
            run.rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            run.rc = "timeout after %d s" % timeout
        return run

    def run(self, name, *args, overrides=(), metrics=None, timeout=200, launcher=()):
        """The trainer to its end (at most `timeout` seconds); see start()."""
        run, proc = self.start(name, *args, overrides=overrides, metrics=metrics, launcher=launcher)
        return self.finish(run, proc, timeout)


def wait_for(predicate, timeout=30, what="the condition"):
    """Polls `predicate` every 50 ms until it is true; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))
