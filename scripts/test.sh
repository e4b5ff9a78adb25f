#!/usr/bin/env bash
# Command 2 of the README: installs what is missing, builds, and runs the
# whole test suite (C++ gtest binaries and the Python pytest files, all
# registered with ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
status=0
ctest --output-on-failure -j"${JOBS:-$(nproc)}" --timeout 600 "$@" || status=$?
# What skipped itself on this machine, and why (ctest counts it as passed).
bash ../scripts/report-skips.sh Testing/Temporary/LastTest.log
[ "$status" -eq 0 ] || exit "$status"
# The fuzzers, 20 s each, in their own clang build (build-fuzz/; ~3-5 min on 2 cores).
bash ../scripts/fuzz.sh
