#!/usr/bin/env bash
# Command 1 of the README: installs what is missing, builds, then runs the
# demo — a collector on a local data directory, a badly initialised PyTorch
# training run pushing to it, a rule worker watching it live that stops the
# run, a well-initialised second run, and a comparison plot.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
DATA_DIR=${TENSORKEEP_DEMO_DIR:-$PWD/tensorkeep-demo}
mkdir -p "$DATA_DIR"
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 examples/pytorch_bad_init.py \
  --server-binary build/bin/tensorkeep-server --rule-worker build/bin/tensorkeep-rules \
  --data-dir "$DATA_DIR/data" --out-dir "$DATA_DIR" "$@"
