#!/usr/bin/env bash
# deadlines_check.py on 2 ranks with a 5 s collective timeout and a 2 s stall check: every test
# passes, and rank 0's stall inspector warned from the Python job, naming the missing rank (-s:
# the engine logs to stderr, which pytest would otherwise capture).
#   deadline_test.sh HVXRUN PYTHON
set -uo pipefail
HVXRUN=$(readlink -f "$1"); PYTHON=$(readlink -f "$2")
ROOT=$PWD
export PYTHONPATH="$ROOT/hvx/python" HVX_COLLECTIVE_TIMEOUT_S=5 HVX_STALL_CHECK_TIME_S=2
cd "${TEST_TMPDIR:-$(mktemp -d)}" || exit 1
"$HVXRUN" -np 2 -- "$PYTHON" -m pytest -q -s -p no:cacheprovider \
    --rootdir "$ROOT/hvx/python/tests" "$ROOT/hvx/python/tests/deadlines_check.py" >out.txt 2>&1
rc=$?
cat out.txt
[[ $rc == 0 ]] || { echo "FAIL: the job exited $rc"; exit 1; }
grep -q 'Some tensors were submitted by only some ranks' out.txt && grep -q '  1: \[barrier\]' out.txt \
    || { echo "FAIL: no stall warning naming rank 1 and the barrier it skipped"; exit 1; }
echo "ok: every wait ended within the timeout, and the stall inspector warned"
