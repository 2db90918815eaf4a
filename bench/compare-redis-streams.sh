#!/bin/bash
# Streams side by side: redis-server (AOF, appendfsync everysec) and shale-server (same
# durability) on this machine, with bench's stream_bench client (50 clients):
#  - XADD to one stream, and one consumer group taking every entry (XREADGROUP COUNT 1 + XACK),
#    at -P 1 and -P 16: medians of 3 alternating runs, as ratios;
#  - then XRANGE over a stream of SCAN_ENTRIES (10 M) entries, read in pages of 1,000, with
#    shale-server's block cache at 32 MB (a fraction of the stream), entries/s.
# Usage: bench/compare-redis-streams.sh  (N=entries per run, 200000; PIPELINES="1 16";
#        SCAN_ENTRIES=0 skips the scan)
set -u
tmp=$(mktemp -d)
. "$(dirname "$0")/servers.sh"
cargo build --release -q -p bench --bin stream_bench
BENCH=${CARGO_TARGET_DIR:-$(pwd)/target}/release/stream_bench
RS=7821; SH=7822
stop() { redis-cli -p $RS shutdown nosave >/dev/null 2>&1; redis-cli -p $SH shutdown nosave >/dev/null 2>&1; sleep 0.5; }
trap 'stop; rm -rf "$tmp"' EXIT
start() { # extra shale-server arguments...
  rm -rf "$tmp/redis" "$tmp/shale"; mkdir -p "$tmp/redis"
  redis-server --port $RS --dir "$tmp/redis" --appendonly yes --appendfsync everysec --save '' --daemonize yes >/dev/null
  "$SHALE" --port $SH --dir "$tmp/shale" --appendfsync everysec "$@" >"$tmp/shale.log" 2>&1 &
  for port in $RS $SH; do
    for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
}
# phase rate of one run: port pipeline phase-list entries -> "xadd=… group=… xrange=…"
run() {
  "$BENCH" --port "$1" --pipeline "$2" --phases "$3" --entries "$4" | awk '{printf "%s=%s ", $2, $8}'
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "stream_bench failed against port $1" >&2; exit 1; }
}
pick() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
median() { sort -n | sed -n 2p; }
start
for p in ${PIPELINES:-1 16}; do
  r=(); s=()
  for _ in 1 2 3; do
    r+=("$(run $RS "$p" xadd,group "${N:-200000}")")
    s+=("$(run $SH "$p" xadd,group "${N:-200000}")")
  done
  for phase in xadd group; do
    rm=$(printf "%s\n" "${r[@]}" | pick $phase | median); sm=$(printf "%s\n" "${s[@]}" | pick $phase | median)
    printf "%-28s P%-3s redis %10s  shale %10s  ratio %s\n" "$phase (per s)" "$p" "$rm" "$sm" \
      "$(awk -v a="$sm" -v b="$rm" 'BEGIN{printf "%.2f", a/b}')"
  done
done
stop
scan=${SCAN_ENTRIES:-10000000}
if [ "$scan" -gt 0 ]; then
  start --block-cache-size 32mb
  for port in $RS $SH; do run $port 16 xadd "$scan" >/dev/null; done
  rr=$(run $RS 1 xrange "$scan" | pick xrange); sr=$(run $SH 1 xrange "$scan" | pick xrange)
  printf "%-28s      redis %10s  shale %10s  ratio %s  (shale: %s on disk)\n" "xrange $scan entries (per s)" \
    "$rr" "$sr" "$(awk -v a="$sr" -v b="$rr" 'BEGIN{printf "%.2f", a/b}')" "$(du -sh "$tmp/shale" | cut -f1)"
fi
