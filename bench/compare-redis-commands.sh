#!/bin/bash
# Commands redis-benchmark's default set leaves out, side by side: redis-server (AOF, appendfsync
# everysec) and shale-server (same durability) on this machine, medians of 3 alternating runs,
# as ratios. Range reads of 100-member collections (HGETALL, HKEYS, SMEMBERS, ZRANGE with and
# without scores, LRANGE) and the bitmap, HyperLogLog and geo commands of issue 18 (a bitmap of
# 10,000 set bits, an HLL of 5,000 elements, 1,000 geo members, each test on the data as the
# tests before it left it, as a user's server would have it).
# Usage: bench/compare-redis-commands.sh  (N=requests per run, 100000; PIPELINES="1 16";
#        TESTS="ranges bits")
set -u
tmp=$(mktemp -d)
. "$(dirname "$0")/servers.sh"
RS=7811; SH=7812
trap 'redis-cli -p $RS shutdown nosave >/dev/null 2>&1; redis-cli -p $SH shutdown >/dev/null 2>&1; sleep 0.5; rm -rf "$tmp"' EXIT
redis-server --port $RS --dir "$tmp" --appendonly yes --appendfsync everysec --save '' --daemonize yes >/dev/null
"$SHALE" --port $SH --dir "$tmp/shale" --appendfsync everysec >"$tmp/shale.log" 2>&1 &
for port in $RS $SH; do
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  for i in $(seq 100); do
    echo "HSET h field$i value$i"; echo "SADD s member$i"; echo "ZADD z $i member$i"; echo "RPUSH l element$i"
  done | redis-cli -p $port >/dev/null
  for i in $(seq 0 8 79999); do echo "SETBIT bm $i 1"; done | redis-cli -p $port >/dev/null
  redis-benchmark -p $port -q -n 5000 -r 1000000 pfadd hll __rand_int__ >/dev/null
  redis-benchmark -p $port -q -n 1000 -r 1000000 geoadd geo 13.__rand_int__ 38.__rand_int__ m__rand_int__ >/dev/null
done
run() { # port pipeline args...
  local port=$1 p=$2; shift 2
  redis-benchmark -p $port -c 50 -n "${N:-100000}" -r 100000 -P "$p" --csv "$@" 2>/dev/null | tail -1 | awk -F'","' '{print $2}'
}
median() { sort -n | sed -n 2p; }
ranges=("hgetall h" "hkeys h" "smembers s" "zrange z 0 -1" "zrange z 0 -1 withscores" "lrange l 0 -1")
bits=("setbit bm 77777 1" "getbit bm 65432" "bitcount bm" "pfadd hll __rand_int__" "pfcount hll"
  "geoadd geo2 13.__rand_int__ 38.__rand_int__ m__rand_int__" "geosearch geo fromlonlat 13.5 38.5 byradius 5 km")
for p in ${PIPELINES:-1 16}; do
  for group in ${TESTS:-ranges bits}; do
    [ "$group" = ranges ] && tests=("${ranges[@]}") || tests=("${bits[@]}")
    for t in "${tests[@]}"; do
      r=(); s=()
      # shellcheck disable=SC2086 # each test is a command line, split on purpose
      for _ in 1 2 3; do r+=("$(run $RS "$p" $t)"); s+=("$(run $SH "$p" $t)"); done
      rm=$(printf "%s\n" "${r[@]}" | median); sm=$(printf "%s\n" "${s[@]}" | median)
      printf "%-36s P%-3s redis %10s  shale %10s  ratio %s\n" "$(echo "$t" | cut -c1-36)" "$p" "$rm" "$sm" \
        "$(awk -v a="$sm" -v b="$rm" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }')"
    done
  done
done
