#!/usr/bin/env bash
# Builds the whole project with AddressSanitizer + UndefinedBehaviorSanitizer
# (g++; any UB report aborts the process) and runs the whole ctest suite there.
# The Python tests count too: they start the sanitized tensorkeep-server from
# the sanitized build's bin/, so a report in the server fails them.
#
#   scripts/sanitize.sh [ctest args...]      e.g. -R record_block
#
# BUILD_DIR (default build-asan, relative to the repository) is where it
# builds; it never touches build/. JOBS defaults to nproc.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build-asan}

# TK_SANITIZE adds -fsanitize=address,undefined -fno-omit-frame-pointer;
# -fno-sanitize-recover makes UBSan abort instead of printing and going on.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=undefined" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"

# halt_on_error: the first report fails the test. detect_leaks stays on
# (ASan's default on Linux). print_stacktrace: UBSan reports with a stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$BUILD_DIR"
ctest --output-on-failure -j"$JOBS" --timeout 900 "$@"
