#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan +
# libFuzzer) in a build directory of their own, and runs each for a bounded
# time on a copy of its seed corpus (the fuzz_* ctest entries). Fails on any
# crash; says clearly, and fails, when clang or libFuzzer is missing.
#
#   scripts/fuzz.sh [seconds per target]      default 20 (TK_FUZZ_SECONDS)
#   scripts/fuzz.sh --seeds                   rewrites tests/fuzz/corpus/*/seed_*
#
# BUILD_DIR (default build-fuzz, relative to the repository) is where it builds;
# it never touches build/. TK_FUZZ_SKIP_OK=1 turns a missing clang or libFuzzer
# into a printed skip with exit status 0 (for machines that cannot fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${TK_FUZZ_SECONDS:-20}
MODE=run
case "${1:-}" in
  --seeds) MODE=seeds ;;
  "") ;;
  *) SECONDS_PER_TARGET=$1 ;;
esac

CLANGXX=${TK_FUZZ_CXX:-clang++}
skip() {
  echo "fuzz.sh: SKIPPED, NOT RUN: $*" >&2
  if [ "${TK_FUZZ_SKIP_OK:-0}" = 1 ]; then exit 0; fi
  exit 1
}
command -v "$CLANGXX" >/dev/null 2>&1 || skip "no $CLANGXX (install clang: scripts/install-deps.sh)"
"$CLANGXX" --version | head -1 | grep -q clang || skip "$CLANGXX is not clang"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  >"$probe/probe.cc"
"$CLANGXX" -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" 2>"$probe/err" ||
  skip "$CLANGXX cannot link -fsanitize=fuzzer,address,undefined (libFuzzer is in libclang-rt-14-dev): $(head -3 "$probe/err")"

# TK_SANITIZE: -fsanitize=address,undefined on every target. fuzzer-no-link:
# coverage for libFuzzer in the libraries too; the fuzzers link libFuzzer.
cmake -S . -B "$BUILD_DIR" -DCMAKE_CXX_COMPILER="$CLANGXX" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_FUZZ=ON -DTK_SANITIZE=ON -DTK_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
  -DTK_FUZZ_SECONDS="$SECONDS_PER_TARGET" >/dev/null
targets=(record_block_fuzzer keys_fuzzer npy_fuzzer value_log_fuzzer push_fuzzer)
if [ "$MODE" = seeds ]; then
  cmake --build "$BUILD_DIR" -j"$JOBS" --target tk_make_corpus
  "$BUILD_DIR/tests/fuzz/bin/tk_make_corpus" "$ROOT/tests/fuzz/corpus"
  echo "fuzz.sh: seeds written to tests/fuzz/corpus"
  exit 0
fi
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$BUILD_DIR"
rm -f fuzz-artifacts/*/summary
status=0
ctest -L fuzz --output-on-failure -j"$JOBS" || status=$?
cat fuzz-artifacts/*/summary 2>/dev/null || true
exit "$status"
