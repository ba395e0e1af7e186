#!/usr/bin/env bash
# The run's report.html (summaries_dir/<run>/report.html), rendered by headless Chromium (Debian's
# chromium): the curves are drawn (the screenshot has them) and the page's numbers are the trainer's log's.
#   report_test.sh TRAIN MAKE_IDX REPORT_CHECK LIB PYTHON
set -uo pipefail
TRAIN=$(readlink -f "$1"); MAKE_IDX=$(readlink -f "$2"); CHECK=$(readlink -f "$3"); source "$4"
PYTHON=$(readlink -f "$5")
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
tiny_config "$T" cnn 400 60 10 2 || { echo "FAIL: could not write the dataset"; exit 1; }
timeout -k 5 300 "$TRAIN" --config="$T/tiny.pbtxt" \
    --override="launch { num_processes: \"2\" } summaries_dir: \"$T/s\"" >"$T/out" 2>"$T/err"
check "training exits 0" $?
pages=("$T"/s/*/report.html)
PAGE=${pages[0]}
[[ ${#pages[@]} == 1 && -s $PAGE ]]; check "rank 0 wrote one report.html in the run's folder: ${pages[*]}" $?
CHROMIUM=${HVX_CHROMIUM:-$(command -v chromium || command -v chromium-browser)}
if [[ -z $CHROMIUM ]]; then
    echo "SKIPPED: Chromium is not installed (apt-get install chromium); checks without it: $failures failures"
    exit $((failures != 0))
fi
chrome() {  # chrome ARGS...: headless, no network of its own, a fresh profile
    local profile; profile=$(mktemp -d "$T/profile.XXXX")
    timeout -k 5 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --hide-scrollbars --user-data-dir="$profile" --window-size=1200,1600 "$@" 2>>"$T/chromium.err"
}
chrome --screenshot="$T/shot.png" "file://$PAGE" >/dev/null
check "Chromium renders a screenshot" $?
chrome --dump-dom "file://$PAGE" >"$T/dom.html"
check "Chromium dumps the rendered page" $?
"$PYTHON" "$CHECK" "$T/dom.html" "$T/shot.png" "$T/out" "$T/err"
check "the page shows the curves and the log's numbers" $?
echo "failures: $failures"
[[ $failures == 0 ]]
