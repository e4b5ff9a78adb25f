#!/usr/bin/env bash
# Prints every test case that skipped itself, with its reason, from a ctest
# log (default build/Testing/Temporary/LastTest.log): ctest shows a test file
# as passed when some of its cases skipped, so the reasons would otherwise
# stay in the log. Knows gtest's GTEST_SKIP ("file:line: Skipped", the
# reason, "[  SKIPPED ] Suite.Case") and pytest's -rs summary
# ("SKIPPED [n] file:line: reason").
set -euo pipefail
log=${1:-build/Testing/Temporary/LastTest.log}
[ -f "$log" ] || { echo "report-skips: no ctest log at $log" >&2; exit 2; }
awk '
  /^[0-9]+\/[0-9]+ Test: / { test = $3 }
  / Skipped$/ { reason = ""; want = 1; next }
  want == 1 { reason = $0; want = 0; next }
  /^\[  SKIPPED \] [^ ]+ \(/ { print "  " test ": " $4 ": " reason; n++; next }
  /^SKIPPED \[[0-9]+\] / { sub(/^SKIPPED \[[0-9]+\] /, ""); print "  " test ": " $0; n++ }
  END {
    if (n) printf "%d test case(s) skipped themselves (above, with the reason each gave)\n", n
    else print "No test case skipped itself."
  }
' "$log"
