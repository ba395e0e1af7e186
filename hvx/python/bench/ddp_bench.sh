#!/usr/bin/env bash
# bazel run //hvx/python:ddp_bench -- [--procs 2] [--rounds 3]: ddp_bench.py with hvx.torch and
# hvxrun from this build.
set -euo pipefail
RF=${RUNFILES_DIR:-$0.runfiles}
R=$RF/hvx
export PYTHONPATH="$R/hvx/python"
exec "$RF/hvx_python/python3.sh" "$R/hvx/python/bench/ddp_bench.py" \
    --hvxrun "$R/tools/hvxrun/hvxrun" "$@"
