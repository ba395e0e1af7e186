#!/usr/bin/env bash
# How long the SageMaker image takes to start training, against the same trainer started on this
# machine, in one run: the seconds from `podman run IMAGE train` (one instance, algo-1, its own
# /opt/ml with the tiny Fashion-MNIST-shaped shards) to rank 0's first step line, and from
# starting hvxrun with the trainer here (the same config, data and one rank) to the same line.
# Prints the image's size and both times (median of RUNS, default 5) and their ratio.
#   bazel run //tests/deploy:image_start_bench [-- RUNS]
# Needs root, podman and runc (tools/setup); builds the image first (build_image.sh).
set -uo pipefail
HVXRUN=$(readlink -f "$1") RANK=$(readlink -f "$2") TRAIN=$(readlink -f "$3") BUILD_IMAGE=$(readlink -f "$4")
CONFIGS=$(dirname "$(readlink -f "$5")") MAKE_IDX=$(readlink -f "$6")
export CONTAINERS_CONF
CONTAINERS_CONF=$(readlink -f "$8")
source "$7"  # tiny_shards, check
runs=${9:-5}
T=$(mktemp -d)
failures=0
source "$(dirname "$(readlink -f "$0")")/podman_lib.sh"
source "$(dirname "$(readlink -f "$0")")/sagemaker_lib.sh"
podman_ready
trap 'rm -rf "$T"' EXIT

N=2400
tiny_shards "$T" mlp $N 40 10 2
mkdir -p "$T/configs"
cp "$CONFIGS"/*.pbtxt "$T/tiny.pbtxt" "$T/configs/"
image=localhost/hvx-sagemaker:bench
build_image "$BUILD_IMAGE" "$image" "$T/configs" >/dev/null
sagemaker_ml "$T" algo-1
ml=$T/algo-1/ml
hyperparameters '{"config": "tiny.pbtxt", "max_steps": "3"}'

# first_step OUT CMD...: seconds from starting CMD to the first "[0] epoch 1/... step" line in OUT.
first_step() {
    local out=$1 t0 i
    shift
    rm -f "$out"
    t0=$(date +%s%N)
    "$@" >"$out" 2>&1 &
    local pid=$!
    for ((i = 0; i < 6000; i++)); do
        grep -qE '^\[0\] epoch 1/[0-9]+ step' "$out" 2>/dev/null && break
        sleep 0.01
    done
    local t1
    t1=$(date +%s%N)
    wait "$pid"
    awk "BEGIN { printf \"%.2f\", ($t1 - $t0) / 1e9 }"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

host=() container=()
for ((r = 0; r < runs; r++)); do
    rm -rf "$ml"/checkpoints/* "$ml"/model/* "$T/host-ck"
    container+=("$(first_step "$T/c.out" podman run --rm --name hvxct-bench --hostname algo-1 \
        -v "$ml:/opt/ml" "$image" train)")
    host+=("$(first_step "$T/h.out" "$HVXRUN" -np 1 -- "$TRAIN" --config="$T/tiny.pbtxt" --max_steps=3 \
        --override="checkpoint { dir: \"$T/host-ck\" }")")
done
h=$(printf '%s\n' "${host[@]}" | median) c=$(printf '%s\n' "${container[@]}" | median)
echo "image $image: $(podman image inspect --format '{{.Size}}' "$image") bytes; base debian:12: $(podman image inspect --format '{{.Size}}' docker.io/library/debian:12) bytes"
echo "to the first step, median of $runs: podman run IMAGE train ${c} s, hvxrun here ${h} s, ratio $(awk "BEGIN { printf \"%.2f\", $c / $h }")"
echo "  container runs: ${container[*]}"
echo "  host runs:      ${host[*]}"
