#!/usr/bin/env bash
# The GPU image (examples/deploy/sagemaker/Dockerfile.gpu) from the programs of a --config=cuda
# build against PyPI's CUDA torch, as build_image.sh --gpu makes it, then inside it, without a GPU:
#   - every program the image runs finds every library it links (ldd: hvxrun, hvxrun_rank,
#     hvx-train, hvx_info, mpiexec, hydra_pmi_proxy, sshd, ssh), LibTorch's and NVIDIA's from the wheel;
#   - `hvx-train --version` reports torch with CUDA and hvx's GPU backend with NCCL and the CUDA
#     runtime, `hvx_info --version` the same backend;
#   - the image asks the NVIDIA container runtime for the GPUs (NVIDIA_VISIBLE_DEVICES,
#     NVIDIA_DRIVER_CAPABILITIES with compute);
#   - started as SageMaker starts it (`podman run IMAGE train`) where a GPU is evident but unusable
#     (/dev/nvidia0 without the driver's library), the job fails saying that LibTorch sees no GPU,
#     instead of training on the CPU, and /opt/ml/output/failure says so.
# From the workspace root, after
#   bazel build --config=cuda --repo_env=HVX_TORCH_PYTHON=$(tools/torch_venv python) //tools/hvxrun //tools/train //tools/hvx_info
#   tests/deploy/gpu_image_test.sh
# .ci/run runs it after its CUDA build. Needs root, podman and runc; where they are missing, or the
# trainer is not a CUDA build, it prints SKIPPED and passes.
set -uo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF=$PWD/tests/deploy/containers.conf
HVXRUN=$PWD/bazel-bin/tools/hvxrun/hvxrun RANK=$PWD/bazel-bin/tools/hvxrun/hvxrun_rank
TRAIN=$PWD/bazel-bin/tools/train/train MAKE_IDX=$PWD/tests/train/make_tiny_idx.py
source tests/train/lib.sh  # tiny_shards, check
T=$(mktemp -d)
failures=0
source tests/deploy/podman_lib.sh
source tests/deploy/sagemaker_lib.sh
HVX_TORCH_PYTHON="" podman_ready
trap 'rm -rf "$T"; podman rm -f -t 0 hvxct-gpu >/dev/null 2>&1' EXIT
version=$("$TRAIN" --version 2>&1) || { echo "FAIL: $TRAIN --version: $version"; exit 1; }
grep -qF 'with its GPU backend' <<<"$version" ||
    { echo "SKIPPED: $TRAIN is not a --config=cuda build ($version)"; exit 0; }
python=$(tools/torch_venv python) || { echo "FAIL: no torch venv (tools/setup)"; exit 1; }
export HVX_TORCH_SITE
HVX_TORCH_SITE=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

N=240
tiny_shards "$T" mlp $N 40 10 2
mkdir -p "$T/configs"
cp data/*.pbtxt "$T/tiny.pbtxt" "$T/configs/"
image=localhost/hvx-sagemaker:gpu-test
build_image examples/deploy/sagemaker/build_image.sh "$image" "$T/configs" --gpu

in_image() { podman run --rm --entrypoint /bin/sh "$image" -c "$1"; }
missing=$(in_image 'for p in hvxrun hvxrun_rank hvx-train hvx_info mpiexec hydra_pmi_proxy /usr/sbin/sshd ssh; do
    f=$(command -v "$p") || { echo "$p: not on PATH"; continue; }
    ldd "$f" 2>/dev/null | sed -n "s|^\t*\([^ ]*\) => not found|$p: \1|p"
done' 2>&1)
[[ -z $missing ]]
check "every program finds every library it links ($(tr '\n' ' ' <<<"$missing"))" $?
inside=$(in_image 'hvx-train --version' 2>&1)
grep -qE '^hvx-train: torch [0-9.]+ with CUDA [0-9.]+; hvx with its GPU backend \(--config=cuda\), NCCL [0-9.]+, CUDA runtime [0-9.]+$' <<<"$inside"
check "hvx-train --version in the image: $inside" $?
inside=$(in_image 'hvx_info --version' 2>&1)
grep -qE '^hvx_info: hvx with its GPU backend \(--config=cuda\), NCCL [0-9.]+, CUDA runtime [0-9.]+$' <<<"$inside"
check "hvx_info --version in the image: $inside" $?
env=$(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image")
grep -qx 'NVIDIA_VISIBLE_DEVICES=all' <<<"$env" && grep -qE '^NVIDIA_DRIVER_CAPABILITIES=.*compute' <<<"$env"
check "the image asks the NVIDIA runtime for every GPU, for compute" $?

# As SageMaker starts it on a GPU instance whose GPUs did not reach the container.
sagemaker_ml "$T" algo-1
ml=$T/algo-1/ml
hyperparameters '{"config": "tiny.pbtxt", "max_steps": "2"}'
# /dev/nvidia0 as the NVIDIA runtime adds it; no driver library comes with it.
podman run --name hvxct-gpu --hostname algo-1 -v "$ml:/opt/ml" --device /dev/null:/dev/nvidia0 "$image" train \
    >"$T/run.out" 2>"$T/run.err" </dev/null
rc=$?
[[ $rc != 0 ]] && grep -qF 'device: "auto" on rank 0' "$T/run.err" && grep -qF 'LibTorch sees no GPU it can use' "$T/run.err" &&
    ! grep -qE '^\[0\] epoch 1/' "$T/run.out"
check "with GPUs evident and none in the container, the job fails (rc $rc) instead of training on the CPU" $?
[[ $rc != 0 ]] && grep -qF 'LibTorch sees no GPU' "$ml/output/failure" 2>/dev/null
check "and /opt/ml/output/failure says why" $?
((failures == 0)) || { tail -n 20 "$T/run.err"; }
# Earlier builds' layers that no tag holds any more.
podman image prune -f >/dev/null 2>&1
echo "failures: $failures"
[[ $failures == 0 ]]
