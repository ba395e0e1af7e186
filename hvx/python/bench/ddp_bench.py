#!/usr/bin/env python3
"""hvx.torch's DistributedOptimizer against torch.nn.parallel.DistributedDataParallel on gloo.

    python3 ddp_bench.py [--procs 2] [--rounds 3] [--steps N]   # the driver
    python3 ddp_bench.py --flight --rounds 5   # hvx's flight recorder on against off

The driver starts each measurement as its own job, alternating them in every round so all see the
same machine: hvx under hvxrun (which binds each rank to its block of the CPUs) and again with
--bind-to none, DDP as PROCS processes joined over gloo on loopback as torchrun starts them
(unbound), DDP again with each process bound to the block hvxrun would give it, and PROCS bare
processes at once that never communicate. hvx.torch keeps the host memory a step frees for the
next step (glibc's heap settings and LibTorch's CPU allocator, hvx/torch/host_allocator.h), which
DDP and the bare processes do not; DDP runs once more with the same glibc settings given through
the environment (DDP, kept memory), so that the part of the difference that comes from memory shows.
Each job runs, per process:
  cnn:   training steps of the trainer's built-in CNN (hvx/train/models.cc) on batches of 64
         Fashion-MNIST-shaped images, samples/s over all ranks;
  grads: then the ResNet-50 gradient set (torchvision's resnet50 parameters: 161 tensors, 102 MB)
         made by one trivial backward and averaged over the ranks, per step;
  single: (one process) the CNN plain, then wrapped by hvx.torch.DistributedOptimizer at size 1;
  bare:   (one process, hvx never imported) the CNN plain.
It prints medians and the ratios hvx / DDP (higher is better), hvx and DDP / the bare processes,
and hvx / plain.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--procs", type=int, default=2)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--grad-steps", type=int, default=10)
parser.add_argument("--cnn-steps", type=int, default=40)
parser.add_argument("--hvxrun", default="hvxrun")
parser.add_argument("--flight", action="store_true",
                    help="only hvx, with its flight recorder on and off (HVX_FLIGHT_RECORDER=0) "
                         "in turn: what the recorder costs")
parser.add_argument("--worker", choices=["hvx", "ddp", "single", "bare"], help=argparse.SUPPRESS)
parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)


def cnn():
    """The trainer's built-in "cnn" model."""
    from hvx.models import SmallCnn
    return SmallCnn()


class GradientSet(nn.Module):
    """Parameters shaped as ResNet-50's; backward gives each the gradient 1 (cheap compute)."""

    def __init__(self):
        super().__init__()
        import torchvision
        shapes = [p.shape for p in torchvision.models.resnet50().parameters()]
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(s)) for s in shapes])

    def forward(self):
        return sum(p.sum() for p in self.params)


def timed_steps(step, steps, warmup=2):
    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def idle_cpu_share(seconds=2.0):
    """The share of a core this process uses while its only thread sleeps."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(seconds)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / seconds


def cpu_block(rank, procs):
    """The CPUs hvxrun's --bind-to core gives local rank `rank` of `procs` (hvx/launch's
    CpuBlock): consecutive equal blocks of the allowed CPUs, the first ones one CPU more."""
    cpus = sorted(os.sched_getaffinity(0))
    if procs > len(cpus):
        return cpus
    base, extra = divmod(len(cpus), procs)
    first = rank * base + min(rank, extra)
    return cpus[first:first + base + (1 if rank < extra else 0)]


def plain_cnn():
    """The CNN, a batch, and one plain SGD step of it: (model, x, y, step)."""
    model = cnn()
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    plain = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        plain.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        plain.step()
    return model, x, y, step


def worker(args):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    result = {}
    if args.worker == "bare":
        _, _, _, bare_step = plain_cnn()
        times = [timed_steps(bare_step, args.cnn_steps) for _ in range(3)]
        print("RESULT " + json.dumps({"plain": 64 / statistics.median(times)}), flush=True)
        return
    if args.worker == "single":
        model, x, y, plain_step = plain_cnn()
        import hvx.torch as hvd
        hvd.init()
        wrapped = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01,
                                                           momentum=0.9),
                                           named_parameters=model.named_parameters())

        def hvx_step():
            wrapped.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            wrapped.step()
        times = {"plain": [], "hvx": []}
        for _ in range(3):  # interleaved
            times["plain"].append(timed_steps(plain_step, args.cnn_steps))
            times["hvx"].append(timed_steps(hvx_step, args.cnn_steps))
        result = {k: 64 / statistics.median(v) for k, v in times.items()}
        print("RESULT " + json.dumps(result), flush=True)
        return

    if args.worker == "hvx":
        import hvx.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()

        def wrap(model):
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                           named_parameters=model.named_parameters())
            return model, opt
        idle = hvd.allreduce(torch.tensor([idle_cpu_share()]), op=hvd.Max).item()
    else:
        import torch.distributed as dist
        rank, size = args.rank, args.procs
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port,
                                rank=rank, world_size=size)

        def wrap(model):
            ddp = nn.parallel.DistributedDataParallel(model)
            return ddp, torch.optim.SGD(ddp.parameters(), lr=0.01)
        share = torch.tensor([idle_cpu_share()])
        dist.all_reduce(share, op=dist.ReduceOp.MAX)
        idle = share.item()
    result["idle_cpu"] = idle

    # The CNN's training steps, first, as a training script runs them: after the gradient set,
    # glibc's heap has grown and raised its mmap threshold on the 102 MB it freed, so that a DDP
    # process measured then no longer paid the page faults a fresh one pays every step.
    torch.manual_seed(rank)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    model, opt = wrap(cnn())

    def cnn_step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    result["cnn_samples_per_s"] = 64 * size / timed_steps(cnn_step, args.cnn_steps)

    # The gradient set: backward + the exchange, per step (lr 0: the parameters stay put).
    model, opt = wrap(GradientSet())
    for g in opt.param_groups:
        g["lr"] = 0.0

    def grad_step():
        opt.zero_grad()
        model().backward()
        opt.step()
    result["grads_s"] = timed_steps(grad_step, args.grad_steps)
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def run_job(args, kind):
    me = os.path.abspath(__file__)
    common = ["--grad-steps", str(args.grad_steps), "--cnn-steps", str(args.cnn_steps)]
    if kind in ("hvx", "hvx_unbound", "hvx_no_flight"):
        cmd = [args.hvxrun, "-np", str(args.procs), "--bind-to",
               "none" if kind == "hvx_unbound" else "core"]
        if kind == "hvx_no_flight":
            cmd += ["-x", "HVX_FLIGHT_RECORDER=0"]
        cmd += ["--", sys.executable, me, "--worker", "hvx"]
        outs = [subprocess.run(cmd + common, capture_output=True, text=True, timeout=900)]
    elif kind in ("single", "bare"):
        outs = [subprocess.run([sys.executable, me, "--worker", kind] + common,
                               capture_output=True, text=True, timeout=900)]
    elif kind == "bare_procs":
        # PROCS bare processes at once, unbound as torchrun starts them: their samples/s summed.
        procs = [subprocess.Popen([sys.executable, me, "--worker", "bare"] + common,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(args.procs)]
        rates = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                sys.exit("bare_procs job failed (%d):\n%s%s" % (p.returncode, out[-2000:],
                                                                err[-2000:]))
            rates += [json.loads(l.split("RESULT ", 1)[1])["plain"] for l in out.splitlines()
                      if "RESULT " in l]
        if len(rates) != args.procs:
            sys.exit("bare_procs job: %d results from %d processes" % (len(rates), args.procs))
        return {"cnn_samples_per_s": sum(rates)}
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        def bind(r):
            if kind == "ddp_bound":
                block = cpu_block(r, args.procs)
                return lambda: os.sched_setaffinity(0, block)
            return None
        env = dict(os.environ)
        if kind == "ddp_kept":
            # What hvx's RetainFreedHeapMemory sets with mallopt (hvx/common/memory.cc).
            env.update(MALLOC_TRIM_THRESHOLD_=str(1 << 30), MALLOC_MMAP_THRESHOLD_=str(32 << 20))
        procs = [subprocess.Popen([sys.executable, me, "--worker", "ddp", "--rank", str(r),
                                   "--port", str(port), "--procs", str(args.procs)] + common,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=bind(r), env=env)
                 for r in range(args.procs)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            outs.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    for o in outs:
        if o.returncode != 0:
            sys.exit("%s job failed (%d):\n%s%s" % (kind, o.returncode, o.stdout[-2000:],
                                                    o.stderr[-2000:]))
        for line in o.stdout.splitlines():
            if "RESULT " in line:
                return json.loads(line.split("RESULT ", 1)[1])
    sys.exit("%s job printed no result" % kind)


def main():
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.flight:
        runs = {"hvx": [], "hvx_no_flight": []}
    else:
        runs = {"hvx": [], "hvx_unbound": [], "ddp": [], "ddp_bound": [], "ddp_kept": [],
                "bare_procs": [], "single": [], "bare": []}
    for _ in range(args.rounds):
        for kind in runs:
            runs[kind].append(run_job(args, kind))

    def med(kind, key):
        return statistics.median(r[key] for r in runs[kind])
    if args.flight:
        on, off = runs["hvx"], runs["hvx_no_flight"]
        print("%d processes, %d rounds, hvx with its flight recorder on and off in turn (medians)"
              % (args.procs, args.rounds))
        print("CNN samples/s: on %.0f, off %.0f -> on / off %.4f (rounds %s)" % (
            med("hvx", "cnn_samples_per_s"), med("hvx_no_flight", "cnn_samples_per_s"),
            med("hvx", "cnn_samples_per_s") / med("hvx_no_flight", "cnn_samples_per_s"),
            ", ".join("%.3f" % (a["cnn_samples_per_s"] / b["cnn_samples_per_s"])
                      for a, b in zip(on, off))))
        print("ResNet-50 gradient set per step: on %.2f ms, off %.2f ms -> on / off %.4f "
              "(rounds %s)" % (
                  1e3 * med("hvx", "grads_s"), 1e3 * med("hvx_no_flight", "grads_s"),
                  med("hvx", "grads_s") / med("hvx_no_flight", "grads_s"),
                  ", ".join("%.3f" % (a["grads_s"] / b["grads_s"]) for a, b in zip(on, off))))
        return
    mb = 4 * sum(p.numel() for p in GradientSet().parameters()) / 1e6
    print("%d processes, %d rounds (medians; each round runs hvx, hvx unbound, DDP, DDP bound, "
          "DDP with kept memory, %d bare processes, single, bare in turn)"
          % (args.procs, args.rounds, args.procs))
    print("ResNet-50 gradient set (161 tensors, %.0f MB) per step: hvx %.1f ms, DDP/gloo %.1f ms"
          " -> hvx %.2fx" % (mb, 1e3 * med("hvx", "grads_s"), 1e3 * med("ddp", "grads_s"),
                              med("ddp", "grads_s") / med("hvx", "grads_s")))
    cnn = {kind: med(kind, "cnn_samples_per_s") for kind in ("hvx", "hvx_unbound", "ddp",
                                                             "ddp_bound", "ddp_kept",
                                                             "bare_procs")}
    print("CNN training, samples/s over all ranks: hvx %.0f, DDP/gloo %.0f -> hvx %.2fx"
          % (cnn["hvx"], cnn["ddp"], cnn["hvx"] / cnn["ddp"]))
    print("  unbound (hvxrun --bind-to none): hvx %.0f -> %.2fx DDP; DDP/gloo bound as hvxrun "
          "binds: %.0f -> hvx %.2fx" % (cnn["hvx_unbound"], cnn["hvx_unbound"] / cnn["ddp"],
                                       cnn["ddp_bound"], cnn["hvx"] / cnn["ddp_bound"]))
    print("  DDP/gloo with glibc keeping freed memory (MALLOC_TRIM_THRESHOLD_, "
          "MALLOC_MMAP_THRESHOLD_ as hvx sets them): %.0f -> hvx %.2fx"
          % (cnn["ddp_kept"], cnn["hvx"] / cnn["ddp_kept"]))
    print("  %d bare processes at once (no exchange, default memory settings): %.0f -> hvx %.2fx, "
          "DDP/gloo %.2fx of it" % (args.procs, cnn["bare_procs"], cnn["hvx"] / cnn["bare_procs"],
                                    cnn["ddp"] / cnn["bare_procs"]))
    print("  per round, hvx / DDP: %s" % ", ".join(
        "%.2f" % (h["cnn_samples_per_s"] / d["cnn_samples_per_s"])
        for h, d in zip(runs["hvx"], runs["ddp"])))
    print("an initialized rank asleep for 2 s, the busiest rank's share of a core: hvx %.1f%%, "
          "DDP/gloo %.1f%%" % (100 * med("hvx", "idle_cpu"), 100 * med("ddp", "idle_cpu")))
    print("one process, CNN samples/s: plain PyTorch %.0f, hvx DistributedOptimizer %.0f -> "
          "%.3fx; a bare process (hvx never imported) %.0f -> hvx %.3fx"
          % (med("single", "plain"), med("single", "hvx"),
             med("single", "hvx") / med("single", "plain"), med("bare", "plain"),
             med("single", "hvx") / med("bare", "plain")))


if __name__ == "__main__":
    main()
