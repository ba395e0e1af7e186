"""Tests on hosts made of network namespaces (tests/multihost/netns_hosts.sh).

    load("//tests/multihost:defs.bzl", "netns_test")
    netns_test(name = "tcp_test", srcs = ["tcp_test.sh"], args = [...], data = [...])
"""

def netns_test(name, srcs, args = [], data = [], tags = [], **kwargs):
    """A large sh_test with the namespace-host helpers in its runfiles.

    It runs outside Bazel's sandbox, which cannot create network namespaces, and alone (exclusive):
    its hosts' processes share the machine's cores. Without root it prints SKIPPED and passes.
    `tags` are added to those.
    """
    native.sh_test(
        name = name,
        size = "large",
        srcs = srcs,
        args = args,
        data = data + [
            Label("//tests/multihost:lib.sh"),
            Label("//tests/multihost:netns_hosts.sh"),
        ],
        tags = [
            "exclusive",
            "no-sandbox",
        ] + tags,
        **kwargs
    )
