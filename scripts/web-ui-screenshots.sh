#!/usr/bin/env bash
# Screenshots of the web UI for docs/ (docs/web-ui.md, the README's tour):
# serves the demo's data directory (./scripts/demo.sh first) with
# --http-listen and has headless Chromium shoot the trials page, the well
# initialised trial and the comparison of the demo's last two trials.
#   scripts/web-ui-screenshots.sh [DATA_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-$PWD/tensorkeep-demo/data}
OUT=${2:-$PWD/docs}
BIN=${TK_BIN_DIR:-$PWD/build/bin}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "web-ui-screenshots: needs chromium (apt-get install chromium)" >&2; exit 1; }
[ -d "$DATA" ] || { echo "web-ui-screenshots: no $DATA: run ./scripts/demo.sh first" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'kill "$SERVER" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$TMP"' EXIT
# A copy, so that the demo's own collector may keep running on DATA.
cp -r "$DATA" "$TMP/data"
"$BIN/tensorkeep-server" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --data-dir "$TMP/data" \
  --log-level warn >"$TMP/out" 2>"$TMP/log" &
SERVER=$!
for _ in $(seq 100); do grep -qs "^http listening on" "$TMP/out" && break; sleep 0.1; done
HTTP=$(sed -n 's/^http listening on //p' "$TMP/out")
[ -n "$HTTP" ] || { echo "web-ui-screenshots: the collector did not start:" >&2; cat "$TMP/log" >&2; exit 1; }
read -r BAD GOOD < <(/usr/bin/python3 -c '
import json, sys, urllib.request
names = [t["name"] for t in json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/api/v1/trials"))["trials"]]
bad = sorted(n for n in names if n.startswith("bad-init-"))
good = sorted(n for n in names if n.startswith("good-init-"))
print(bad[-1], good[-1])' "$HTTP")

shoot() {  # FILE URL
  "$CHROMIUM" --headless=new ${EUID:+$([ "$EUID" -eq 0 ] && echo --no-sandbox)} --disable-gpu \
    --hide-scrollbars --window-size=1400,"$3" --virtual-time-budget=8000 \
    --user-data-dir="$TMP/profile" --screenshot="$OUT/$1" "$2" 2>/dev/null
  echo "web-ui-screenshots: $OUT/$1"
}
shoot web-ui-trials.png "http://$HTTP/" 700
shoot web-ui-trial.png "http://$HTTP/trial/$GOOD" 2200
shoot web-ui-compare.png "http://$HTTP/compare?trials=$BAD,$GOOD" 1100
