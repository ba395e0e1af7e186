#!/usr/bin/env bash
# Builds hvx's SageMaker image (the Dockerfile beside this script) with podman, from this machine
# alone: the programs bazel built here, staged by stage.sh, on a debian:12 base. Where the base is
# not in podman's storage it is made from Debian's packages with mmdebstrap, using this machine's
# apt sources (no registry is needed), and kept as a tarball in the cache folder for the next time.
# From the workspace root, on Debian 12 (the image has the libraries the programs were built
# against), after `bazel build //tools/hvxrun //tools/train //tools/hvx_info`:
#   examples/deploy/sagemaker/build_image.sh [TAG]          (default TAG: localhost/hvx-sagemaker:cpu)
# The GPU image (Dockerfile.gpu), after building with --config=cuda against PyPI's torch
# (--repo_env=HVX_TORCH_PYTHON=$(tools/torch_venv python)):
#   examples/deploy/sagemaker/build_image.sh --gpu [TAG]    (default TAG: localhost/hvx-sagemaker:gpu)
# with HVX_TORCH_SITE the site-packages of that torch (default: tools/torch_venv's).
# HVXRUN, HVXRUN_RANK, HVX_TRAIN, HVX_INFO and HVX_CONFIGS are stage.sh's. HVX_IMAGE_CACHE is where the base
# tarball is kept (default ~/.cache/hvx/images). Prints the image's id on its last line.
# Then push it to ECR with `podman push`, or run it as SageMaker does (tests/deploy/container_test.sh).
set -euo pipefail
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dockerfile=$kit/Dockerfile
tag=localhost/hvx-sagemaker:cpu
if [[ ${1:-} == --gpu ]]; then
    shift
    dockerfile=$kit/Dockerfile.gpu
    tag=localhost/hvx-sagemaker:gpu
    if [[ -z ${HVX_TORCH_SITE:-} ]]; then
        python=$("$kit/../../../tools/torch_venv" python) ||
            { echo "build_image.sh: --gpu needs HVX_TORCH_SITE or tools/torch_venv's torch" >&2; exit 1; }
        HVX_TORCH_SITE=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    fi
    export HVX_TORCH_SITE
else
    unset HVX_TORCH_SITE
fi
tag=${1:-$tag}
base=docker.io/library/debian:12
cache=${HVX_IMAGE_CACHE:-${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}/.cache/hvx/images}
for tool in podman; do
    command -v "$tool" >/dev/null || { echo "build_image.sh: $tool is not installed (Debian's podman)" >&2; exit 1; }
done
if ! podman image exists "$base"; then
    tarball=$cache/debian-12-minbase.tar
    if [[ ! -s $tarball ]]; then
        command -v mmdebstrap >/dev/null ||
            { echo "build_image.sh: $base is not in podman's storage and mmdebstrap is not installed to make it" >&2; exit 1; }
        mkdir -p "$cache"
        # This machine's apt sources (deb822 or one-line), as its own apt reaches the archive.
        sources=()
        for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
            [[ -s $f ]] && sources+=("$f")
        done
        ((${#sources[@]})) || { echo "build_image.sh: this machine has no apt sources to make $base from" >&2; exit 1; }
        echo "build_image.sh: making $base with mmdebstrap (minbase) into $tarball" >&2
        mmdebstrap --quiet --format=tar --variant=minbase --include=ca-certificates bookworm \
            "$tarball.partial" "${sources[@]}" >&2
        mv "$tarball.partial" "$tarball"
    fi
    podman import --quiet "$tarball" "$base" >/dev/null
fi
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
"$kit/stage.sh" "$context" >&2
podman build --pull=never --quiet -f "$dockerfile" -t "$tag" "$context"
