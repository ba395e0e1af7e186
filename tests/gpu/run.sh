#!/usr/bin/env bash
# Runs the GPU kit (built by tests/gpu/kit.sh): every phase under its own time limit, a table last.
#
#   run.sh                       every phase
#   HVX_KIT_BENCH_MAX_BYTES=N    largest allreduce of the bandwidth phase (default 1 GiB)
#   HVX_KIT_LOGS=DIR             where each phase's log goes (default logs/ in the kit)
#
# Phases: libraries (every program's libraries resolve inside the kit or to the machine's C/C++
# runtime, driver, CUDA, NCCL and torch), the CPU tests, the trainer for 40 steps on the CPU, then
# on a GPU: the trainer for 40 steps in float32 and in FP16 with channels_last, CUDA kernels against a CPU
# reference on random inputs, nvJPEG's decoded samples against the CPU decoder's (or, without a GPU or
# libnvjpeg, the reason it gives), the NCCL data plane tests at np=1 under the kit's hydra, the
# registration test, and the allreduce bandwidth per size (nccl-tests convention) with the
# device-to-device copy bandwidth as the ceiling. Without a GPU the GPU phases are SKIPPED with
# the reason. Exit status 0 when no phase failed or timed out.
set -uo pipefail
KIT=$(cd "$(dirname "$0")" && pwd)
LOGS=${HVX_KIT_LOGS:-$KIT/logs}  # e.g. $OUT on a device machine, to bring the logs back
mkdir -p "$LOGS"

# The machine's CUDA runtime and NCCL: a CUDA toolkit, or the NCCL and CUDA wheels of a Python
# environment (torch's), whichever is there; and its LibTorch (the trainer's): torch's own folder
# in that environment, or HVX_KIT_TORCH_SITE's (a site-packages holding torch, to check the kit
# where it was built).
torch_sites=()
for d in ${HVX_KIT_TORCH_SITE:-} /opt/torch/.venv/lib/python3*/site-packages; do
    [[ -d $d/torch/lib ]] && torch_sites+=("$d")
done
machine_libs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    "${torch_sites[@]/%//torch/lib}" "${torch_sites[@]/%//nvidia}"/*/lib /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && machine_libs+=("$d")
done
# nvJPEG, which the GPU JPEG decoder loads by its soname (libnvjpeg.so.13): the machine's nvidia
# wheels hold it as such, or torchvision's wheel a copy under a hashed name, linked here.
rm -f "$KIT"/lib/libnvjpeg.so.*
nvjpeg_found=""
for f in "${torch_sites[@]/%//nvidia}"/*/lib/libnvjpeg.so.*; do [[ -e $f ]] && nvjpeg_found=$f; done
if [[ -z $nvjpeg_found ]]; then
    for f in "${torch_sites[@]/%//torchvision.libs}"/libnvjpeg*.so.*; do
        [[ -e $f ]] && ln -s "$f" "$KIT/lib/libnvjpeg.so.${f##*.so.}" && break
    done
fi
export LD_LIBRARY_PATH="$KIT/lib$(printf ':%s' "${machine_libs[@]}")"
export PATH="$KIT/bin:$PATH"
export MPIEXEC="$KIT/bin/mpiexec.hydra"
provided='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libutil|libresolv|libgcc_s|libstdc\+\+|libcuda|libcudart|libnccl)\.'

rows=()
failed=0
row() { rows+=("$(printf '%-22s %-8s %7s  %s' "$1" "$2" "$3" "$4")"); }

# phase NAME SECONDS CMD...: runs CMD with a time limit, its output in logs/NAME.log.
phase() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$? took=$((SECONDS - t0))
    local note
    note=$(grep -E 'PASSED|FAILED|SKIPPED' "$LOGS/$name.log" | tail -n 1 | cut -c1-70)
    if [[ $rc == 124 || $rc == 137 ]]; then
        row "$name" TIMEOUT "${took}s" "over ${limit}s"
        failed=$((failed + 1))
    elif [[ $rc != 0 ]]; then
        row "$name" FAIL "${took}s" "rc $rc: ${note:-see logs/$name.log}"
        failed=$((failed + 1))
    elif grep -qE '^\[  SKIPPED \]|^SKIPPED' "$LOGS/$name.log" &&
        ! grep -qE '^\[  PASSED  \] [1-9]' "$LOGS/$name.log"; then
        # GoogleTest prints a skip's reason on the line after "Skipped".
        note=$(grep -m1 -A1 -E ': Skipped$' "$LOGS/$name.log" | tail -n 1)
        [[ -n $note ]] || note=$(grep -m1 -E '^SKIPPED' "$LOGS/$name.log")
        row "$name" SKIP "${took}s" "$(cut -c1-70 <<<"$note")"
    else
        row "$name" PASS "${took}s" "$note"
    fi
}

# ---- libraries: nothing missing, nothing taken from outside the kit but what the machine has
libraries() {
    local bad=0
    read -r -a torch_sites <<<"${TORCH_SITES:-}"
    for b in "$KIT"/bin/*; do
        # Without a torch install the trainer cannot load (its phases say so and skip).
        [[ $(basename "$b") == train && ${#torch_sites[@]} == 0 ]] && continue
        while read -r line; do
            case $line in
                *"not found"*) echo "$(basename "$b"): $line"; bad=1 ;;
                *"=> /"*)
                    name=${line%% *}
                    path=$(awk '{print $3}' <<<"$line")
                    if [[ $path != "$KIT/lib/"* && ! $name =~ $provided ]] && ! from_machine "$path"; then
                        echo "$(basename "$b"): $name comes from $path, outside the kit"
                        bad=1
                    fi
                    ;;
            esac
        done < <(ldd "$b" 2>&1)
    done
    [[ $bad == 0 ]] && echo "PASSED: every library resolves in the kit or to the machine's own"
    return $bad
}
# from_machine PATH: PATH is in the machine's torch install (LibTorch, the nvidia-* wheels) or its
# CUDA toolkit (the libraries LibTorch's CUDA build loads).
from_machine() {
    local site
    for site in "${torch_sites[@]}" /usr/local/cuda; do [[ $1 == "$site"/* ]] && return 0; done
    return 1
}
export -f libraries from_machine
export KIT LOGS provided
export TORCH_SITES="${torch_sites[*]}"
phase libraries 60 bash -c libraries

# ---- CPU tests: pass on any machine
for t in policy_test grid_test nccl_error_test comm_cache_test; do
    phase "$t" 120 "$KIT/bin/$t"
done

# ---- the trainer (built against torch 2.11) on the machine's LibTorch: a few steps of the
# Fashion-MNIST CNN on the kit's slice of the data. trainer DEVICE NAME [OVERRIDE]
trainer() {
    local device=$1 name=$2 extra=${3:-}
    local out="$LOGS/$name"
    rm -rf "$out"
    mkdir -p "$out"
    "$KIT/bin/train" --config="$KIT/data/fashion_mnist.pbtxt" --override="epochs: 1 device: \"$device\"
        data { train_files: \"$out/data/train-*\" eval_files: \"$out/data/test-*\"
               fashion_mnist_source { idx_dir: \"$KIT/data\" output_dir: \"$out/data\" } }
        logging { max_steps_per_epoch: 40 log_every_steps: 20 } threads: 2
        checkpoint { dir: \"$out/checkpoints\" } summaries_dir: \"\" $extra" 2>&1 | tee "$out.txt"
    [[ ${PIPESTATUS[0]} == 0 ]] || return 1
    # 40 steps of this CNN reach about 0.77 on the CPU: below 0.5 the device computed garbage.
    local acc
    acc=$(sed -nE 's/^done: .* eval accuracy ([0-9.]+) .*/\1/p' "$out.txt")
    awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.5) }' || { echo "FAILED: eval accuracy ${acc:-?} < 0.5"; return 1; }
    echo "PASSED: $device, eval accuracy $acc after 40 steps"
}
export -f trainer
if [[ ${#torch_sites[@]} == 0 ]]; then
    for p in trainer_cpu trainer_gpu trainer_gpu_fp16; do
        row "$p" SKIP - "no torch install (/opt/torch/.venv, HVX_KIT_TORCH_SITE) for LibTorch"
    done
else
    phase trainer_cpu 240 bash -c 'trainer cpu trainer_cpu'
    if [[ ! -e /dev/nvidiactl ]]; then
        for p in trainer_gpu trainer_gpu_fp16; do row "$p" SKIP - "no GPU (/dev/nvidiactl)"; done
    else
        phase trainer_gpu 240 bash -c 'trainer cuda trainer_gpu'
        phase trainer_gpu_fp16 240 bash -c 'trainer cuda trainer_gpu_fp16 "precision: FP16 model { channels_last: true }"'
    fi
fi

# ---- GPU phases: each test skips itself, with its reason, where there is no device; they need
# the machine's CUDA runtime and NCCL to load at all.
gpu_reason=""
missing=$(ldd "$KIT/bin/cuda_nccl_link_test" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')
[[ -n $missing ]] && gpu_reason="the machine lacks ${missing}(a CUDA runtime and NCCL)"
if [[ -n $gpu_reason ]]; then
    for p in kernels_test nccl_data_plane_np1 register_test cuda_nccl_link_test gpu_jpeg_test \
        allreduce_bandwidth; do
        row "$p" SKIP - "$gpu_reason"
    done
else
    command -v nvidia-smi >/dev/null && nvidia-smi -L >"$LOGS/gpu.txt" 2>&1
    phase kernels_test 180 "$KIT/bin/kernels_test"
    HVX_TEST_NP=1 HVX_TEST_TIMEOUT_S=170 phase nccl_data_plane_np1 200 \
        "$KIT/bin/nccl_data_plane_np1_test"
    phase register_test 60 "$KIT/bin/register_test"
    phase cuda_nccl_link_test 60 "$KIT/bin/cuda_nccl_link_test"
    phase gpu_jpeg_test 120 "$KIT/bin/gpu_jpeg_test"
    phase allreduce_bandwidth 240 "$KIT/bin/nccl_allreduce_bench" \
        --max_bytes="${HVX_KIT_BENCH_MAX_BYTES:-1073741824}" --iters=20
fi

echo "== GPU kit: $(cat "$LOGS/gpu.txt" 2>/dev/null | head -n 1)"
if [[ -s $LOGS/allreduce_bandwidth.log ]]; then
    echo "-- allreduce, float32 sum in place (nccl-tests convention; copy = device-to-device ceiling)"
    grep -vE '^\[' "$LOGS/allreduce_bandwidth.log" | head -n 20
fi
printf '%-22s %-8s %7s  %s\n' phase result time note
printf '%s\n' "${rows[@]}"
echo "$failed phase(s) failed"
exit $((failed != 0))
