# Shared by the trainer's end-to-end tests: a tiny dataset and config, and the sample audit.

# tiny_config DIR MODEL NUM_TRAIN NUM_TEST BATCH EPOCHS: writes DIR/idx, DIR/tiny.pbtxt.
tiny_config() {
    local dir=$1 model=$2 ntrain=$3 ntest=$4 batch=$5 epochs=$6
    python3 "$MAKE_IDX" "$dir/idx" "$ntrain" "$ntest" || return 1
    cat >"$dir/tiny.pbtxt" <<EOT
model { name: "$model" }
data {
  train_files: "$dir/shards/train-*"
  eval_files: "$dir/shards/test-*"
  format: FASHION_MNIST
  batch_size: $batch
  eval_batch_size: 16
  shuffle_seed: 7
  fashion_mnist_source { idx_dir: "$dir/idx" output_dir: "$dir/shards" num_train_shards: 3 }
}
optimizer { lr: 0.05 momentum: 0.9 }
epochs: $epochs
logging { log_every_steps: 1 }
seed: 3
threads: 1
EOT
}

# tiny_shards DIR MODEL NUM_TRAIN NUM_TEST BATCH EPOCHS: tiny_config, then one step of $TRAIN on it,
# which writes the shards (DIR/shards) that every later run reads; exits the test if either fails.
tiny_shards() {
    local dir=$1
    tiny_config "$@" || { echo "FAIL: could not write the dataset"; exit 1; }
    timeout -k 5 120 "$TRAIN" --config="$dir/tiny.pbtxt" --override='epochs: 1 logging { max_steps_per_epoch: 1 }' \
        --override="checkpoint { dir: \"$dir/prep-ck\" }" >"$dir/prep.out" 2>&1 ||
        { echo "FAIL: preparing shards"; tail -n 20 "$dir/prep.out"; exit 1; }
}

# audit SAMPLE_LOG_DIR NP EPOCHS NUM_SAMPLES: per epoch, the ranks' id sets are disjoint, cover
# 0..NUM_SAMPLES-1 and are equal in size. Prints one line per failed check; returns their count.
audit() {
    local dir=$1 np=$2 epochs=$3 n=$4 e r bad=0 sizes
    for ((e = 0; e < epochs; e++)); do
        sizes=""
        for ((r = 0; r < np; r++)); do
            local f="$dir/rank$r-epoch$e.txt"
            [[ -f $f ]] || { echo "FAIL: missing $f"; bad=$((bad + 1)); continue; }
            sizes="$sizes $(wc -l <"$f")"
        done
        if [[ $(tr ' ' '\n' <<<"$sizes" | sed '/^$/d' | sort -u | wc -l) != 1 ]]; then
            echo "FAIL: epoch $e: ranks trained on different numbers of samples:$sizes"; bad=$((bad + 1))
        fi
        local dups
        dups=$(cat "$dir"/rank*-epoch$e.txt | sort -n | uniq -d | head -5 | tr '\n' ' ')
        [[ -z $dups ]] || { echo "FAIL: epoch $e: samples on more than one rank: $dups"; bad=$((bad + 1)); }
        if ! diff <(cat "$dir"/rank*-epoch$e.txt | sort -n | uniq) <(seq 0 $((n - 1))) >/dev/null; then
            echo "FAIL: epoch $e: the union of the ranks' samples is not 0..$((n - 1))"; bad=$((bad + 1))
        fi
        if diff -q "$dir/rank0-epoch$e.txt" "$dir/rank0-epoch$(((e + 1) % epochs)).txt" >/dev/null && ((epochs > 1)); then
            echo "FAIL: epoch $e: rank 0 saw the same order in two epochs (no shuffle)"; bad=$((bad + 1))
        fi
    done
    return $bad
}

# losses FILE...: rank 0's progress lines, "epoch E/N step S/M loss L lr R", in order.
losses() { sed -nE 's/^\[0\] (epoch [0-9]+\/[0-9]+ step [0-9]+\/[0-9]+ loss [0-9.e-]+ lr [0-9.e-]+).*/\1/p' "$@"; }

check() {  # check NAME STATUS
    if [[ $2 == 0 ]]; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}
