#!/usr/bin/env bash
# Side-by-side server benchmark: redis-benchmark against Debian's redis-server and against
# shale-server on the same machine, runs alternating, medians reported as a markdown table with
# ratios, plus each server's RSS after its last run.
#
#   bench/compare-redis.sh                       # -n 1000000 -r 1000000 -c 50, P1 and P16, 3 runs
#   REQUESTS=200000 RUNS=5 bench/compare-redis.sh
#   TESTS=all bench/compare-redis.sh             # redis-benchmark's whole default test set
#   TLS=1 bench/compare-redis.sh                 # both servers TLS-only, redis-benchmark --tls
#
# Environment: REQUESTS (1000000), KEYSPACE (1000000), CLIENTS (50), PIPELINES ("1 16"),
# TESTS (set,get; "all" = no -t, every default test in redis-benchmark's order), RUNS (3),
# DATA_SIZE (3, redis-benchmark's default), REDIS_ARGS (persistence off: --save "" --appendonly no),
# SHALE_ARGS (appendfsync everysec, the default), TEST_TIMEOUT (seconds one redis-benchmark run may
# take, 600; a run cut off reports the tests it finished), TLS (1: a CA and a server certificate
# for 127.0.0.1 are made with openssl, both servers listen with TLS only, clients use --tls).
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-1000000}
KEYSPACE=${KEYSPACE:-1000000}
CLIENTS=${CLIENTS:-50}
PIPELINES=${PIPELINES:-"1 16"}
TESTS=${TESTS:-set,get}
RUNS=${RUNS:-3}
DATA_SIZE=${DATA_SIZE:-3}
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
REDIS_ARGS=${REDIS_ARGS:---save "" --appendonly no}
SHALE_ARGS=${SHALE_ARGS:---appendfsync everysec}
REDIS_PORT=${REDIS_PORT:-16379}
SHALE_PORT=${SHALE_PORT:-16380}
TLS=${TLS:-0}

. bench/servers.sh
WORK=$(mktemp -d)
CLIENT_TLS=()
listen() { echo "--port $1"; }
if [ "$TLS" = 1 ]; then
  command -v openssl >/dev/null || { echo "TLS=1 needs openssl" >&2; exit 2; }
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/ca.key" -out "$WORK/ca.crt" -days 2 -subj /CN=bench-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$WORK/server.key" -out "$WORK/server.csr" -subj /CN=localhost 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$WORK/san.cnf"
  openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -CAcreateserial \
    -out "$WORK/server.crt" -days 2 -extfile "$WORK/san.cnf" 2>/dev/null
  CLIENT_TLS=(--tls --cacert "$WORK/ca.crt")
  listen() { echo "--port 0 --tls-port $1 --tls-cert-file $WORK/server.crt --tls-key-file $WORK/server.key --tls-ca-cert-file $WORK/ca.crt --tls-auth-clients no"; }
fi
cli() { redis-cli "${CLIENT_TLS[@]}" "$@"; }
# The servers finish shutting down after they answer: wait (up to 10 s) before removing their files.
trap 'cli -p $REDIS_PORT shutdown nosave >/dev/null 2>&1 || true; cli -p $SHALE_PORT shutdown >/dev/null 2>&1 || true
      for _ in $(seq 100); do [ -z "$(jobs -pr)" ] && break; sleep 0.1; done; rm -rf "$WORK"' EXIT

wait_port() { for _ in $(seq 100); do cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "no server on $1" >&2; exit 1; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

eval redis-server $(listen "$REDIS_PORT") --dir "$WORK" --daemonize no $REDIS_ARGS >"$WORK/redis.log" 2>&1 &
eval "$SHALE" $(listen "$SHALE_PORT") --dir "$WORK/shale" $SHALE_ARGS >"$WORK/shale.log" 2>&1 &
wait_port "$REDIS_PORT"; wait_port "$SHALE_PORT"
echo "redis-server $(redis-server --version | awk '{print $3}'), shale-server $("$SHALE" --version 2>&1 | head -1 | awk '{print $2}')" >&2

RESULTS="$WORK/results.txt"
for run in $(seq "$RUNS"); do
  for p in $PIPELINES; do
    for server in redis shale; do
      port=$REDIS_PORT; [ "$server" = shale ] && port=$SHALE_PORT
      only=(-t "$TESTS"); [ "$TESTS" = all ] && only=()
      timeout "$TEST_TIMEOUT" redis-benchmark "${CLIENT_TLS[@]}" -p "$port" -c "$CLIENTS" -n "$REQUESTS" -r "$KEYSPACE" -d "$DATA_SIZE" -P "$p" "${only[@]}" --csv 2>/dev/null \
        | tail -n +2 | while IFS= read -r line; do
            # "TEST NAME","rps",...: test names may hold spaces and commas inside the quotes.
            test=$(echo "$line" | cut -d'"' -f2); rps=$(echo "$line" | cut -d'"' -f4)
            printf '%s\t%s\t%s\t%s\n' "$server" "P$p" "$test" "$rps" >> "$RESULTS"
            echo "run $run: $server P$p $test $rps rps" >&2
          done || true
    done
  done
done
pid_of() { cli -p "$1" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}'; }
REDIS_RSS=$(rss_kb "$(pid_of $REDIS_PORT)"); SHALE_RSS=$(rss_kb "$(pid_of $SHALE_PORT)")

python3 - "$RESULTS" "$REDIS_RSS" "$SHALE_RSS" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    server, p, test, rps = line.rstrip("\n").split("\t")
    if (p, test) not in order:
        order.append((p, test))
    rows[(p, test, server)].append(float(rps))
print("| test | pipeline | redis-server rps | shale-server rps | ratio |")
print("|---|---|---:|---:|---:|")
ratios = []
for (p, test) in sorted(order, key=lambda k: (int(k[0][1:]), order.index(k))):
    r, s = rows.get((p, test, "redis")), rows.get((p, test, "shale"))
    if not r or not s:
        print(f"| {test} | {p} | {statistics.median(r) if r else 0:,.0f} | {'(did not finish)' if not s else f'{statistics.median(s):,.0f}'} | - |")
        continue
    r, s = statistics.median(r), statistics.median(s)
    ratios.append(s / r)
    print(f"| {test} | {p} | {r:,.0f} | {s:,.0f} | {s / r:.2f}x |")
if ratios:
    print(f"\nratios: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x over {len(ratios)} tests")
print(f"RSS after the runs: redis-server {int(sys.argv[2]) / 1024:.1f} MiB, shale-server {int(sys.argv[3]) / 1024:.1f} MiB")
PY
