"""Repository rules that turn installed system packages into Bazel repositories, offline.

Each rule checks what it found and fails with one sentence naming the package, what was found or
missing, and the variable that overrides the search.
"""

def _fail(what, found, fix):
    fail("\nhvx: %s: %s. %s\n" % (what, found, fix))

def _exec(rctx, args):
    r = rctx.execute(args, quiet = True)
    return r.return_code, r.stdout.strip(), r.stderr.strip()

def _tokens(s):
    return [t for t in s.replace("\n", " ").split(" ") if t]

# --------------------------------------------------------------------------------------------- JSON

def _hvx_json_repo_impl(rctx):
    root = rctx.os.environ.get("HVX_JSON_INCLUDE", "") or "/usr/include"
    header = rctx.path(root + "/nlohmann/json.hpp")
    if not header.exists:
        _fail("nlohmann JSON", "%s not found" % header, "Install nlohmann-json3-dev (tools/setup) or set HVX_JSON_INCLUDE to the directory holding nlohmann/json.hpp")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.symlink(root + "/nlohmann", "include/nlohmann")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(name = "json", hdrs = glob(["include/nlohmann/**"]), includes = ["include"])
""")

hvx_json_repo = repository_rule(
    implementation = _hvx_json_repo_impl,
    environ = ["HVX_JSON_INCLUDE"],
    local = True,
)

# ---------------------------------------------------------------------------------------------- MPI

def _hvx_mpi_repo_impl(rctx):
    home = rctx.os.environ.get("MPI_HOME", "")
    if home:
        mpicxx = rctx.path(home + "/bin/mpicxx")
        if not mpicxx.exists:
            _fail("MPI", "MPI_HOME=%s has no bin/mpicxx" % home, "Point MPI_HOME at an MPI installation (Debian's libmpich-dev: MPI_HOME=/usr), or unset it to use mpicxx from PATH.")
    else:
        mpicxx = rctx.which("mpicxx")
        if mpicxx == None:
            _fail("MPI", "no mpicxx on PATH", "Install Debian's libmpich-dev and mpich (tools/setup does), or set MPI_HOME.")
    rc, out, err = _exec(rctx, [mpicxx, "-show"])
    if rc != 0:
        rc, out, err = _exec(rctx, [mpicxx, "-showme"])
    if rc != 0:
        _fail("MPI", "%s -show failed: %s" % (mpicxx, err), "Set MPI_HOME to a working MPICH or Open MPI installation.")

    mpiexec = rctx.path(str(mpicxx.dirname) + "/mpiexec")
    if not mpiexec.exists:
        mpiexec = rctx.which("mpiexec")
    if mpiexec == None:
        _fail("MPI", "found %s but no mpiexec beside it or on PATH" % mpicxx, "Install Debian's mpich package or set MPI_HOME.")

    includes = []
    linkopts = []
    for t in _tokens(out)[1:]:
        if t.startswith("-I"):
            d = "include%d" % len(includes)
            rctx.symlink(t[2:], d)
            includes.append(d)
        elif t.startswith("-L") or t.startswith("-Wl,-rpath"):
            linkopts.append(t)
        elif t.startswith("-l") and t not in ["-lmpichcxx", "-lmpi_cxx"]:
            linkopts.append(t)
    if not includes:
        _fail("MPI", "%s -show names no include directory (%s)" % (mpicxx, out), "Set MPI_HOME to an MPI installation with development headers (Debian: libmpich-dev).")
    if not rctx.path(includes[0] + "/mpi.h").exists:
        _fail("MPI", "no mpi.h under %s" % rctx.path(includes[0]).realpath, "Install Debian's libmpich-dev or set MPI_HOME.")

    # A wrapper, not a symlink: hydra finds hydra_pmi_proxy next to argv[0].
    rctx.file("mpiexec.sh", '#!/bin/sh\nexec "%s" "$@"\n' % mpiexec, executable = True)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "mpi",
    hdrs = glob([{hdrs}]),
    includes = {includes},
    defines = ["MPICH_SKIP_MPICXX", "OMPI_SKIP_MPICXX"],
    linkopts = {linkopts},
)

sh_binary(name = "mpiexec", srcs = ["mpiexec.sh"])
""".format(
        hdrs = ", ".join(['"%s/**/*.h"' % i for i in includes]),
        includes = repr(includes),
        linkopts = repr(linkopts + ["-pthread"]),
    ))

hvx_mpi_repo = repository_rule(
    implementation = _hvx_mpi_repo_impl,
    environ = ["MPI_HOME", "PATH"],
    local = True,
)

# ------------------------------------------------------------------------------------------ LibTorch

def _torch_abi(rctx, config):
    if not config.exists:
        return None
    for line in rctx.read(config).splitlines():
        i = line.find("_GLIBCXX_USE_CXX11_ABI=")
        if i >= 0:
            return line[i + len("_GLIBCXX_USE_CXX11_ABI="):i + len("_GLIBCXX_USE_CXX11_ABI=") + 1]
    return None

# What a Python interpreter's torch is: its folder, torch.__version__, the installed distribution's
# version (what pip compares), its C++ ABI, and its CUDA version ("" for a CPU build).
_ASK_TORCH = """
import importlib.metadata, os, torch
try:
    dist = importlib.metadata.version("torch")
except importlib.metadata.PackageNotFoundError:
    dist = torch.__version__
print(os.path.dirname(torch.__file__))
print(torch.__version__)
print(dist)
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.version.cuda or "none")
"""

def _ask_torch(rctx, python):
    """(root, version, dist_version, abi, cuda) of python's torch, or None and the error."""
    rc, out, err = _exec(rctx, [python, "-c", _ASK_TORCH])
    if rc != 0:
        return None, (err.splitlines() or ["exit status %d" % rc])[-1]
    lines = out.split("\n")
    if len(lines) != 5:
        return None, "unexpected answer %r" % out
    return struct(root = lines[0], version = lines[1], dist = lines[2], abi = lines[3], cuda = "" if lines[4] == "none" else lines[4]), None

# Folders of a torch wheel's include/ that are third-party copies: its protobuf would shadow the
# system's (which hvx's generated code is built for), and its pybind11 is reached through
# @hvx_python//:pybind11 (the one its libtorch_python was built with).
_WHEEL_INCLUDE_SKIP = ["google", "pybind11"]

def _hvx_torch_repo_impl(rctx):
    root = rctx.os.environ.get("HVX_TORCH_PATH", "")
    torch_python_bin = rctx.os.environ.get("HVX_TORCH_PYTHON", "")
    version = ""
    dist = ""
    cuda = ""
    if root and torch_python_bin:
        _fail("LibTorch", "both HVX_TORCH_PATH=%s and HVX_TORCH_PYTHON=%s are set" % (root, torch_python_bin), "Set one: HVX_TORCH_PYTHON for a Python's torch (a pip install), HVX_TORCH_PATH for an unpacked LibTorch zip.")
    if torch_python_bin:
        found, err = _ask_torch(rctx, torch_python_bin)
        if found == None:
            _fail("LibTorch", "HVX_TORCH_PYTHON=%s cannot import torch (%s)" % (torch_python_bin, err), "Point HVX_TORCH_PYTHON at a Python whose torch imports (a venv after `pip install torch`; tools/setup makes one), or unset it for Debian's LibTorch.")
        root = found.root
        if not rctx.path(root + "/include/torch/csrc/api/include/torch/torch.h").exists:
            _fail("LibTorch", "%s (torch %s from HVX_TORCH_PYTHON=%s) has no include/torch/csrc/api/include/torch/torch.h" % (root, found.version, torch_python_bin), "Install a torch wheel that ships LibTorch's headers (every PyPI torch >= 1.0 does).")
        for entry in rctx.path(root + "/include").readdir():
            if entry.basename not in _WHEEL_INCLUDE_SKIP:
                rctx.symlink(entry, "include/" + entry.basename)
        includes = ["include", "include/torch/csrc/api/include"]
        libdir = root + "/lib"
        abi = found.abi
        version = found.version
        dist = found.dist
        cuda = found.cuda
    elif root:
        if not rctx.path(root + "/include/torch/csrc/api/include/torch/torch.h").exists:
            _fail("LibTorch", "HVX_TORCH_PATH=%s has no include/torch/csrc/api/include/torch/torch.h" % root, "Point HVX_TORCH_PATH at an unpacked LibTorch zip (the folder holding include/ and lib/), or set HVX_TORCH_PYTHON to a Python with torch installed.")
        rctx.symlink(root + "/include", "include")
        includes = ["include", "include/torch/csrc/api/include"]
        libdir = root + "/lib"
        abi = _torch_abi(rctx, rctx.path(root + "/share/cmake/Torch/TorchConfig.cmake"))
    else:
        api = rctx.path("/usr/include/torch/csrc/api/include")
        if not api.exists:
            _fail("LibTorch", "no /usr/include/torch/csrc/api/include", "Install Debian's libtorch-dev (tools/setup does), or set HVX_TORCH_PYTHON to a Python with torch installed.")
        rctx.symlink(api, "include")
        includes = ["include"]
        libdir = "/usr/lib/x86_64-linux-gnu"
        abi = _torch_abi(rctx, rctx.path(libdir + "/cmake/Torch/TorchConfig.cmake"))
        # The Python torch that hvx's extension loads into: Debian's python3-torch over the same
        # libraries. Absent, the extension cannot be built (below) and nothing needs its version.
        found, _ = _ask_torch(rctx, rctx.os.environ.get("HVX_PYTHON", "") or "/usr/bin/python3")
        if found != None:
            version = found.version
            dist = found.dist
    for lib in ["libtorch.so", "libtorch_cpu.so", "libc10.so"]:
        if not rctx.path(libdir + "/" + lib).exists:
            _fail("LibTorch", "%s/%s is missing" % (libdir, lib), "Install Debian's libtorch-dev, or set HVX_TORCH_PYTHON to a Python with torch installed.")
    # By path, not -l: another -L (MPICH's, say, -L/usr/lib/x86_64-linux-gnu) ahead of this one
    # would otherwise link Debian's LibTorch into a build against a wheel's. A CUDA build of
    # LibTorch registers its CUDA kernels from libtorch_cuda; link it where it exists.
    libs = ["%s/lib%s.so" % (libdir, lib) for lib in ["torch", "torch_cpu", "c10"]]
    for lib in ["torch_cuda", "c10_cuda"]:
        if rctx.path("%s/lib%s.so" % (libdir, lib)).exists:
            libs.append("%s/lib%s.so" % (libdir, lib))
    if abi not in ["0", "1"]:
        _fail("LibTorch", "cannot tell the C++ ABI (_GLIBCXX_USE_CXX11_ABI) of the LibTorch in %s" % libdir, "Set HVX_TORCH_PATH to a complete LibTorch installation (it ships share/cmake/Torch/TorchConfig.cmake), or HVX_TORCH_PYTHON to a Python with torch installed.")

    # The Python bindings' library (Debian's python3-torch, or a LibTorch from a torch wheel): only
    # hvx's Python extension links it; without it that one target fails to compile, saying why.
    if rctx.path(libdir + "/libtorch_python.so").exists:
        torch_python = 'linkopts = ["{libdir}/libtorch_python.so"], deps = [":torch"]'.format(libdir = libdir)
    else:
        rctx.file("missing_torch_python.cc", '#error "hvx: no %s/libtorch_python.so: install Debian\'s python3-torch (tools/setup does), or set HVX_TORCH_PYTHON to a Python with torch installed"\n' % libdir)
        torch_python = 'srcs = ["missing_torch_python.cc"], deps = [":torch"]'
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    # Which torch this is, for the wheel's pin and hvx's import-time check (hvx/python/BUILD.bazel).
    rctx.file("defs.bzl", "\n".join([
        "# The Python torch hvx builds against (HVX_TORCH_PYTHON's, or Debian's python3-torch over",
        "# libtorch-dev): \"\" when none was found (HVX_TORCH_PATH, no python3-torch).",
        "TORCH_VERSION = %r" % version,
        "TORCH_DIST_VERSION = %r" % dist,
        "TORCH_CUDA = %r" % cuda,
        "",
    ]))
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

exports_files(["defs.bzl"])

cc_library(name = "torch_python", {torch_python})

cc_library(
    name = "torch",
    hdrs = glob(["include/**"]),
    includes = {includes},
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}"],
    linkopts = ["-Wl,-rpath,{libdir}"] + {libs} + ["-pthread"],
)
""".format(includes = repr(includes), abi = abi, libdir = libdir, libs = repr(libs), torch_python = torch_python))

hvx_torch_repo = repository_rule(
    implementation = _hvx_torch_repo_impl,
    environ = ["HVX_TORCH_PATH", "HVX_TORCH_PYTHON", "HVX_PYTHON"],
    local = True,
)

# -------------------------------------------------------------------------------------------- Python

def _hvx_python_repo_impl(rctx):
    # The extension must be built for the interpreter whose torch it links: HVX_TORCH_PYTHON's, when
    # that chooses the LibTorch, unless HVX_PYTHON names another.
    torch_python = rctx.os.environ.get("HVX_TORCH_PYTHON", "")
    python = rctx.os.environ.get("HVX_PYTHON", "") or torch_python or "/usr/bin/python3"
    if not rctx.path(python).exists:
        _fail("Python", "no %s" % python, "Install Debian's python3-dev (tools/setup does), or set HVX_PYTHON to a Python 3 with its headers.")
    rc, out, err = _exec(rctx, [python, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['include']); print('cp%d%d' % sys.version_info[:2])"])
    if rc != 0:
        _fail("Python", "%s failed: %s" % (python, err), "Set HVX_PYTHON to a working Python 3.")
    include, tag = out.split("\n")
    if not rctx.path(include + "/Python.h").exists:
        _fail("Python", "no %s/Python.h" % include, "Install Debian's python3-dev (tools/setup does).")
    # pybind11 (header-only): the copy a torch wheel ships, which its libtorch_python was built with
    # and whose type casters hvx's extension shares with it; else Debian's.
    pybind11 = "/usr/include/pybind11"
    if torch_python:
        found, err = _ask_torch(rctx, torch_python)
        if found == None:
            _fail("Python", "HVX_TORCH_PYTHON=%s cannot import torch (%s)" % (torch_python, err), "Point HVX_TORCH_PYTHON at a Python whose torch imports, or unset it for Debian's.")
        if rctx.path(found.root + "/include/pybind11/pybind11.h").exists:
            pybind11 = found.root + "/include/pybind11"
    if not rctx.path(pybind11 + "/pybind11.h").exists:
        _fail("pybind11", "no %s/pybind11.h" % pybind11, "Install Debian's pybind11-dev (tools/setup does).")
    rctx.symlink(include, "include/python")
    rctx.symlink(pybind11, "include/pybind11/pybind11")
    rctx.file("python3.sh", '#!/bin/sh\nexec "%s" "$@"\n' % python, executable = True)
    # The interpreter's tag ("cp311"), for the wheel's file name.
    rctx.file("defs.bzl", 'PYTHON_TAG = "%s"\n' % tag)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# The interpreter's headers, and pybind11's (header-only). An extension built on them is loaded
# by that interpreter (python3.sh), which also runs hvx's Python tests.
cc_library(name = "headers", hdrs = glob(["include/python/**/*.h"]), includes = ["include/python"])

cc_library(name = "pybind11", hdrs = glob(["include/pybind11/**/*.h"]), includes = ["include/pybind11"], deps = [":headers"])

sh_binary(name = "python3", srcs = ["python3.sh"])

# The same interpreter for py_binary/py_test: register_toolchains("@hvx_python//:toolchain").
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(name = "runtime", interpreter_path = "{python}", python_version = "PY3")

py_runtime_pair(name = "runtime_pair", py3_runtime = ":runtime")

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(python = python))

hvx_python_repo = repository_rule(
    implementation = _hvx_python_repo_impl,
    environ = ["HVX_PYTHON", "HVX_TORCH_PYTHON"],
    local = True,
)

# ---------------------------------------------------------------------------------------------- CUDA

# nvJPEG's header and library: HVX_NVJPEG_PATH (a folder with include/nvjpeg.h and
# lib/libnvjpeg.so.N, e.g. the nvidia/cu13 folder of PyPI's nvidia-nvjpeg wheel), else the CUDA
# toolkit's, else the nvidia-nvjpeg wheel in HVX_TORCH_PYTHON's environment. Returns
# (folder, soname, "") or (None, None, why none was found).
def _find_nvjpeg(rctx, cuda_root):
    tried = []
    candidates = []
    explicit = rctx.os.environ.get("HVX_NVJPEG_PATH", "")
    if explicit:
        candidates.append(explicit)
    else:
        candidates.append(cuda_root)
        python = rctx.os.environ.get("HVX_TORCH_PYTHON", "")
        if python:
            rc, out, _ = _exec(rctx, [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
            if rc == 0:
                nvidia = rctx.path(out.strip() + "/nvidia")
                if nvidia.exists:
                    candidates.extend([str(d) for d in nvidia.readdir() if d.basename.startswith("cu")])
    for folder in candidates:
        header = rctx.path(folder + "/include/nvjpeg.h")
        libs = []
        for libdir in ["lib", "lib64"]:
            d = rctx.path(folder + "/" + libdir)
            if d.exists:
                libs.extend([f for f in d.readdir() if f.basename.startswith("libnvjpeg.so.")])
        if header.exists and libs:
            return folder, libs[0].basename, ""
        tried.append(folder)
    return None, None, "no include/nvjpeg.h with lib/libnvjpeg.so.N in %s" % ", ".join(tried)

def _hvx_cuda_repo_impl(rctx):
    root = rctx.os.environ.get("HVX_CUDA_PATH", "") or "/usr/local/cuda"
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    nvcc = rctx.path(root + "/bin/nvcc")
    header = rctx.path(root + "/include/cuda_runtime.h")
    nccl = rctx.path(root + "/include/nccl.h")
    if nvcc.exists and header.exists and nccl.exists:
        rctx.symlink(root + "/include", "include")
        # A wrapper, not a symlink: nvcc finds nvcc.profile and cicc relative to its real path.
        rctx.file("nvcc.sh", '#!/bin/sh\nexec "%s" "$@"\n' % nvcc, executable = True)
        hdrs = 'glob(["include/**"])'
    else:
        # Only --config=cuda builds need CUDA; a plain build must still load this repository.
        missing = [str(p) for p in [nvcc, header, nccl] if not p.exists]
        msg = "hvx: CUDA not usable at %s (missing %s). Install CUDA and NCCL there or set HVX_CUDA_PATH." % (root, ", ".join(missing))
        rctx.file("nvcc.sh", "#!/bin/sh\necho '%s' >&2\nexit 1\n" % msg, executable = True)
        hdrs = "[]"
    lib = root + "/lib64"

    # nvJPEG is optional: its header is compiled against, and the library is loaded when a GPU
    # decoder is made (hvx/data/gpu_jpeg.h), so a binary runs where it is missing and says so.
    nvjpeg, soname, why = _find_nvjpeg(rctx, root)
    if nvjpeg:
        rctx.symlink(nvjpeg + "/include/nvjpeg.h", "nvjpeg/nvjpeg.h")
        libdir = nvjpeg + ("/lib" if rctx.path(nvjpeg + "/lib/" + soname).exists else "/lib64")
        config = [
            "#define HVX_NVJPEG_FOUND 1",
            "#define HVX_NVJPEG_SONAME %s" % repr(soname),
            "#define HVX_NVJPEG_BUILD_PATH %s" % repr(libdir + "/" + soname),
        ]
    else:
        config = [
            "#define HVX_NVJPEG_FOUND 0",
            "#define HVX_NVJPEG_MISSING %s" % repr("built without nvJPEG (" + why + "): set HVX_NVJPEG_PATH, or pip install nvidia-nvjpeg into HVX_TORCH_PYTHON's environment"),
        ]
    rctx.file("nvjpeg/hvx_nvjpeg_config.h", "// Written by hvx_cuda_repo: where nvJPEG was found.\n" + "\n".join(config) + "\n")
    nvjpeg_hdrs = '["nvjpeg/hvx_nvjpeg_config.h"]' + (' + ["nvjpeg/nvjpeg.h"]' if nvjpeg else "")
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cuda_headers", hdrs = {hdrs}, includes = ["include"])

cc_library(
    name = "cudart",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart", "-ldl", "-lrt", "-pthread"],
    deps = [":cuda_headers"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnccl"],
    deps = [":cudart"],
)

# nvJPEG's header and hvx_nvjpeg_config.h (HVX_NVJPEG_FOUND, and the library's soname and path);
# the library itself is loaded at run time.
cc_library(
    name = "nvjpeg",
    hdrs = {nvjpeg_hdrs},
    includes = ["nvjpeg"],
    linkopts = ["-ldl"],
    deps = [":cudart"],
)

sh_binary(name = "nvcc", srcs = ["nvcc.sh"])
""".format(hdrs = hdrs, lib = lib, nvjpeg_hdrs = nvjpeg_hdrs))

hvx_cuda_repo = repository_rule(
    implementation = _hvx_cuda_repo_impl,
    environ = ["HVX_CUDA_PATH", "HVX_NVJPEG_PATH", "HVX_TORCH_PYTHON"],
    local = True,
)

# -------------------------------------------------------------------------------------------- Abseil

# (package, target, pkg-config module): the upstream labels hvx and its users depend on.
_ABSL_TARGETS = [
    ("algorithm", "algorithm", "absl_algorithm"),
    ("algorithm", "container", "absl_algorithm_container"),
    ("base", "base", "absl_base"),
    ("base", "core_headers", "absl_core_headers"),
    ("cleanup", "cleanup", "absl_cleanup"),
    ("container", "btree", "absl_btree"),
    ("container", "fixed_array", "absl_fixed_array"),
    ("container", "flat_hash_map", "absl_flat_hash_map"),
    ("container", "flat_hash_set", "absl_flat_hash_set"),
    ("container", "inlined_vector", "absl_inlined_vector"),
    ("container", "node_hash_map", "absl_node_hash_map"),
    ("container", "node_hash_set", "absl_node_hash_set"),
    ("debugging", "failure_signal_handler", "absl_failure_signal_handler"),
    ("debugging", "stacktrace", "absl_stacktrace"),
    ("debugging", "symbolize", "absl_symbolize"),
    ("flags", "flag", "absl_flags"),
    ("flags", "marshalling", "absl_flags_marshalling"),
    ("flags", "parse", "absl_flags_parse"),
    ("flags", "usage", "absl_flags_usage"),
    ("functional", "bind_front", "absl_bind_front"),
    ("functional", "function_ref", "absl_function_ref"),
    ("hash", "hash", "absl_hash"),
    ("memory", "memory", "absl_memory"),
    ("meta", "type_traits", "absl_type_traits"),
    ("numeric", "bits", "absl_bits"),
    ("numeric", "int128", "absl_int128"),
    ("random", "distributions", "absl_random_distributions"),
    ("random", "random", "absl_random_random"),
    ("status", "status", "absl_status"),
    ("status", "statusor", "absl_statusor"),
    ("strings", "cord", "absl_cord"),
    ("strings", "str_format", "absl_str_format"),
    ("strings", "strings", "absl_strings"),
    ("synchronization", "synchronization", "absl_synchronization"),
    ("time", "time", "absl_time"),
    ("types", "optional", "absl_optional"),
    ("types", "span", "absl_span"),
    ("types", "variant", "absl_variant"),
    ("utility", "utility", "absl_utility"),
]

def _hvx_absl_repo_impl(rctx):
    pkg_config = rctx.which("pkg-config") or rctx.which("pkgconf")
    if pkg_config == None:
        _fail("Abseil", "no pkg-config on PATH", "Install Debian's pkgconf and libabsl-dev, or declare com_google_absl before hvx_dependencies().")
    rc, version, _ = _exec(rctx, [pkg_config, "--modversion", "absl_strings"])
    if rc != 0:
        _fail("Abseil", "pkg-config knows no absl_strings", "Install Debian's libabsl-dev (tools/setup does), or declare com_google_absl before hvx_dependencies().")
    packages = {}
    for pkg, target, module in _ABSL_TARGETS:
        rc, libs, err = _exec(rctx, [pkg_config, "--libs", module])
        if rc != 0:
            _fail("Abseil", "pkg-config --libs %s failed (%s) for Abseil %s" % (module, err, version), "Install Debian's libabsl-dev 20220623, or declare com_google_absl before hvx_dependencies().")
        packages.setdefault(pkg, []).append(
            'cc_library(name = "%s", linkopts = %s)\n' % (target, repr(_tokens(libs) + ["-pthread"])),
        )
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", "")
    for pkg, rules in packages.items():
        rctx.file("absl/%s/BUILD.bazel" % pkg, 'package(default_visibility = ["//visibility:public"])\n\n' + "\n".join(rules))

hvx_absl_repo = repository_rule(
    implementation = _hvx_absl_repo_impl,
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)

# --------------------------------------------------------------------------------------- GoogleTest

def _hvx_gtest_repo_impl(rctx):
    for f in ["/usr/include/gtest/gtest.h", "/usr/include/gmock/gmock.h"]:
        if not rctx.path(f).exists:
            _fail("GoogleTest", "%s is missing" % f, "Install Debian's libgtest-dev and libgmock-dev, or declare com_google_googletest before hvx_dependencies().")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(name = "gtest", linkopts = ["-lgtest", "-pthread"])
cc_library(name = "gtest_main", linkopts = ["-lgtest_main", "-lgtest", "-pthread"])
cc_library(name = "gmock", linkopts = ["-lgmock", "-lgtest", "-pthread"])
cc_library(name = "gmock_main", linkopts = ["-lgmock_main", "-lgmock", "-lgtest", "-pthread"])
""")

hvx_gtest_repo = repository_rule(
    implementation = _hvx_gtest_repo_impl,
    local = True,
)

# ----------------------------------------------------------------------------------------- Protobuf

_WKT = {
    "any": [],
    "api": ["source_context", "type"],
    "compiler_plugin": ["descriptor"],
    "descriptor": [],
    "duration": [],
    "empty": [],
    "field_mask": [],
    "source_context": [],
    "struct": [],
    "timestamp": [],
    "type": ["any", "source_context"],
    "wrappers": [],
}

def _hvx_protobuf_repo_impl(rctx):
    protoc = rctx.os.environ.get("HVX_PROTOC", "") or rctx.which("protoc")
    if protoc == None:
        _fail("protobuf", "no protoc on PATH", "Install Debian's protobuf-compiler and libprotobuf-dev (tools/setup does), or set HVX_PROTOC.")
    rc, out, err = _exec(rctx, [protoc, "--version"])
    if rc != 0:
        _fail("protobuf", "%s --version failed: %s" % (protoc, err), "Set HVX_PROTOC to a working protoc.")
    protoc_version = out.split(" ")[-1]
    pkg_config = rctx.which("pkg-config") or rctx.which("pkgconf")
    rc, lib_version, _ = _exec(rctx, [pkg_config, "--modversion", "protobuf"]) if pkg_config else (1, "", "")
    if rc != 0:
        _fail("protobuf", "pkg-config knows no protobuf library", "Install Debian's libprotobuf-dev, or declare com_google_protobuf before hvx_dependencies().")
    if lib_version != protoc_version:
        _fail("protobuf", "protoc %s (%s) does not match libprotobuf %s" % (protoc_version, protoc, lib_version), "Install protoc and libprotobuf of the same version, or set HVX_PROTOC to the matching protoc.")
    rctx.symlink(protoc, "protoc")
    rules = []
    for name, deps in _WKT.items():
        src = "google/protobuf/%s.proto" % name
        if name == "compiler_plugin":
            src = "google/protobuf/compiler/plugin.proto"
        rctx.symlink("/usr/include/" + src, src)
        rules.append('proto_library(name = "%s_proto", srcs = ["%s"], deps = [%s])' % (
            name,
            src,
            ", ".join(['":%s_proto"' % d for d in deps]),
        ))
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

exports_files(["protoc"])

cc_library(name = "protobuf", linkopts = ["-lprotobuf", "-pthread"])
cc_library(name = "protobuf_lite", linkopts = ["-lprotobuf-lite", "-pthread"])

{rules}

proto_lang_toolchain(
    name = "cc_toolchain",
    command_line = "--cpp_out=$(OUT)",
    runtime = ":protobuf",
    blacklisted_protos = [{wkt}],
)
""".format(rules = "\n".join(rules), wkt = ", ".join(['":%s_proto"' % n for n in _WKT])))

hvx_protobuf_repo = repository_rule(
    implementation = _hvx_protobuf_repo_impl,
    environ = ["HVX_PROTOC", "PKG_CONFIG_PATH"],
    local = True,
)
