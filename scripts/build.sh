#!/usr/bin/env bash
# Configures and builds tensorkeep into build/ (binaries in build/bin, the
# Python package in build/python). Extra arguments go to cmake's configure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
cmake --build build -j"$JOBS"
