#!/usr/bin/env bash
# Vendors hvx into a second, freshly made workspace (local_repository + hvx_dependencies()), then
# builds and runs a program there that depends on hvx libraries and a py_binary that depends on
# hvx.torch (@hvx//hvx/python:torch), and runs one hvx test as @hvx//.
# Also checks that no BUILD or .bzl file inside hvx names hvx's own repository (@hvx//), which
# would break under any other repository name.
set -euo pipefail

# The hvx source tree: runfiles are symlinks into it.
hvx_root=$(dirname "$(readlink -f "$TEST_SRCDIR/$TEST_WORKSPACE/WORKSPACE")")
[ -f "$hvx_root/deps.bzl" ] || { echo "cannot find the hvx source tree (got $hvx_root)"; exit 1; }

self_refs=$(cd "$hvx_root" && grep -rln --include=BUILD.bazel --include=BUILD --include='*.bzl' '@hvx//' \
  --exclude-dir='bazel-*' --exclude-dir=tests . || true)
if [ -n "$self_refs" ]; then
  echo "these files name hvx's own repository as @hvx//; use //pkg:target or Label(\"//...\"):"
  echo "$self_refs"
  exit 1
fi

work=${TEST_TMPDIR:-$(mktemp -d)}/consumer
rm -rf "$work"
mkdir -p "$work/app"
cat > "$work/WORKSPACE" <<WS
workspace(name = "consumer")

local_repository(name = "hvx", path = "$hvx_root")

load("@hvx//:deps.bzl", "hvx_dependencies")

hvx_dependencies()

register_toolchains("@hvx_python//:toolchain")
WS
# An external repository's .bazelrc is not read: the consumer imports hvx's settings.
echo "import $hvx_root/.bazelrc" > "$work/.bazelrc"
cat > "$work/app/BUILD.bazel" <<'BUILD'
cc_binary(
    name = "app",
    srcs = ["app.cc"],
    deps = [
        "@com_google_absl//absl/strings",
        "@hvx//hvx/common",
    ],
)

py_binary(
    name = "pyapp",
    srcs = ["pyapp.py"],
    deps = ["@hvx//hvx/python:torch"],
)
BUILD
cat > "$work/app/pyapp.py" <<'PY'
import torch

import hvx.torch as hvd

hvd.init()
print("vendored hvx.torch: size %d, allreduce %s" % (
    hvd.size(), hvd.allreduce(torch.arange(3.0), op=hvd.Sum).tolist()))
PY
cat > "$work/app/app.cc" <<'CC'
#include <iostream>

#include "absl/strings/str_cat.h"
#include "hvx/common/env.h"
#include "hvx/common/logging.h"
#include "hvx/common/types.h"

int main() {
  float data[6] = {0};
  hvx::TensorRef t(hvx::DataType::kFloat32, hvx::TensorShape({2, 3}), data);
  hvx::MapEnvironment env({{"HVX_LOG_LEVEL", "warning"}});
  auto opts = hvx::LogOptionsFromEnv(env);
  if (!opts.ok()) return 1;
  std::cout << absl::StrCat("vendored hvx: ", t.DebugString(), " ", t.num_bytes(), " bytes") << std::endl;
  return 0;
}
CC

# A separate Bazel server and output tree for the consumer; nothing of the outer build is touched.
bazel_root="${TEST_TMPDIR:-/tmp}/bazel_root"
run_bazel() {
  (cd "$work" && env -u TEST_TMPDIR -u TEST_SRCDIR -u TEST_WORKSPACE -u RUNFILES_DIR \
    -u JAVA_RUNFILES -u BUILD_WORKSPACE_DIRECTORY HOME="${TEST_TMPDIR:-/tmp}" \
    bazel --output_user_root="$bazel_root" --max_idle_secs=30 "$@")
}
trap 'run_bazel shutdown >/dev/null 2>&1 || true' EXIT

out=$(run_bazel run --ui_event_filters=-info --noshow_progress //app 2>&1) || { echo "$out"; exit 1; }
echo "$out"
grep -q "vendored hvx: float32\[2, 3\] cpu 24 bytes" <<<"$out" || { echo "app printed the wrong line"; exit 1; }

# A py_binary of the monorepo's with hvx's Python package as a dependency.
out=$(run_bazel run --ui_event_filters=-info --noshow_progress //app:pyapp 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -n 3
grep -q "vendored hvx.torch: size 1, allreduce \[0.0, 1.0, 2.0\]" <<<"$out" || { echo "pyapp printed the wrong line"; exit 1; }

# hvx's own tests run from the consumer too.
run_bazel test --noshow_progress @hvx//hvx/common:types_test
echo "PASS: hvx vendored into $work"
