#!/usr/bin/env bash
# Lays out the SageMaker image's files under DEST as the image has them, for the Dockerfile to
# copy (and for //tests/deploy:sagemaker_test to run as they are):
#   DEST/opt/hvx/bin/hvxrun, hvxrun_rank, hvx-train      the launcher and the trainer
#   DEST/opt/hvx/bin/hvx_info                            the job's topology, a check, --version
#   DEST/opt/hvx/configs/*.pbtxt                         the bundled configs
#   DEST/opt/hvx/sagemaker/entry_point.py, setup_ssh.sh  this folder's kit
# From the workspace root, after `bazel build //tools/hvxrun //tools/train //tools/hvx_info`:
#   examples/deploy/sagemaker/stage.sh build/sagemaker
#   docker build -f examples/deploy/sagemaker/Dockerfile -t hvx-sagemaker build/sagemaker
# HVXRUN, HVXRUN_RANK, HVX_TRAIN and HVX_INFO name the programs (default: bazel-bin's; hvx_info
# beside HVXRUN's tools/hvxrun in its build tree), HVX_CONFIGS the
# folder of configs (default the workspace's data/). For the GPU image (Dockerfile.gpu),
# HVX_TORCH_SITE names the site-packages of the PyPI torch the programs were built against: its
# torch/lib and nvidia/*/lib go to DEST/torch-site as they are (LibTorch finds the NVIDIA
# libraries relative to itself; the image has them at /opt/hvx/site, a layer of their own that
# does not change with the programs), and DEST/opt/hvx/ld.so.conf lists them for the loader.
#   stage.sh DEST
set -euo pipefail
dest=${1:?usage: stage.sh DEST}
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$kit/../../.." && pwd)
hvxrun=${HVXRUN:-$src/bazel-bin/tools/hvxrun/hvxrun}
rank=${HVXRUN_RANK:-$src/bazel-bin/tools/hvxrun/hvxrun_rank}
train=${HVX_TRAIN:-$src/bazel-bin/tools/train/train}
# hvx_info: beside hvxrun in the build's tree unless named.
info=${HVX_INFO:-$(dirname "$hvxrun")/../hvx_info/hvx_info}
for f in "$hvxrun" "$rank" "$train" "$info"; do
    [[ -x $f ]] || { echo "stage.sh: $f is not built (bazel build //tools/hvxrun //tools/train //tools/hvx_info)" >&2; exit 1; }
done
mkdir -p "$dest/opt/hvx/bin" "$dest/opt/hvx/configs" "$dest/opt/hvx/sagemaker"
install -m 755 "$hvxrun" "$dest/opt/hvx/bin/hvxrun"
install -m 755 "$rank" "$dest/opt/hvx/bin/hvxrun_rank"
# Not `train`: in an image with the SageMaker training toolkit, that is the toolkit's.
install -m 755 "$train" "$dest/opt/hvx/bin/hvx-train"
install -m 755 "$info" "$dest/opt/hvx/bin/hvx_info"
install -m 644 "${HVX_CONFIGS:-$src/data}"/*.pbtxt "$dest/opt/hvx/configs/"
install -m 755 "$kit/entry_point.py" "$kit/setup_ssh.sh" "$dest/opt/hvx/sagemaker/"
if [[ -n ${HVX_TORCH_SITE:-} ]]; then
    site=$HVX_TORCH_SITE
    [[ -d $site/torch/lib ]] || { echo "stage.sh: $site/torch/lib does not exist (HVX_TORCH_SITE)" >&2; exit 1; }
    : >"$dest/opt/hvx/ld.so.conf"
    for lib in "$site/torch/lib" "$site"/nvidia/*/lib; do
        [[ -d $lib ]] || continue
        rel=${lib#"$site"/}
        mkdir -p "$dest/torch-site/$rel"
        # Shared libraries only: the wheels' static archives and headers are for building.
        find "$lib" -maxdepth 1 \( -name '*.so' -o -name '*.so.*' \) -exec cp -a {} "$dest/torch-site/$rel/" \;
        echo "/opt/hvx/site/$rel" >>"$dest/opt/hvx/ld.so.conf"
    done
fi
echo "stage.sh: the image's files are in $dest/opt/hvx"
