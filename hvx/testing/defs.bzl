"""Rules for tests that run on several MPI ranks.

    load("//hvx/testing:defs.bzl", "hvx_mpi_test")
    hvx_mpi_test(name = "allreduce_test", srcs = ["allreduce_test.cc"], np = 2, deps = [...])
"""

def hvx_mpi_test(name, srcs, deps = [], np = 2, timeout_s = 240, data = [], env = {}, tags = [], **kwargs):
    """A GoogleTest cc_test that runs every test case on `np` ranks under mpiexec.

    Tagged exclusive: MPICH busy-polls, so multi-rank tests running side by side crawl.
    """
    test_env = {
        "MPIEXEC": "$(rootpath @hvx_mpi//:mpiexec)",
        "HVX_TEST_NP": str(np),
        "HVX_TEST_TIMEOUT_S": str(timeout_s),
    }
    test_env.update(env)
    native.cc_test(
        name = name,
        srcs = srcs,
        deps = deps + [Label("//hvx/testing:mpi_gtest_main")],
        data = data + ["@hvx_mpi//:mpiexec"],
        env = test_env,
        tags = tags + ["exclusive"],
        **kwargs
    )
