#!/usr/bin/env bash
# Command 1 of the README: installs what is missing, builds, then runs the
# demo — a collector on a local data directory, a badly initialised PyTorch
# training run pushing to it, a rule worker watching it live that stops the
# run, a well-initialised second run, and a comparison plot.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
# Leave `import tensorkeep` working for Debian's /usr/bin/python3.
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
  $SUDO cmake --install build --component python >/dev/null
  echo "demo: installed the tensorkeep Python package for /usr/bin/python3"
else
  echo "demo: no root or sudo: use PYTHONPATH=$PWD/build/python to import tensorkeep"
fi
DATA_DIR=${TENSORKEEP_DEMO_DIR:-$PWD/tensorkeep-demo}
mkdir -p "$DATA_DIR"
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 examples/pytorch_bad_init.py \
  --server-binary build/bin/tensorkeep-server --rule-worker build/bin/tensorkeep-rules \
  --data-dir "$DATA_DIR/data" --out-dir "$DATA_DIR" "$@"
