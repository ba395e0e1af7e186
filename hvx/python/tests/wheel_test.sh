#!/usr/bin/env bash
# The wheel, pip-installed offline into a virtualenv with system site packages (Debian's torch),
# imports as hvx.torch from there and allreduces on 2 ranks under hvxrun.
#   wheel_test.sh WHEEL HVXRUN
set -uo pipefail
WHEEL=$(readlink -f "$1"); HVXRUN=$(readlink -f "$2")
T=${TEST_TMPDIR:-$(mktemp -d)}
cd "$T" || exit 1
/usr/bin/python3 -m venv --system-site-packages venv || { echo "FAIL: python3 -m venv"; exit 1; }
cp "$WHEEL" "$T/" && venv/bin/pip install --no-index --quiet "$T/$(basename "$WHEEL")" \
    || { echo "FAIL: pip install $(basename "$WHEEL")"; exit 1; }
venv/bin/pip check >pip_check.txt 2>&1; echo "pip check: $(cat pip_check.txt)"
cat >probe.py <<'EOT'
import hvx, hvx.torch as hvd, torch
assert "/venv/" in hvx.__file__, hvx.__file__
hvd.init()
print("sum", hvd.allreduce(torch.ones(3) * (hvd.rank() + 1), op=hvd.Sum).tolist())
EOT
"$HVXRUN" -np 2 -- "$T/venv/bin/python3" probe.py >out.txt 2>err.txt
rc=$?
cat out.txt
[[ $rc == 0 ]] || { echo "FAIL: the job exited $rc"; tail -n 20 err.txt; exit 1; }
[[ $(grep -c '^\[[01]\] sum \[3.0, 3.0, 3.0\]$' out.txt) == 2 ]] || { echo "FAIL: wrong sums"; exit 1; }
echo "ok: installed from the wheel, 2 ranks allreduced"
# A Python rank that raises ends the job: hvxrun names it and exits non-zero.
printf 'import hvx.torch as hvd\nhvd.init()\nif hvd.rank() == 1:\n    raise SystemExit("rank 1 gives up")\nhvd.barrier()\n' >fail.py
"$HVXRUN" -np 2 -- "$T/venv/bin/python3" fail.py >fail.out 2>fail.err
rc=$?
[[ $rc != 0 ]] && grep -q 'hvxrun: rank 1 on host .* exited with status 1' fail.err \
    || { echo "FAIL: a failing rank (rc=$rc)"; tail -n 10 fail.err; exit 1; }
echo "ok: a failing rank ends the job (rc=$rc): $(grep -m1 'hvxrun: rank 1' fail.err)"
