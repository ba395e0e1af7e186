"""Fuzz targets (hvx/testing/fuzz.h).

    load("//hvx/testing:fuzz.bzl", "hvx_fuzz_test")
    hvx_fuzz_test(name = "message_fuzz_test", srcs = ["message_fuzz.cc"], deps = [":core"])

makes NAME, a test that replays the target's seeds, the corpus files (`corpus`, and the packed
corpus fuzz_corpus/NAME.corpus beside the BUILD file where there is one: what libFuzzer found,
kept by `tools/fuzz --grow`) and a fixed set of mutations
of them (fuzz_main.cc; `bazel test //...` runs it, and --config=asan finds what it trips over),
and NAME_fuzzer, the libFuzzer binary, built only with --config=fuzz (clang) and run by tools/fuzz.
"""

def hvx_fuzz_test(name, srcs, deps = [], corpus = [], iterations = 20000, **kwargs):
    corpus = corpus + native.glob(["fuzz_corpus/%s.corpus" % name], allow_empty = True)
    native.cc_library(
        name = name + "_target",
        testonly = True,
        srcs = srcs,
        deps = deps + [Label("//hvx/testing:fuzz")],
        alwayslink = True,
    )
    native.cc_test(
        name = name,
        args = ["--iterations=%d" % iterations] + ["$(rootpaths %s)" % c for c in corpus],
        data = corpus,
        deps = [
            ":" + name + "_target",
            Label("//hvx/testing:fuzz_main"),
        ],
        **kwargs
    )
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = [
            "hvx_fuzzer",
            "manual",
        ],
        deps = [":" + name + "_target"],
    )
