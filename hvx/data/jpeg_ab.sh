#!/usr/bin/env bash
# The JPEG pipeline of this checkout against the one of another commit, on the same files, in
# one script: builds //hvx/data:bench -c opt at REV in a temporary worktree, then runs the two
# benches' JPEG sections alternately (ROUNDS times) and prints the per-decode-thread ratio.
#   hvx/data/jpeg_ab.sh REV [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
REV=$1; ROUNDS=${2:-2}
DIR=${DIR:-/tmp/hvx_data_bench}
cache=(--disk_cache="${HOME:-/root}/.cache/hvx-bazel-disk")
old=$(mktemp -d)
git worktree add -q --detach "$old/src" "$REV"
trap 'git worktree remove --force "$old/src"; rm -rf "$old"' EXIT
(cd "$old/src" && bazel build -c opt "${cache[@]}" //hvx/data:bench >/dev/null 2>&1 &&
    cp bazel-bin/hvx/data/bench "$old/bench" && bazel shutdown >/dev/null 2>&1)
bazel build -c opt "${cache[@]}" //hvx/data:bench >/dev/null 2>&1
cp bazel-bin/hvx/data/bench "$old/bench.new"
# Both read the photo-like files of this checkout's bench (made by its first run).
"$old/bench.new" --dir="$DIR" --sections=jpeg >/dev/null
for ((r = 1; r <= ROUNDS; r++)); do
    for side in old new; do
        bin=$old/bench; [[ $side == new ]] && bin=$old/bench.new
        # The old bench makes its own files; point it at the new ones by name.
        ln -sf "$DIR/jpeg-photo-600" "$DIR/jpeg-600"
        ln -sf "$DIR/jpeg-photo-600.idx" "$DIR/jpeg-600.idx" 2>/dev/null || true
        "$bin" --dir="$DIR" --sections=jpeg | grep -E 'pipeline, 1 decode thread' |
            sed -E "s/^/$side round $r: /"
    done
done
