#!/usr/bin/env bash
# A primary's write throughput with 0, 1 and 2 replicas, redis-server against shale-server on the
# same machine, runs alternating, medians: how much of its speed a primary keeps while it feeds
# replicas (#14's goal: ≥ 0.9× of its no-replica speed). Every node of a run is on this machine,
# so replicas take their CPU from the same cores as the primary and redis-benchmark; quote the
# number of cores with the result.
#
#   bench/compare-replicas.sh
#   RUNS=5 REQUESTS=2000000 bench/compare-replicas.sh
#
# Environment: REQUESTS (1000000), KEYSPACE (1000000), CLIENTS (50), PIPELINE (16), RUNS (3),
# REPLICAS ("0 1 2"), REDIS_ARGS (AOF, fsync every second: Shale's default durability),
# SHALE_ARGS (none), BASE_PORT (17100; the primary, replicas on the ports after it).
# After each run the replicas must reach the primary's DBSIZE within 30 s, or the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-1000000}
KEYSPACE=${KEYSPACE:-1000000}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
RUNS=${RUNS:-3}
REPLICAS=${REPLICAS:-"0 1 2"}
REDIS_ARGS=${REDIS_ARGS:---save "" --appendonly yes --appendfsync everysec}
SHALE_ARGS=${SHALE_ARGS:-}
BASE_PORT=${BASE_PORT:-17100}

. bench/servers.sh
WORK=$(mktemp -d)
MAX=0; for n in $REPLICAS; do [ "$n" -gt "$MAX" ] && MAX=$n; done

stop_all() {
  for i in $(seq 0 "$MAX"); do redis-cli -p $((BASE_PORT + i)) shutdown nosave >/dev/null 2>&1 || true; done
  for i in $(seq 0 "$MAX"); do
    for _ in $(seq 50); do redis-cli -p $((BASE_PORT + i)) ping >/dev/null 2>&1 || break; sleep 0.1; done
  done
}
trap 'stop_all; rm -rf "$WORK"' EXIT

wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "no server on $1" >&2; exit 1; }

# start KIND PORT DIR [--replicaof HOST PORT]
start() {
  local kind=$1 port=$2 dir=$3; shift 3
  mkdir -p "$dir"
  if [ "$kind" = redis ]; then
    eval redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --daemonize no $REDIS_ARGS '"$@"' >"$dir.log" 2>&1 &
  else
    eval '"$SHALE"' --port "$port" --bind 127.0.0.1 --dir "$dir" $SHALE_ARGS '"$@"' >"$dir.log" 2>&1 &
  fi
  wait_port "$port"
}

# One run: a fresh primary and N fresh replicas, redis-benchmark SET on the primary; prints rps.
run_once() {
  local kind=$1 n=$2 dir="$WORK/$1-$2"
  rm -rf "$dir"
  start "$kind" "$BASE_PORT" "$dir/primary"
  for r in $(seq "$n"); do start "$kind" $((BASE_PORT + r)) "$dir/replica$r" --replicaof 127.0.0.1 "$BASE_PORT"; done
  for r in $(seq "$n"); do
    for _ in $(seq 150); do
      redis-cli -p $((BASE_PORT + r)) info replication | grep -q 'master_link_status:up' && break; sleep 0.2
    done
  done
  local rps
  rps=$(redis-benchmark -p "$BASE_PORT" -t set -P "$PIPELINE" -c "$CLIENTS" -n "$REQUESTS" -r "$KEYSPACE" --csv 2>/dev/null \
        | awk -F'"' '$2 == "SET" {print $4}')
  local want; want=$(redis-cli -p "$BASE_PORT" dbsize)
  for r in $(seq "$n"); do
    local got=""
    for _ in $(seq 300); do got=$(redis-cli -p $((BASE_PORT + r)) dbsize); [ "$got" = "$want" ] && break; sleep 0.1; done
    [ "$got" = "$want" ] || { echo "$kind replica $r holds $got keys, its primary $want" >&2; exit 1; }
  done
  stop_all
  rm -rf "$dir"
  echo "$rps"
}

echo "redis-server $(redis-server --version | awk '{print $3}'), shale-server $("$SHALE" --version 2>&1 | head -1 | awk '{print $2}'), $(nproc) cores" >&2
RESULTS="$WORK/results.txt"
for run in $(seq "$RUNS"); do
  for n in $REPLICAS; do
    for kind in redis shale; do
      rps=$(run_once "$kind" "$n")
      echo "run $run: $kind, $n replicas: $rps SET/s" >&2
      echo "$kind $n $rps" >> "$RESULTS"
    done
  done
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kind, n, rps = line.split()
    rows.setdefault((kind, int(n)), []).append(float(rps))
med = {k: statistics.median(v) for k, v in rows.items()}
print("| replicas | redis-server SET/s | of no-replica | shale-server SET/s | of no-replica | shale / redis |")
print("|---:|---:|---:|---:|---:|---:|")
for n in sorted({n for _, n in med}):
    r, s = med.get(("redis", n)), med.get(("shale", n))
    r0, s0 = med.get(("redis", 0)), med.get(("shale", 0))
    own = lambda v, base: f"{v / base:.2f}x" if v and base else "-"
    ratio = f"{s / r:.2f}x" if r and s else "-"
    print(f"| {n} | {r:,.0f} | {own(r, r0)} | {s:,.0f} | {own(s, s0)} | {ratio} |")
PY
