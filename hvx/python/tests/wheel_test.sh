#!/usr/bin/env bash
# The wheel, pip-installed offline into a virtualenv that sees the torch it was built against
# (Debian's, or the torch 2.x venv's when built with HVX_TORCH_PYTHON), imports as hvx.torch from
# there and allreduces on 2 ranks under hvxrun. pip refuses it where that torch is missing, and
# installed anyway (--no-deps) beside another torch it refuses to import, naming both versions.
#   wheel_test.sh WHEEL HVXRUN PYTHON
set -uo pipefail
WHEEL=$(readlink -f "$1"); HVXRUN=$(readlink -f "$2"); PYTHON=$(readlink -f "$3")
T=${TEST_TMPDIR:-$(mktemp -d)}
cd "$T" || exit 1
cp "$WHEEL" "$T/" && WHEEL=$T/$(basename "$WHEEL")

# What the interpreter is: its torch, and the site-packages holding it.
read -r torch_version torch_dist in_venv site < <("$PYTHON" -c '
import importlib.metadata, sys, sysconfig, torch
print(torch.__version__, importlib.metadata.version("torch"), int(sys.prefix != sys.base_prefix),
      sysconfig.get_paths()["purelib"])') || { echo "FAIL: $PYTHON cannot import torch"; exit 1; }
echo "interpreter: $PYTHON, torch $torch_version (distribution $torch_dist)"

# make_venv DIR: a venv that sees this interpreter's torch: Debian's system site packages, or a
# path file to the parent venv's site-packages (a venv made from a venv does not inherit it).
make_venv() {
    if [[ $in_venv == 0 ]]; then
        "$PYTHON" -m venv --system-site-packages "$1" || return 1
    else
        "$PYTHON" -m venv "$1" || return 1
        echo "$site" >"$("$1/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/parent_venv.pth"
    fi
}

make_venv venv || { echo "FAIL: python3 -m venv"; exit 1; }
venv/bin/pip install --no-index --quiet "$WHEEL" || { echo "FAIL: pip install $(basename "$WHEEL")"; exit 1; }
venv/bin/pip check >pip_check.txt 2>&1; echo "pip check: $(cat pip_check.txt)"
requires=$(venv/bin/python3 -c 'import importlib.metadata as m; print(m.requires("hvx"))')
[[ $requires == "['torch==$torch_dist']" ]] || { echo "FAIL: the wheel requires $requires, not torch==$torch_dist"; exit 1; }
echo "ok: $(basename "$WHEEL") requires torch==$torch_dist"
cat >probe.py <<'EOT'
import hvx, hvx.torch as hvd, torch
assert "/venv/" in hvx.__file__, hvx.__file__
hvd.init()
print("sum", hvd.allreduce(torch.ones(3) * (hvd.rank() + 1), op=hvd.Sum).tolist(), torch.__version__)
EOT
"$HVXRUN" -np 2 -- "$T/venv/bin/python3" probe.py >out.txt 2>err.txt
rc=$?
cat out.txt
[[ $rc == 0 ]] || { echo "FAIL: the job exited $rc"; tail -n 20 err.txt; exit 1; }
[[ $(grep -cxF "sum [3.0, 3.0, 3.0] $torch_version" <(sed -E 's/^\[[01]\] //' out.txt)) == 2 ]] || { echo "FAIL: wrong sums"; exit 1; }
echo "ok: installed from the wheel, 2 ranks allreduced on torch $torch_version"
# A Python rank that raises ends the job: hvxrun names it and exits non-zero.
printf 'import hvx.torch as hvd\nhvd.init()\nif hvd.rank() == 1:\n    raise SystemExit("rank 1 gives up")\nhvd.barrier()\n' >fail.py
"$HVXRUN" -np 2 -- "$T/venv/bin/python3" fail.py >fail.out 2>fail.err
rc=$?
[[ $rc != 0 ]] && grep -q 'hvxrun: rank 1 on host .* exited with status 1' fail.err \
    || { echo "FAIL: a failing rank (rc=$rc)"; tail -n 10 fail.err; exit 1; }
echo "ok: a failing rank ends the job (rc=$rc): $(grep -m1 'hvxrun: rank 1' fail.err)"

# pip refuses the wheel where its torch is not installed.
"$PYTHON" -m venv bare || { echo "FAIL: python3 -m venv bare"; exit 1; }
bare/bin/pip install --no-index "$WHEEL" >bare.out 2>&1
rc=$?
[[ $rc != 0 ]] && grep -qF "torch==$torch_dist" bare.out \
    || { echo "FAIL: pip installed the wheel without its torch (rc=$rc)"; tail -n 5 bare.out; exit 1; }
echo "ok: pip refuses it without torch==$torch_dist: $(grep -m1 -F "torch==$torch_dist" bare.out)"

# Installed past pip beside another torch (Debian's, when this one is a venv's), import refuses.
other=/usr/bin/python3
if [[ $in_venv == 1 ]] && other_version=$("$other" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
        && [[ $other_version != "$torch_version" ]]; then
    "$other" -m venv --system-site-packages other || { echo "FAIL: venv for $other"; exit 1; }
    other/bin/pip install --no-index --no-deps --quiet "$WHEEL" || { echo "FAIL: pip install --no-deps"; exit 1; }
    other/bin/python3 -c "import hvx.torch" >other.out 2>&1
    rc=$?
    msg=$(grep '^ImportError: ' other.out | tail -n 1)
    [[ $rc != 0 ]] && grep -qF "built against torch $torch_version" <<<"$msg" && grep -qF "has torch $other_version" <<<"$msg" \
        || { echo "FAIL: hvx imported beside torch $other_version (rc=$rc)"; tail -n 5 other.out; exit 1; }
    echo "ok: beside torch $other_version, import refuses: ${msg:0:300}"
else
    echo "not checked here: importing beside another torch (this interpreter is not a venv's, or no other torch)"
fi
