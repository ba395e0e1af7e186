#!/usr/bin/env bash
# fuzz_main's packed corpus (fuzz_corpus/NAME.corpus): --pack writes the inputs of files and
# directories sorted, without duplicates or the target's built-in seeds, in the documented bytes;
# the test reads them back as they were; a pack cut short is refused, not replayed in part.
#   fuzz_pack_test.sh FUZZ_TEST_BINARY
set -euo pipefail
BIN=$1
T=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" --write_seeds="$T/builtin" >/dev/null
builtins=$(ls "$T/builtin" | wc -l)
mkdir -p "$T/in"
printf 'a\nb' >"$T/in/1"
: >"$T/in/2"
printf '\000\n12\n' >"$T/in/3"
cp "$T/in/1" "$T/in/4"               # a duplicate
cp "$T/builtin/seed-0" "$T/in/5"     # a built-in seed
"$BIN" --pack="$T/p.corpus" "$T/in" | grep -qF "packed 3 inputs" || fail "--pack did not say 3 inputs"
printf 'hvx fuzz corpus 1\n0\n\n5\n\000\n12\n\n3\na\nb\n' | cmp - "$T/p.corpus" ||
    fail "the pack is not the documented bytes"

"$BIN" --write_seeds="$T/back" "$T/p.corpus" >/dev/null
[[ $(ls "$T/back" | wc -l) == $((builtins + 3)) ]] || fail "reading the pack back gave $(ls "$T/back" | wc -l) seeds"
cmp "$T/back/seed-$builtins" "$T/in/2" && cmp "$T/back/seed-$((builtins + 1))" "$T/in/3" &&
    cmp "$T/back/seed-$((builtins + 2))" "$T/in/1" || fail "an input read back differs"

head -c -2 "$T/p.corpus" >"$T/cut.corpus"
if "$BIN" --iterations=0 "$T/cut.corpus" 2>"$T/err"; then fail "a pack cut short was replayed"; fi
grep -qF "cut.corpus: a packed corpus cut short or with a bad length" "$T/err" || fail "$(cat "$T/err")"
echo "PASS"
