#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a copy of its seed corpus
# (never writing into the source tree), and fails on any crash, sanitizer
# report, leak, timeout or out-of-memory. Used by the fuzz_* ctest entries.
#
#   run_fuzzer.sh <fuzzer binary> <seed corpus dir> <seconds> [libFuzzer flags...]
#
# On a crash the input is kept in $TK_FUZZ_ARTIFACTS (default: the build's
# fuzz-artifacts/ directory, given by ctest) and its path is printed: add it to
# the corpus as regression_<what> once the bug is fixed.
set -euo pipefail
fuzzer=$1 seeds=$2 seconds=$3
shift 3
name=$(basename "$fuzzer")
artifacts=${TK_FUZZ_ARTIFACTS:-$PWD/fuzz-artifacts}/$name
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/tk-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cp -r "$seeds"/. "$work/corpus/"
echo "$name: $(ls "$seeds" | wc -l) seed inputs, fuzzing for ${seconds}s"
# -rss_limit_mb also bounds single allocations (malloc_limit_mb defaults to it).
status=0
"$fuzzer" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" >"$work/log" 2>&1 || status=$?
# The log without the line per new input: the start, the end, the stats, any report.
grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$work/log" || true
# One line for scripts/fuzz.sh to print after ctest (which hides passing output).
stat() { sed -n "s/^stat::$1:[[:space:]]*//p" "$work/log" | tail -1; }
echo "$name: $(stat number_of_executed_units) runs in ${seconds}s" \
  "($(stat average_exec_per_sec) exec/s), $(ls "$work/corpus" | wc -l) corpus inputs" \
  "(from $(ls "$seeds" | wc -l) seeds), peak RSS $(stat peak_rss_mb) MB, exit $status" \
  >"$artifacts/summary"
if [ "$status" -ne 0 ]; then
  echo "$name: FAILED (exit $status); reproduce with: $fuzzer $artifacts/<crash file>" >&2
  ls -l "$artifacts" >&2 || true
  exit "$status"
fi
echo "$name: no crash"
