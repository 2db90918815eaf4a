#!/usr/bin/env bash
# redis-benchmark's whole default test set (PING … SPOP, ZPOPMIN, LRANGE_*, MSET) against
# shale-server and against redis-server with the same durability (AOF, fsync every second),
# alternating, medians of 3 runs, P1 and P16: one table with the ratio per test.
#
#   bench/redis-benchmark-suite.sh
#   RUNS=5 PIPELINES=1 bench/redis-benchmark-suite.sh
#
# Any variable of bench/compare-redis.sh can be set; these are the defaults here.
set -euo pipefail
cd "$(dirname "$0")"
export TESTS=${TESTS:-all} REQUESTS=${REQUESTS:-100000} KEYSPACE=${KEYSPACE:-100000} CLIENTS=${CLIENTS:-50}
export REDIS_ARGS=${REDIS_ARGS:---save "" --appendonly yes --appendfsync everysec}
exec ./compare-redis.sh
