"""cuda_library: compiles .cu files with nvcc and returns CcInfo, so cc_* rules can depend on it.

    cuda_library(
        name = "scale_kernels",
        srcs = ["scale.cu"],
        hdrs = ["scale.h"],
        target_compatible_with = CUDA_ONLY,
    )

Relocatable device code is not supported (no device link step): each .cu must be self-contained.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# Skips a target unless --config=cuda: a plain `bazel test //...` reports it SKIPPED.
CUDA_ONLY = select({
    str(Label("//:cuda")): [],
    "//conditions:default": [Label("//third_party:incompatible")],
})

# Hopper and Ampere machine code plus PTX for forward compatibility.
DEFAULT_GPU_ARCH = [
    "arch=compute_80,code=sm_80",
    "arch=compute_90,code=sm_90",
    "arch=compute_90,code=compute_90",
]

def _cuda_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    dep_infos = [d[CcInfo] for d in ctx.attr.deps]
    dep_ctx = cc_common.merge_cc_infos(cc_infos = dep_infos).compilation_context

    root = ctx.label.workspace_root or "."
    bin_root = ctx.bin_dir.path + ("/" + ctx.label.workspace_root if ctx.label.workspace_root else "")
    args_common = [
        "-ccbin",
        cc_toolchain.compiler_executable,
        "-std=c++17",
        "-O2",
        "-Xcompiler",
        "-fPIC",
        "-I" + root,
        "-I" + bin_root,
    ]
    for arch in ctx.attr.gpu_arch:
        args_common.append("--generate-code=" + arch)
    for d in ctx.attr.defines + dep_ctx.defines.to_list():
        args_common.append("-D" + d)
    for i in dep_ctx.includes.to_list() + dep_ctx.quote_includes.to_list():
        args_common.append("-I" + i)
    for i in dep_ctx.system_includes.to_list():
        args_common.extend(["-isystem", i])
    args_common.extend(ctx.attr.copts)

    objects = []
    inputs = depset(
        ctx.files.srcs + ctx.files.hdrs,
        transitive = [dep_ctx.headers, cc_toolchain.all_files],
    )
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.o" % (ctx.label.name, src.basename))
        ctx.actions.run(
            executable = ctx.executable._nvcc,
            arguments = args_common + ["-c", src.path, "-o", obj.path],
            inputs = inputs,
            outputs = [obj],
            mnemonic = "CudaCompile",
            progress_message = "Compiling CUDA %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)

    compilation_context = cc_common.create_compilation_context(
        headers = depset(ctx.files.hdrs),
        quote_includes = depset([root, bin_root]),
    )
    linking_context, _ = cc_common.create_linking_context_from_compilation_outputs(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        compilation_outputs = cc_common.create_compilation_outputs(
            objects = depset(objects),
            pic_objects = depset(objects),
        ),
        linking_contexts = [i.linking_context for i in dep_infos],
        name = ctx.label.name,
    )
    own = CcInfo(compilation_context = compilation_context, linking_context = linking_context)
    return [
        DefaultInfo(files = depset(objects)),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = dep_infos),
    ]

cuda_library = rule(
    implementation = _cuda_library_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "defines": attr.string_list(),
        "copts": attr.string_list(),
        "gpu_arch": attr.string_list(default = DEFAULT_GPU_ARCH),
        "_nvcc": attr.label(
            default = Label("@hvx_cuda//:nvcc"),
            executable = True,
            cfg = "host",
        ),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
    incompatible_use_toolchain_transition = True,
)
