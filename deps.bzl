"""hvx's external dependencies, declared offline from system packages.

A monorepo that vendors hvx calls hvx_dependencies() from its WORKSPACE. Every repository is declared
only when the name is not already defined, so the monorepo's own copies of Abseil, GoogleTest,
protobuf, nlohmann JSON, MPI, LibTorch or CUDA win.
"""

load("//third_party:stubs.bzl", "hvx_offline_stubs")
load(
    "//third_party:repos.bzl",
    "hvx_absl_repo",
    "hvx_cuda_repo",
    "hvx_gtest_repo",
    "hvx_json_repo",
    "hvx_mpi_repo",
    "hvx_protobuf_repo",
    "hvx_python_repo",
    "hvx_torch_repo",
)

def _maybe(rule, name, **kwargs):
    if name not in native.existing_rules():
        rule(name = name, **kwargs)

def hvx_dependencies():
    hvx_offline_stubs()
    _maybe(hvx_mpi_repo, "hvx_mpi")
    _maybe(hvx_cuda_repo, "hvx_cuda")
    _maybe(hvx_torch_repo, "hvx_torch")
    _maybe(hvx_python_repo, "hvx_python")
    _maybe(hvx_absl_repo, "com_google_absl")
    _maybe(hvx_gtest_repo, "com_google_googletest")
    _maybe(hvx_protobuf_repo, "com_google_protobuf")
    _maybe(hvx_json_repo, "nlohmann_json")
