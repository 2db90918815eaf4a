#!/bin/bash
# Scripting throughput side by side: redis-server (AOF, appendfsync everysec) and shale-server
# (same durability) on this machine, medians of 3 alternating runs, as ratios.
# Usage: bench/compare-redis-scripting.sh  (after cargo build --release -p shale-server; N=requests)
set -u
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || { echo "needs redis-server and redis-benchmark (apt-get install redis-server redis-tools)"; exit 2; }
[ -x "${CARGO_TARGET_DIR:-target}/release/shale-server" ] || { echo "build first: cargo build --release -p shale-server"; exit 2; }
RS=7801; SH=7802
rm -rf "$tmp/redis" "$tmp/shale"; mkdir -p "$tmp/redis" "$tmp/shale"
redis-server --port $RS --dir "$tmp/redis" --appendonly yes --appendfsync everysec --save '' --daemonize yes >/dev/null
"${CARGO_TARGET_DIR:-target}/release/shale-server" --port $SH --dir "$tmp/shale"/data --appendfsync everysec >"$tmp/shale"/log 2>&1 &
sleep 1.5
S1="redis.call('incr',KEYS[1]) return redis.call('expire',KEYS[1],100)"
S2="return redis.call('get',KEYS[1])"
for port in $RS $SH; do
  redis-cli -p $port script load "$S1" >/dev/null; redis-cli -p $port script load "$S2" >/dev/null
done
SHA1=$(redis-cli -p $RS script load "$S1"); SHA2=$(redis-cli -p $RS script load "$S2")
run() { # port pipeline args...
  local port=$1 p=$2; shift 2
  redis-benchmark -p $port -c 50 -n ${N:-200000} -r 100000 -P $p --csv "$@" 2>/dev/null | tail -1 | awk -F'","' '{print $2}'
}
median() { sort -n | sed -n 2p; }
for p in 1 16; do
  for name in "evalsha-incr-expire-1key" "evalsha-incr-expire" "evalsha-get" "eval-incr-expire"; do
    case $name in
      evalsha-incr-expire-1key) args=(evalsha $SHA1 1 key);;
      evalsha-incr-expire) args=(evalsha $SHA1 1 key:__rand_int__);;
      evalsha-get) args=(evalsha $SHA2 1 key:__rand_int__);;
      eval-incr-expire) args=(eval "$S1" 1 key:__rand_int__);;
    esac
    r=(); s=()
    for i in 1 2 3; do r+=($(run $RS $p "${args[@]}")); s+=($(run $SH $p "${args[@]}")); done
    rm=$(printf "%s\n" "${r[@]}" | median); sm=$(printf "%s\n" "${s[@]}" | median)
    printf "%-24s P%-3s redis %10s  shale %10s  ratio %s\n" $name $p $rm $sm $(awk -v a=$sm -v b=$rm 'BEGIN{printf "%.2f", a/b}')
  done
done
redis-cli -p $RS shutdown nosave >/dev/null; redis-cli -p $SH shutdown >/dev/null
