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

# Every report goes to a file under sanitizer-logs/ too, so that one in a
# process whose exit status no test looks at (a server a Python test stops, a
# rule worker) fails the run as well. halt_on_error: the first report ends the
# process. detect_leaks stays on (ASan's default on Linux).
logs="$(cd "$BUILD_DIR" && pwd)/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_stack_use_after_return=0}:log_path=$logs/asan
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}:log_path=$logs/ubsan
# Leaks inside third-party libraries (each one explained in the file).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(pwd)/scripts/lsan.supp:print_suppressions=0}
cd "$BUILD_DIR"
status=0
ctest --output-on-failure -j"$JOBS" "$@" || status=$?
if compgen -G "$logs/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports (one file per process):" >&2
  for f in "$logs"/*; do echo "== $f" >&2; cat "$f" >&2; done
  status=1
fi
if [ "$status" -eq 0 ]; then echo "sanitize.sh: the suite passes under ASan+UBSan"; fi
exit "$status"
