#!/usr/bin/env bash
# Starts a cluster of N tensorkeep collectors on loopback, for tests and for
# trying scaling out (docs/scaling-out.md):
#
#   deploy/local-cluster.sh [-n N] [--bin DIR] [--data-dir DIR] [--ports P1,P2,...]
#                           [-- EXTRA SERVER ARGS...]
#
#   -n N          collectors (default 3)
#   --bin DIR     where tensorkeep-server is (default: build/bin next to this script,
#                 else $PATH)
#   --data-dir D  keep collector i's data in D/collector-i (default: a temporary
#                 directory, deleted on exit)
#   --ports LIST  the ports to use (default: free ones picked now); give the same
#                 ports and --data-dir with a larger -n to restart a cluster with
#                 one more collector (the new ports are picked)
#
# Each collector runs `tensorkeep-server --listen 127.0.0.1:P --cluster LIST
# --advertise 127.0.0.1:P`. Once all listen, it prints
#   TENSORKEEP_SERVERS=127.0.0.1:P1,127.0.0.1:P2,...
# (export it, then run `tensorkeep trials`, Python's create_trial, ...), and
# waits. Ctrl-C (or SIGTERM) stops the collectors (SIGTERM: streams drained,
# databases closed) and removes the temporary data. It exits non-zero if a
# collector fails to start or dies, printing its log.
set -euo pipefail

n=3
bin=""
data_dir=""
ports=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --data-dir) data_dir="$2"; shift 2 ;;
    --ports) ports="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "local-cluster.sh: unknown argument '$1' (--help for usage)" >&2; exit 2 ;;
  esac
done
if ! [[ "$n" =~ ^[0-9]+$ ]] || (( n < 1 || n > 64 )); then
  echo "local-cluster.sh: -n needs a number from 1 to 64" >&2; exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "$bin" && -x "$here/../build/bin/tensorkeep-server" ]]; then bin="$here/../build/bin"; fi
server="${bin:+$bin/}tensorkeep-server"
if ! command -v "$server" >/dev/null; then
  echo "local-cluster.sh: $server not found (build it, or give --bin DIR)" >&2; exit 1
fi

temp=""
if [[ -z "$data_dir" ]]; then
  temp="$(mktemp -d -t tensorkeep-cluster.XXXXXX)"
  data_dir="$temp"
fi
mkdir -p "$data_dir"

# Free ports: bound to port 0 by the kernel, then released for the collectors.
# (Another process could take one in between; the collector then fails to
# start and this script says so.)
IFS=',' read -r -a port_list <<< "$ports"
if (( ${#port_list[@]} > n )); then
  echo "local-cluster.sh: --ports lists ${#port_list[@]} ports for $n collectors" >&2; exit 2
fi
missing=$(( n - ${#port_list[@]} ))
if (( missing > 0 )); then
  read -r -a fresh <<< "$(python3 - "$missing" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
)"
  port_list+=("${fresh[@]}")
fi

addresses=()
for p in "${port_list[@]}"; do addresses+=("127.0.0.1:$p"); done
cluster="$(IFS=','; echo "${addresses[*]}")"

pids=()
stop() {
  trap - INT TERM EXIT
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n "$temp" ]]; then rm -rf "$temp"; fi
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap 'stop' EXIT

for i in "${!addresses[@]}"; do
  dir="$data_dir/collector-$i"
  mkdir -p "$dir"
  "$server" --listen "${addresses[$i]}" --data-dir "$dir/data" --cluster "$cluster" \
      --advertise "${addresses[$i]}" ${extra[@]+"${extra[@]}"} >"$dir/stdout" 2>"$dir/log" &
  pids+=("$!")
done

# Wait (bounded) for every collector's "listening on" line.
for i in "${!addresses[@]}"; do
  dir="$data_dir/collector-$i"
  for _ in $(seq 1 300); do
    if grep -q '^listening on ' "$dir/stdout" 2>/dev/null; then break; fi
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if ! grep -q '^listening on ' "$dir/stdout" 2>/dev/null; then
    echo "local-cluster.sh: collector $i (${addresses[$i]}) did not start; its log:" >&2
    tail -n 20 "$dir/log" >&2 || true
    exit 1
  fi
done

echo "TENSORKEEP_SERVERS=$cluster"
echo "# $n collectors, data in $data_dir${temp:+ (deleted on exit)}; logs: $data_dir/collector-*/log" >&2
echo "# export TENSORKEEP_SERVERS=$cluster; Ctrl-C stops them" >&2

# Wait until interrupted, or until a collector dies.
while true; do
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "local-cluster.sh: collector $i (${addresses[$i]}) exited; its log:" >&2
      tail -n 20 "$data_dir/collector-$i/log" >&2 || true
      exit 1
    fi
  done
  sleep 1 &
  wait $! || true
done
