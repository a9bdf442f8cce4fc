#!/usr/bin/env bash
# Cache host vs redis-server on this machine, in one run, with the same client (redis-benchmark) and settings:
# 64 KB SET, GET and a 16-key MGET, each store on its own loopback port. Prints a Markdown table.
# Usage: jobs/Bench/cachehost-vs-redis.sh [requests] [clients]     (after dotnet build jobs/Hpc.Jobs.csproj -c Release)
set -euo pipefail
cd "$(dirname "$0")/../.."
requests=${1:-20000}
clients=${2:-16}
bin=${HPCDATA_BIN:-artifacts/bin/Hpc.CacheHost/release}
ours=16380 theirs=16379
work=$(mktemp -d /tmp/hcd-micro.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

dotnet "$bin/Hpc.CacheHost.dll" --address 127.0.0.1 --port $ours --max-memory 2GB >"$work/cachehost.log" 2>&1 &
pids+=($!)
redis-server --port $theirs --bind 127.0.0.1 --save '' --appendonly no --maxmemory 2gb --dir "$work" >"$work/redis.log" 2>&1 &
pids+=($!)
for port in $ours $theirs; do
  for _ in $(seq 100); do redis-cli -p $port PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
done

keys=1000   # 1000 × 64 KB = 64 MB per store: every GET hits a stored value after the SET pass
mget=(MGET); for _ in $(seq 16); do mget+=("key:__rand_int__"); done
row() { # name port test...
  local name=$1 port=$2; shift 2
  redis-benchmark -p "$port" -c "$clients" -r $keys --csv "$@" | tail -n +2 | tr -d '"' |
    while IFS=, read -r test rps avg min p50 p95 p99 max; do
      printf '| %s | %s | %.0f | %.0f | %.2f | %.2f | %.2f |\n' "$name" "${test%% *}" "$rps" "$(echo "$rps * 65536 / 1000000 * ${mult:-1}" | bc -l)" "$avg" "$p50" "$p99"
    done
}
echo "| store | test | requests/s | MB/s | avg ms | p50 ms | p99 ms |"
echo "|---|---|---|---|---|---|---|"
for s in "cachehost $ours" "redis-server $theirs"; do
  set -- $s
  mult=1 row "$1" "$2" -n "$requests" -d 65536 -t set,get
  mult=16 row "$1" "$2" -n $((requests / 8)) "${mget[@]}"
done
echo
echo "$(nproc) cores; $clients clients; $requests requests per SET/GET test, $((requests / 8)) per MGET test (16 keys each); redis $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/')"
