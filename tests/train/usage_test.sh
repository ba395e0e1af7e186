#!/usr/bin/env bash
# `train --help` names every bundled config (data/*.pbtxt), so a new one is never left out of it.
#   usage_test.sh TRAIN CONFIG...
set -uo pipefail
TRAIN=$1; shift
help=$("$TRAIN" --help) || { echo "FAIL: train --help exited non-zero"; exit 1; }
failures=0
for config in "$@"; do
    name=$(basename "$config")
    if grep -q -- "$name" <<<"$help"; then echo "ok: --help names $name"; else
        echo "FAIL: --help does not name the bundled config $name"; failures=$((failures + 1)); fi
done
(($# > 0)) || { echo "FAIL: no bundled configs given"; exit 1; }
echo "failures: $failures"
[[ $failures == 0 ]]
