#!/usr/bin/env python3
"""Reads an MPIJob manifest (examples/deploy/kubernetes/mpijob.yaml) as Kubernetes would, with a
YAML parser, and prints what a test needs to start its pods, as shell assignments to `eval`:
IMAGE, SLOTS (slotsPerWorker), WORKERS (replicas), MPI (mpiImplementation), LAUNCHER_POLICY
(launcherCreationPolicy, the operator's default AtStartup when unset), LAUNCHER_CMD and
WORKER_CMD (bash arrays: the containers' `command:` followed by their `args:`), READY_PORT (the
workers' readiness probe's TCP port), and WORKER_MOUNTS (bash array of "VOLUME:PATH[:ro]").

    eval "$(mpijob_manifest.py MANIFEST)"

Exits 1 naming what is missing when the manifest lacks a launcher, workers or their commands.
"""
import shlex
import sys

import yaml


def main(path):
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    jobs = [d for d in docs if d.get("kind") == "MPIJob"]
    if len(jobs) != 1:
        sys.exit(f"{path}: expected one MPIJob, found {len(jobs)}")
    spec = jobs[0]["spec"]
    replicas = spec.get("mpiReplicaSpecs", {})

    def container(role):
        try:
            return replicas[role]["template"]["spec"]["containers"][0]
        except (KeyError, IndexError, TypeError):
            sys.exit(f"{path}: no {role} container in mpiReplicaSpecs")

    launcher, worker = container("Launcher"), container("Worker")
    out = {}
    out["IMAGE"] = shlex.quote(launcher.get("image", ""))
    out["SLOTS"] = str(int(spec.get("slotsPerWorker", 1)))
    out["WORKERS"] = str(int(replicas["Worker"].get("replicas", 1)))
    out["MPI"] = shlex.quote(spec.get("mpiImplementation", "OpenMPI"))
    out["LAUNCHER_POLICY"] = shlex.quote(spec.get("launcherCreationPolicy", "AtStartup"))
    for name, c in (("LAUNCHER_CMD", launcher), ("WORKER_CMD", worker)):
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        if not argv:
            sys.exit(f"{path}: the {name.split('_')[0].lower()} has no command")
        out[name] = "(" + " ".join(shlex.quote(str(a)) for a in argv) + ")"
    probe = (worker.get("readinessProbe") or {}).get("tcpSocket") or {}
    out["READY_PORT"] = str(probe.get("port", ""))
    mounts = []
    for m in worker.get("volumeMounts") or []:
        mounts.append(f"{m['name']}:{m['mountPath']}" + (":ro" if m.get("readOnly") else ""))
    out["WORKER_MOUNTS"] = "(" + " ".join(shlex.quote(m) for m in mounts) + ")"
    for k, v in out.items():
        print(f"{k}={v}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
