"""Offline stand-ins for the rule repositories Bazel 4's built-in WORKSPACE suffix would download.

They are written by a repository rule (not local_repository), so they need no path and keep working
when hvx is vendored into another workspace.
"""

def _forwarders(doc, names):
    """A defs.bzl whose rules are the native rules of the same names."""
    lines = ['"""%s"""' % doc]
    for n in names:
        lines.append("def %s(**kwargs):\n    native.%s(**kwargs)\n" % (n, n))
    return "\n".join(lines)

_CC_RULES = ["cc_binary", "cc_import", "cc_library", "cc_proto_library", "cc_test", "cc_toolchain",
             "cc_toolchain_suite", "fdo_prefetch_hints", "fdo_profile", "objc_import", "objc_library"]
_JAVA_RULES = ["java_binary", "java_import", "java_library", "java_lite_proto_library",
               "java_package_configuration", "java_plugin", "java_proto_library", "java_runtime",
               "java_test", "java_toolchain"]

# Coverage post-processing. Bazel runs `lcov_merger` after each instrumented test and
# `coverage_report_generator` for --combined_report; an empty target makes Bazel crash, so both are
# real: they concatenate the lcov files they are given (gcc's gcov output converted by Bazel's own
# collect_cc_coverage.sh) into the requested output.
_MERGER = '''#!/usr/bin/env bash
set -euo pipefail
out=""; dir=""; reports=""
for a in "$@"; do
  case "$a" in
    --output_file=*) out="${a#*=}" ;;
    --coverage_dir=*) dir="${a#*=}" ;;
    --reports_file=*) reports="${a#*=}" ;;
  esac
done
[ -n "$out" ] || { echo "lcov_merger: --output_file is required" >&2; exit 2; }
: > "$out"
if [ -n "$reports" ] && [ -f "$reports" ]; then
  while IFS= read -r f; do [ -f "$f" ] && cat "$f" >> "$out"; done < "$reports"
elif [ -n "$dir" ] && [ -d "$dir" ]; then
  find "$dir" -name '*.dat' -o -name '*.info' | sort | while IFS= read -r f; do cat "$f" >> "$out"; done
fi
'''

def _stub_repo_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    kind = rctx.attr.kind
    if kind == "rules_cc":
        rctx.file("BUILD.bazel", "")
        rctx.file("cc/BUILD.bazel", "")
        rctx.file("cc/defs.bzl", _forwarders("Offline rules_cc: the native C++ rules.", _CC_RULES))
    elif kind == "rules_java":
        rctx.file("BUILD.bazel", "")
        rctx.file("java/BUILD.bazel", "")
        rctx.file("java/defs.bzl", _forwarders("Offline rules_java: the native Java rules.", _JAVA_RULES))
    elif kind == "coverage":
        rctx.file("lcov_merger.sh", _MERGER, executable = True)
        rctx.file("BUILD.bazel", """
sh_binary(name = "Main", srcs = ["lcov_merger.sh"], visibility = ["//visibility:public"])
sh_binary(name = "lcov_merger", srcs = ["lcov_merger.sh"], visibility = ["//visibility:public"])
sh_binary(name = "coverage_report_generator", srcs = ["lcov_merger.sh"], visibility = ["//visibility:public"])
""")
        rctx.file("java/com/google/devtools/coverageoutputgenerator/BUILD.bazel", """
sh_binary(name = "Main", srcs = ["//:lcov_merger.sh"], visibility = ["//visibility:public"])
""")
    else:
        fail("hvx: unknown offline stub kind '%s'" % kind)

_stub_repo = repository_rule(
    implementation = _stub_repo_impl,
    attrs = {"kind": attr.string(mandatory = True)},
)

def hvx_offline_stubs():
    existing = native.existing_rules()
    for name, kind in [
        ("rules_cc", "rules_cc"),
        ("rules_java", "rules_java"),
        ("remote_coverage_tools", "coverage"),
    ]:
        if name not in existing:
            _stub_repo(name = name, kind = kind)
