#!/usr/bin/env bash
# hvx_info on two ranks prints one JSON line per rank with the documented keys, and --check passes;
# --version names the build.
set -euo pipefail
mpiexec=$1 info=$2
out=$(timeout -k 5 60 "$mpiexec" -n 2 "$info" --check 2>"$TEST_TMPDIR/stderr") || {
  cat "$TEST_TMPDIR/stderr"; echo "hvx_info failed"; exit 1; }
echo "$out"
[[ $(grep -c '^{.*}$' <<<"$out") == 2 ]] || { echo "want 2 JSON lines"; exit 1; }
for r in 0 1; do
  line=$(grep "\"rank\":$r," <<<"$out")
  for key in '"size":2' '"local_size":2' "\"local_rank\":$r" '"cross_rank":0' '"cross_size":1' \
             '"homogeneous":true' '"host":"' '"pid":' '"visible_gpus":' '"check":"pass"'; do
    grep -qF "$key" <<<"$line" || { echo "rank $r line lacks $key: $line"; exit 1; }
  done
done
# Alone with a launcher's variables that say otherwise: fails with the hvxrun command.
if PMI_SIZE=4 "$info" 2>"$TEST_TMPDIR/single" >/dev/null; then echo "singleton not detected"; exit 1; fi
grep -q 'hvxrun -np 4 -H localhost:4 -- ' "$TEST_TMPDIR/single" || { cat "$TEST_TMPDIR/single"; exit 1; }
HVX_ALLOW_SINGLETON=1 PMI_SIZE=4 "$info" | grep -q '"size":1'
# --version: the build, with no job and whatever a launcher's variables say.
version=$(PMI_SIZE=4 "$info" --version)
grep -qE '^hvx_info: hvx (with its GPU backend \(--config=cuda\), NCCL [0-9.]+, CUDA runtime [0-9.]+|without a GPU backend \(built without --config=cuda\))$' <<<"$version" ||
  { echo "--version: $version"; exit 1; }
echo PASS
