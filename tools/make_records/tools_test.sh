#!/bin/bash
# make_records and inspect_records end to end on the real Fashion-MNIST files and a JPEG tree.
set -u
MAKE="$1"
INSPECT="$2"
FM=/usr/share/datasets/fashion-mnist
OUT="${TEST_TMPDIR:-/tmp}/tools_test"
rm -rf "$OUT"
fail() { echo "FAIL: $*"; exit 1; }

"$MAKE" --idx_images=$FM/train-images-idx3-ubyte.gz --idx_labels=$FM/train-labels-idx1-ubyte.gz \
  --out_dir="$OUT/fm" --prefix=train --shards=4 > "$OUT.make" || fail "make_records (IDX) failed"
[ "$(wc -l < "$OUT.make")" = 4 ] || fail "expected 4 shard paths, got: $(cat "$OUT.make")"
grep -qx "$OUT/fm/train-00003-of-00004" "$OUT.make" || fail "shard naming: $(cat "$OUT.make")"
[ -f "$OUT/fm/train-00000-of-00004.idx" ] || fail "no index file written"

"$INSPECT" "$OUT"/fm/train-0000?-of-00004 > "$OUT.inspect" || fail "inspect_records failed: $(cat "$OUT.inspect")"
grep -q "^total: 60000 records in 4 files$" "$OUT.inspect" || fail "counts: $(cat "$OUT.inspect")"
grep -q "train-00001-of-00004: 15000 records, .* CRCs ok" "$OUT.inspect" || fail "per-file: $(cat "$OUT.inspect")"

"$INSPECT" --dump=0 "$OUT/fm/train-00000-of-00004" > "$OUT.dump" || fail "dump failed"
grep -q "^image/class/label: int64_list\[1\] = 9$" "$OUT.dump" || fail "dump: $(cat "$OUT.dump")"
grep -q "^image/raw: bytes_list\[1\] = <784 bytes>" "$OUT.dump" || fail "dump: $(cat "$OUT.dump")"

# Rebuilding the index gives the writer's index byte for byte.
cp "$OUT/fm/train-00002-of-00004.idx" "$OUT/saved.idx"
rm "$OUT/fm/train-00002-of-00004.idx"
"$INSPECT" --index "$OUT/fm/train-00002-of-00004" > /dev/null || fail "--index failed"
cmp -s "$OUT/saved.idx" "$OUT/fm/train-00002-of-00004.idx" || fail "rebuilt index differs"

# Corrupt one payload byte of the second record of shard 3: exit 1 and file:offset: reason.
F="$OUT/fm/train-00003-of-00004"
SECOND=$(sed -n 2p "$F.idx" | cut -d' ' -f1)
POS=$((SECOND + 300))
B=$(od -An -tu1 -j$POS -N1 "$F" | tr -d ' ')
printf "\\$(printf %03o $(( (B + 1) % 256 )))" | dd of="$F" bs=1 seek=$POS conv=notrunc status=none
"$INSPECT" "$OUT"/fm/train-0000?-of-00004 > "$OUT.bad" 2> "$OUT.bad.err"
RC=$?
[ $RC = 1 ] || fail "expected exit 1 on corruption, got $RC"
grep -q "^$F:$SECOND: corrupted record: data CRC mismatch" "$OUT.bad" || fail "report: $(cat "$OUT.bad")"
grep -q "1 of 4 files could not be read" "$OUT.bad.err" || fail "stderr: $(cat "$OUT.bad.err")"

# Image folder -> ImageNet layout.
"$MAKE" --image_folder=hvx/data/testdata/image_folder --out_dir="$OUT/in" --shards=2 > /dev/null \
  || fail "make_records (image folder) failed"
"$INSPECT" --dump=0 "$OUT"/in/train-* > "$OUT.in" || fail "inspect (image folder) failed"
grep -q "^total: 6 records in 2 files$" "$OUT.in" || fail "image folder counts: $(cat "$OUT.in")"
grep -q "^image/format: bytes_list\[1\] = <4 bytes> \"JPEG\"$" "$OUT.in" || fail "features: $(cat "$OUT.in")"
grep -q "^image/class/synset: bytes_list\[1\] = <6 bytes> \"class[01]\"$" "$OUT.in" || fail "synset: $(cat "$OUT.in")"

# Usage errors.
"$MAKE" --out_dir="$OUT/x" > /dev/null 2>&1; [ $? = 2 ] || fail "make_records without input should exit 2"
"$INSPECT" > /dev/null 2>&1; [ $? = 2 ] || fail "inspect_records without files should exit 2"
"$INSPECT" "$OUT/nonexistent" > "$OUT.nf" 2>&1; [ $? = 1 ] || fail "missing file should exit 1"
echo PASS
