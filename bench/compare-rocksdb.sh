#!/usr/bin/env bash
# Side-by-side benchmark: RocksDB's db_bench (Debian's rocksdb-tools) against Shale's db_bench,
# same machine, same key/value sizes, compression, cache and bloom settings, runs alternating.
# Prints a markdown table of medians (benchmark | RocksDB | Shale | ratio) and writes
# $OUT/compare.json and $OUT/compare.svg.
#
# Each engine's peak resident set (`time -f %M`, the kernel's maximum RSS of the process) is
# reported beside the times, and with `stats` among the benchmarks each engine's write
# amplification (bytes flushed and compacted per byte flushed).
#
#   bench/compare-rocksdb.sh                      # 1M entries, snappy, 3 runs each
#   NUM=200000 RUNS=5 COMPRESSION=zstd bench/compare-rocksdb.sh
#   SCALE=10M bench/compare-rocksdb.sh            # 10M entries, block cache 1/10 of the data
#   BENCHMARKS=fill_random,read_random_write_random,update_random,multi_read_random,read_while_writing \
#     BATCH_SIZE=8 THREADS=4 bench/compare-rocksdb.sh
#
# Environment: SCALE (1M | 10M | 100M: sets NUM, and CACHE_SIZE to ~1/10 of the raw data),
# NUM (1000000), RUNS (3), COMPRESSION (snappy|zstd|none), VALUE_SIZE (100), KEY_SIZE (16),
# CACHE_SIZE (8388608, db_bench's default), BLOOM_BITS (10), HASH_INDEX (1: both engines' data
# blocks carry a hash index for point lookups, `--use_data_block_hash_index`), CHARGE_TABLE_READER
# (1: both engines charge open tables' indexes and filters to the block cache, `--charge_table_reader`,
# Shale's default; 0: neither, RocksDB's default), CHARGE_MEMTABLES (1: both engines charge their
# memtables to the block cache too, `--cost_write_buffer_to_cache`, so the peak RSS compared does
# not hang on how full each engine's last memtable happens to be; 0: neither, both defaults), THREADS (1; readers of
# read_while_writing and threads of every other benchmark), BATCH_SIZE (1, keys per multi_get),
# READ_WRITE_PERCENT (90), WRITE_RATE_LIMIT (0: none, bytes/s), READS (--reads: reads per
# thread, default --num), PREFILL (benchmarks run first on one thread and not reported, e.g.
# fill_random; the measured ones then use the existing database), BENCHMARKS
# (fill_seq,fill_random,overwrite,read_random,read_seq), FEATURES (jemalloc), OUT
# (bench-results), DB_ROOT (a temporary directory), CARGO_TARGET_DIR (where cargo builds).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${SCALE:-}" in
  "") ;;
  1M) NUM=${NUM:-1000000} ;;
  10M) NUM=${NUM:-10000000} ;;
  100M) NUM=${NUM:-100000000} ;;
  *) echo "SCALE must be 1M, 10M or 100M (got '$SCALE')" >&2; exit 2 ;;
esac
NUM=${NUM:-1000000}
RUNS=${RUNS:-3}
COMPRESSION=${COMPRESSION:-snappy}
VALUE_SIZE=${VALUE_SIZE:-100}
KEY_SIZE=${KEY_SIZE:-16}
if [ -n "${SCALE:-}" ]; then
  CACHE_SIZE=${CACHE_SIZE:-$(( NUM * (${KEY_SIZE:-16} + ${VALUE_SIZE:-100}) / 10 ))}
fi
CACHE_SIZE=${CACHE_SIZE:-8388608}
BLOOM_BITS=${BLOOM_BITS:-10}
HASH_INDEX=${HASH_INDEX:-1}
CHARGE_TABLE_READER=${CHARGE_TABLE_READER:-1}
CHARGE_MEMTABLES=${CHARGE_MEMTABLES:-1}
THREADS=${THREADS:-1}
BATCH_SIZE=${BATCH_SIZE:-1}
READ_WRITE_PERCENT=${READ_WRITE_PERCENT:-90}
WRITE_RATE_LIMIT=${WRITE_RATE_LIMIT:-0}
READS=${READS:-}
PREFILL=${PREFILL:-}
BENCHMARKS=${BENCHMARKS:-fill_seq,fill_random,overwrite,read_random,read_seq}
FEATURES=${FEATURES:-jemalloc}
OUT=${OUT:-bench-results}
DB_ROOT=${DB_ROOT:-$(mktemp -d)}

ROCKS=/usr/bin/db_bench
if [ ! -x "$ROCKS" ]; then
  echo "installing Debian's rocksdb-tools for RocksDB's db_bench" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq rocksdb-tools >&2
  else sudo apt-get update -qq && sudo apt-get install -y -qq rocksdb-tools >&2; fi
fi
if [ ! -x /usr/bin/time ]; then
  echo "installing GNU time to measure peak memory" >&2
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq time >&2; else sudo apt-get install -y -qq time >&2; fi
fi
command -v python3 >/dev/null || { echo "python3 is needed to parse the results" >&2; exit 1; }

echo "building Shale's db_bench (features: $FEATURES)" >&2
cargo build --release -q -p bench --features "$FEATURES"
SHALE=${CARGO_TARGET_DIR:-$(pwd)/target}/release/db_bench
[ -x "$SHALE" ] || { echo "no db_bench binary at $SHALE after the build" >&2; exit 1; }
mkdir -p "$OUT"

# Our names -> db_bench's names.
# (Longer names first: read_random is part of three others.)
to_rocks() {
  echo "$1" | sed \
    -e 's/read_random_write_random/readrandomwriterandom/g; s/update_random/updaterandom/g; s/multi_read_random/multireadrandom/g' \
    -e 's/fill_seq/fillseq/g; s/fill_random_sync/fillsync/g; s/fill_random/fillrandom/g' \
    -e 's/read_random/readrandom/g; s/read_seq/readseq/g; s/read_reverse/readreverse/g; s/read_missing/readmissing/g' \
    -e 's/seek_random/seekrandom/g; s/delete_random/deleterandom/g; s/read_while_writing/readwhilewriting/g' \
    -e 's/wait_for_compaction/waitforcompaction/g'
}
common=(--num="$NUM" --key_size="$KEY_SIZE" --value_size="$VALUE_SIZE" --compression_ratio=0.5
        --cache_size="$CACHE_SIZE" --bloom_bits="$BLOOM_BITS" --write_buffer_size=67108864
        --use_data_block_hash_index="$HASH_INDEX" --charge_table_reader="$CHARGE_TABLE_READER" --cost_write_buffer_to_cache="$CHARGE_MEMTABLES"
        --batch_size="$BATCH_SIZE" --readwritepercent="$READ_WRITE_PERCENT"
        --benchmark_write_rate_limit="$WRITE_RATE_LIMIT")
if [ -n "$READS" ]; then common+=(--reads="$READS"); fi

# Runs one engine under `time` (label, run, what), its peak RSS (KiB) in
# $OUT/<label>-run<n>[.<what>].rss; a failed run stops the comparison with the tail of its output.
timed() {
  local label=$1 run=$2 what=$3; shift 3
  local base="$OUT/$label-run$run$what"
  if ! /usr/bin/time -f '%M' -o "$base.rss" "$@" > "$base.txt" 2>&1; then
    echo "$label run $run$what failed:" >&2; tail -n 20 "$base.txt" >&2; exit 1
  fi
}

# One engine's run: the PREFILL benchmarks on one thread (not reported), then the measured ones
# on THREADS threads over what the prefill left.
run_engine() {
  local label=$1 run=$2 dir=$3; shift 3   # then: the command up to its flags
  local existing=()
  rm -rf "$dir"
  if [ -n "$PREFILL" ]; then
    local names=$PREFILL; [ "$label" = rocksdb ] && names=$(to_rocks "$PREFILL")
    timed "$label" "$run" .prefill "$@" --benchmarks="$names" --threads=1
    existing=(--use_existing_db=1)
  fi
  local names=$BENCHMARKS; [ "$label" = rocksdb ] && names=$(to_rocks "$BENCHMARKS")
  local json=(); [ "$label" = shale ] && json=(--json="$OUT/shale-run$run.json")
  timed "$label" "$run" "" "$@" --benchmarks="$names" --threads="$THREADS" "${existing[@]}" "${json[@]}"
}
run_rocks() { run_engine rocksdb "$1" "$DB_ROOT/rocks" "$ROCKS" --db="$DB_ROOT/rocks" --compression_type="$COMPRESSION" "${common[@]}"; }
run_shale() { run_engine shale "$1" "$DB_ROOT/shale" "$SHALE" --db="$DB_ROOT/shale" --compression="$COMPRESSION" "${common[@]}"; }

for run in $(seq 1 "$RUNS"); do
  # Alternate which engine goes first, so neither always gets the cooler machine.
  if [ $((run % 2)) = 1 ]; then
    echo "run $run/$RUNS: RocksDB, then Shale" >&2; run_rocks "$run"; run_shale "$run"
  else
    echo "run $run/$RUNS: Shale, then RocksDB" >&2; run_shale "$run"; run_rocks "$run"
  fi
done
rm -rf "$DB_ROOT/rocks" "$DB_ROOT/shale"

python3 - "$OUT" "$RUNS" "$BENCHMARKS" "$NUM" "$COMPRESSION" "$CACHE_SIZE" <<'PY'
import json, re, statistics, sys
out, runs, benches, num, compression, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4], sys.argv[5], int(sys.argv[6])
to_rocks = {"fill_seq": "fillseq", "fill_random": "fillrandom", "fill_random_sync": "fillsync",
            "read_random": "readrandom", "read_seq": "readseq", "read_reverse": "readreverse",
            "read_missing": "readmissing", "seek_random": "seekrandom", "delete_random": "deleterandom",
            "read_while_writing": "readwhilewriting", "read_random_write_random": "readrandomwriterandom",
            "update_random": "updaterandom", "multi_read_random": "multireadrandom",
            "wait_for_compaction": "waitforcompaction"}
line = re.compile(r"^(\w+)\s*:\s*([0-9.]+) micros/op")
def parse(path):
    seen = {}
    with open(path) as f:
        for l in f:
            m = line.match(l.strip())
            if m:
                # A benchmark listed twice keeps each occurrence apart.
                name = m.group(1); k = 0
                while (name, k) in seen: k += 1
                seen[(name, k)] = float(m.group(2))
    return seen
rows = []
for i, b in enumerate(benches):
    if b == "stats":
        continue  # prints the engine's statistics, not a timing
    occurrence = benches[:i].count(b)
    r = [parse(f"{out}/rocksdb-run{n}.txt").get((to_rocks.get(b, b), occurrence)) for n in range(1, runs + 1)]
    s = [parse(f"{out}/shale-run{n}.txt").get((b, occurrence)) for n in range(1, runs + 1)]
    r = [x for x in r if x is not None]; s = [x for x in s if x is not None]
    if not r or not s:
        print(f"warning: no result for {b} (rocksdb {len(r)}, shale {len(s)} runs)", file=sys.stderr); continue
    rm, sm = statistics.median(r), statistics.median(s)
    rows.append({"name": b, "rocksdb_micros_per_op": rm, "shale_micros_per_op": sm,
                 "ratio": rm / sm if sm else 0.0, "rocksdb_runs": r, "shale_runs": s})
def peak_mb(engine):
    kib = []
    for n in range(1, runs + 1):
        peaks = []
        for part in ("", ".prefill"):
            try:
                peaks.append(int(open(f"{out}/{engine}-run{n}{part}.rss").read().split()[-1]))
            except (OSError, ValueError, IndexError):
                pass
        if peaks:
            kib.append(max(peaks))
    return statistics.median(kib) / 1024 if kib else None
memory = {"rocksdb_peak_rss_mb": peak_mb("rocksdb"), "shale_peak_rss_mb": peak_mb("shale")}
def write_amp(engine):
    """Bytes flushed and compacted per byte flushed, from the run's `stats` (median of runs):
    RocksDB's "Cumulative compaction: X GB write" (flushes included) over "Flush(GB):
    cumulative Y", Shale's "Write amplification" line (the same ratio)."""
    amps = []
    for n in range(1, runs + 1):
        try:
            text = open(f"{out}/{engine}-run{n}.txt").read()
        except OSError:
            continue
        if engine == "rocksdb":
            w = re.findall(r"Cumulative compaction: ([0-9.]+) GB write", text)
            f = re.findall(r"Flush\(GB\): cumulative ([0-9.]+)", text)
            if w and f and float(f[-1]) > 0:
                amps.append(float(w[-1]) / float(f[-1]))
        else:
            a = re.findall(r"Write amplification: ([0-9.]+)", text)
            if a:
                amps.append(float(a[-1]))
    return statistics.median(amps) if amps else None
write_amplification = {"rocksdb": write_amp("rocksdb"), "shale": write_amp("shale")}
with open(f"{out}/compare.json", "w") as f:
    json.dump({"num": int(num), "runs": runs, "compression": compression, "cache_size": cache,
               "benchmarks": rows, "memory": memory, "write_amplification": write_amplification}, f, indent=2)
print(f"\nMedian of {runs} alternating runs, {num} entries, {compression}, block cache {cache / 1048576:.0f} MB; micros/op (lower is better), ratio = RocksDB / Shale (> 1: Shale faster)\n")
print("| benchmark | RocksDB µs/op | Shale µs/op | ratio |")
print("|---|---:|---:|---:|")
for r in rows:
    print(f"| {r['name']} | {r['rocksdb_micros_per_op']:.3f} | {r['shale_micros_per_op']:.3f} | {r['ratio']:.2f}x |")
rp, sp = memory["rocksdb_peak_rss_mb"], memory["shale_peak_rss_mb"]
if rp and sp:
    print(f"| peak RSS (MB, whole run) | {rp:.0f} | {sp:.0f} | {rp / sp:.2f}x |")
wr, ws = write_amplification["rocksdb"], write_amplification["shale"]
if wr and ws:
    print(f"| write amplification (bytes flushed and compacted / bytes flushed) | {wr:.2f} | {ws:.2f} | |")
PY
"$SHALE" report "$OUT/compare.json" --svg "$OUT/compare.svg" >&2
echo "wrote $OUT/compare.json and $OUT/compare.svg" >&2
