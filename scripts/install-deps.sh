#!/usr/bin/env bash
# Installs the Debian 12 packages tensorkeep needs, only those missing.
# Runs apt-get non-interactively (as root, or through sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config lld  # lld: links the tests ~5x faster than GNU ld
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libleveldb-dev libsnappy-dev libspdlog-dev zlib1g-dev libssl-dev libdeflate-dev
  libre2-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev openssl
  python3 python3-grpcio python3-protobuf python3-numpy python3-pytest python3-yaml
  python3-torch python3-matplotlib
  libjs-chart.js            # the web UI's charts, embedded into tensorkeep-server
  chromium python3-websocket  # the web UI's tests drive a headless browser
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
