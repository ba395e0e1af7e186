#!/usr/bin/env bash
# examples/pytorch_mnist.py: one process and 2 ranks under hvxrun, 3 epochs each; the final
# accuracies agree within 0.5 points and the 2-rank job's lines carry hvxrun's rank prefix. The two
# runs go side by side (each with its own copy of the data): three processes' work on the machine's
# cores in about the time of the one-process run alone.
#   pytorch_mnist_test.sh HVXRUN PYTHON EXAMPLE
set -uo pipefail
HVXRUN=$(readlink -f "$1"); PYTHON=$(readlink -f "$2"); EXAMPLE=$(readlink -f "$3")
export PYTHONPATH="$PWD/hvx/python"
T=${TEST_TMPDIR:-$(mktemp -d)}
cd "$T" || exit 1
failures=0
check() { if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi; }
args=(--epochs 3)

timeout -k 5 600 "$PYTHON" "$EXAMPLE" "${args[@]}" --cache-dir "$T/cache1" >one.out 2>one.err &
one_pid=$!
timeout -k 5 600 "$HVXRUN" -np 2 -- "$PYTHON" "$EXAMPLE" "${args[@]}" --cache-dir "$T/cache2" \
  >two.out 2>two.err
two_rc=$?
wait "$one_pid"
one_rc=$?
check "one process exits 0 (rc=$one_rc)" "$one_rc"
check "2 ranks under hvxrun exit 0 (rc=$two_rc)" "$two_rc"
one=$(sed -nE 's/^final accuracy ([0-9.]+)$/\1/p' one.out)
two=$(sed -nE 's/^\[0\] final accuracy ([0-9.]+)$/\1/p' two.out)
echo "final accuracy: one process ${one:-?}, 2 ranks ${two:-?}"
[[ -n $one && -n $two ]] && python3 -c "import sys; sys.exit(abs($one - $two) > 0.005)"
check "accuracies within 0.5 points" $?
grep -qE '^\[0\] Train Epoch: 3 ' two.out && grep -qE '^\[0\] Test set: Average loss' two.out
check "rank 0's progress and test lines carry the [0] prefix" $?
! grep -vqE '^\[[01]\]( |$)' two.out
check "every line of the 2-rank job's output carries a rank prefix" $?
grep -qE '^\[1\] I.* hvx initialized: rank 1/2' two.err
check "rank 1's log line carries [1]" $?
[[ $failures == 0 ]] || { tail -n 20 one.err two.err; }
echo "failures: $failures"
[[ $failures == 0 ]]
