#!/usr/bin/env bash
# tools/test_summary counts tests that skip at run time (no root, no GPU) as skipped, not passed.
#   test_summary_test.sh TEST_SUMMARY
set -uo pipefail
SUMMARY=$(readlink -f "$1")
T=${TEST_TMPDIR:-$(mktemp -d)}
logs=$T/testlogs
mkdir -p "$logs"/a/ok "$logs"/a/root "$logs"/b/gpu "$logs"/b/some "$logs"/b/bad
echo "ok: everything" >"$logs/a/ok/test.log"
printf 'ok: without root\nSKIPPED: needs root to create network namespaces (uid 1000)\n' >"$logs/a/root/test.log"
printf '[==========] 3 tests ran.\n[  PASSED  ] 0 tests.\n[  SKIPPED ] 3 tests, listed below:\n' >"$logs/b/gpu/test.log"
printf '[==========] 3 tests ran.\n[  PASSED  ] 2 tests.\n[  SKIPPED ] 1 test, listed below:\n' >"$logs/b/some/test.log"
echo "FAIL: something" >"$logs/b/bad/test.log"
cat >"$T/out" <<'EOT'
INFO: Build completed, 1 test FAILED, 40 total actions
//a:ok                                                          (cached) PASSED in 0.1s
//a:root                                                                 PASSED in 1.0s
//b:gpu                                                                  PASSED in 0.2s
//b:some                                                                 PASSED in 0.3s
//b:bad                                                                  FAILED in 0.3s
//b:cuda_only                                                            SKIPPED
EOT
failures=0
got=$("$SUMMARY" "$T/out" "$logs" 3)
echo "$got"
[[ $(tail -n 1 <<<"$got") == "2 passed, 1 failed, 3 skipped" ]] || { echo "FAIL: counts"; failures=1; }
grep -qx "skipped at run time: //a:root: SKIPPED: needs root to create network namespaces (uid 1000)" <<<"$got" ||
    { echo "FAIL: the root skip is named with its reason"; failures=1; }
grep -q "skipped at run time: //b:gpu: \[  SKIPPED \] 3 tests" <<<"$got" || { echo "FAIL: the GPU skip is named"; failures=1; }
# A build error with no failing target is one failure; nothing passing is "no test ran".
printf 'ERROR: build failed\n' >"$T/broken"
[[ $("$SUMMARY" "$T/broken" "$logs" 1 | tail -n 1) == "0 passed, 1 failed" ]] || { echo "FAIL: build error"; failures=1; }
printf '//a:root   PASSED in 1.0s\n' >"$T/onlyskip"
got=$("$SUMMARY" "$T/onlyskip" "$logs" 0)
grep -qx "no test ran" <<<"$got" && [[ $(tail -n 1 <<<"$got") == "0 passed, 1 failed, 1 skipped" ]] ||
    { echo "FAIL: only skips: $got"; failures=1; }
exit $failures
