#!/usr/bin/env bash
# Builds the GPU kit: one directory that runs hvx's GPU tests and benchmark on a machine with a GPU
# but without Bazel or Debian's libraries (a lent GPU machine: its own image, CUDA driver, an NCCL
# wheel). Build it here, check it here (run.sh in a scrubbed environment: CPU phases pass, GPU
# phases skip with the reason), then carry it over and run it there:
#
#   tests/gpu/kit.sh [OUT_DIR]          # default gpu-kit/ at the top of the tree (git-ignored)
#   env -i PATH=/usr/bin:/bin OUT_DIR/run.sh
#
# OUT_DIR holds bin/ (the test and benchmark binaries, the trainer built against PyPI's CUDA torch
# 2.11, hydra's mpiexec and proxy), lib/ (every shared library they load that the GPU machine will
# not have: Abseil, MPICH and UCX, gtest, protobuf, the build's own libraries), data/ (a slice of
# Fashion-MNIST and its config) and run.sh. The CUDA runtime, NCCL, the driver and LibTorch are
# the machine's own (run.sh finds them). It must stay under 64 MiB, what travels to a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-gpu-kit}
LIMIT_BYTES=$((64 << 20))

# GPU tests and benchmark, and the CPU tests of the same package (they pass anywhere).
gpu_targets=(//hvx/nccl:kernels_test //hvx/nccl:nccl_data_plane_np1_test //hvx/nccl:register_test
    //hvx/nccl:nccl_allreduce_bench //tests/deps:cuda_nccl_link_test //hvx/data:gpu_jpeg_test)
cpu_targets=(//hvx/nccl:policy_test //hvx/nccl:grid_test //hvx/nccl:nccl_error_test
    //hvx/nccl:comm_cache_test)
# nvJPEG's header, from the torch venv's nvidia-nvjpeg wheel: the GPU JPEG decoder is compiled in
# (its library is loaded at run time, from the machine's torch install when it has it).
nvjpeg=--repo_env=HVX_NVJPEG_PATH=$(tools/torch_venv nvjpeg)
bazel build --config=cuda "$nvjpeg" ${HVX_KIT_BAZEL_ARGS:-} "${gpu_targets[@]}" "${cpu_targets[@]}" \
    @hvx_mpi//:mpiexec

# The trainer, built against PyPI's CUDA torch 2.11 (the version the GPU machine has): at run
# time it uses that machine's own LibTorch and CUDA libraries, so the kit carries none of them.
torch_python=$(tools/torch_venv python)
torch_site=$("$torch_python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
bazel build --config=cuda --repo_env=HVX_TORCH_PYTHON="$torch_python" "$nvjpeg" ${HVX_KIT_BAZEL_ARGS:-} //tools/train

# Libraries the GPU machine provides itself: the C and C++ runtimes, the driver, CUDA and NCCL,
# and its torch install's (LibTorch and the nvidia-* wheels', found under torch_site here).
provided='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libutil|libresolv|libgcc_s|libstdc\+\+|libcuda|libcudart|libnccl)\.'

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
programs=()
for t in "${gpu_targets[@]}" "${cpu_targets[@]}"; do
    t=${t#//}
    programs+=("bazel-bin/${t%%:*}/${t##*:}")
done
# hydra: the MPI tests start themselves under it (hvx/testing/mpi_gtest_main.cc).
programs+=("$(command -v mpiexec.hydra)" "$(command -v hydra_pmi_proxy)")
# Each program, and the shared-library closure it has where it was built (Bazel's solib
# directories through its rpath, then the system), minus what the machine provides.
programs+=(bazel-bin/tools/train/train)
for src in "${programs[@]}"; do
    cp "$src" "$OUT/bin/"
    ldd "$src" | awk '/=> \// {print $1, $3}' | while read -r name path; do
        [[ $name =~ $provided ]] && continue
        [[ $path == "$torch_site"/* ]] && continue
        [[ -e $OUT/lib/$name ]] || cp -L "$path" "$OUT/lib/$name"
    done
done
chmod -R u+w "$OUT"
strip --strip-unneeded "$OUT"/bin/* "$OUT"/lib/* 2>/dev/null || true
cp tests/gpu/run.sh "$OUT/run.sh"
chmod +x "$OUT/run.sh"
# The trainer's data: the first 3200 training and 500 test images of Fashion-MNIST (Debian's
# dataset-fashion-mnist), as IDX files; the trainer makes its record shards from them.
mkdir -p "$OUT/data"
/usr/bin/python3 - /usr/share/datasets/fashion-mnist "$OUT/data" <<'EOT'
import gzip, struct, sys
src, out = sys.argv[1:]
for split, n in (("train", 3200), ("t10k", 500)):
    for kind, item in (("images", 28 * 28), ("labels", 1)):
        name = "%s-%s-idx%d-ubyte.gz" % (split, kind, 3 if kind == "images" else 1)
        data = gzip.open("%s/%s" % (src, name)).read()
        header = 16 if kind == "images" else 8
        head = bytearray(data[:header])
        struct.pack_into(">I", head, 4, n)
        with gzip.open("%s/%s" % (out, name), "wb") as f:
            f.write(bytes(head) + data[header:header + n * item])
EOT
cp data/fashion_mnist.pbtxt "$OUT/data/"

bytes=$(du -sb "$OUT" | cut -f1)
echo "kit: $OUT, $(ls "$OUT/bin" | wc -l) programs, $(ls "$OUT/lib" | wc -l) libraries, $((bytes >> 20)) MiB"
if ((bytes > LIMIT_BYTES)); then
    echo "kit: $bytes bytes is over the 64 MiB that travels to a GPU machine" >&2
    du -sb "$OUT"/lib/* | sort -n | tail -5 >&2
    exit 1
fi
