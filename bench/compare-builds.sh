#!/usr/bin/env bash
# Two builds of Shale's db_bench at the same moment, one on each core: for engine changes whose
# effect (5-15 %) is smaller than what a shared machine does to one run after another. Both runs
# of a round meet the same neighbours, frequency and memory traffic; the builds swap cores every
# round. Prints each benchmark's median micros/op for OLD and NEW and NEW/OLD.
#
#   bench/compare-builds.sh OLD NEW [db_bench flags…]
#   bench/compare-builds.sh HEAD~1 HEAD
#   RUNS=10 bench/compare-builds.sh /tmp/db_bench_before target/release/db_bench \
#     --benchmarks=fillrandom,readrandom --value_size=16 --num=300000 --reads=1500000
#
# OLD and NEW are each a db_bench binary or a git revision (built from `git archive` into a
# temporary directory with its own target, about a minute and a half each). The flags default to
# `--benchmarks=fillrandom,readrandom,readmissing --num=300000 --reads=1500000`; each run gets
# its own `--db`. Environment: RUNS (rounds, 6). Needs two cores, taskset (util-linux), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: bench/compare-builds.sh OLD NEW [db_bench flags…]   (OLD, NEW: a db_bench binary or a git revision)" >&2
  exit 2
fi
RUNS=${RUNS:-6}
old=$1 new=$2
shift 2
FLAGS=("$@")
[ ${#FLAGS[@]} -gt 0 ] || FLAGS=(--benchmarks=fillrandom,readrandom,readmissing --num=300000 --reads=1500000)
[ "$(nproc)" -ge 2 ] || { echo "needs two cores, one for each build" >&2; exit 2; }
command -v taskset >/dev/null || { echo "needs taskset (util-linux)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A db_bench binary for $1: the file itself, or revision $1 built in $tmp (as build $2).
binary() {
  if [ -f "$1" ] && [ -x "$1" ]; then
    echo "$1"
    return
  fi
  git rev-parse --verify -q "$1^{commit}" >/dev/null || { echo "neither a db_bench binary nor a git revision: $1" >&2; exit 2; }
  mkdir -p "$tmp/src-$2"
  git archive "$1" | tar -x -C "$tmp/src-$2"
  echo "building db_bench at $1 ($(git rev-parse --short "$1"))" >&2
  (cd "$tmp/src-$2" && CARGO_TARGET_DIR="$tmp/target-$2" cargo build --release -q -p bench --bin db_bench) >&2
  echo "$tmp/target-$2/release/db_bench"
}
A=$(binary "$old" old)
B=$(binary "$new" new)

for i in $(seq "$RUNS"); do
  ca=$((i % 2)) cb=$(((i + 1) % 2))
  taskset -c $ca "$A" "${FLAGS[@]}" --db="$tmp/db-old" >"$tmp/old.$i" 2>&1 &
  pa=$!
  taskset -c $cb "$B" "${FLAGS[@]}" --db="$tmp/db-new" >"$tmp/new.$i" 2>&1 &
  pb=$!
  for p in "$pa:old" "$pb:new"; do
    wait "${p%%:*}" || { echo "the ${p#*:} build failed in round $i:" >&2; cat "$tmp/${p#*:}.$i" >&2; exit 1; }
  done
  echo "round $i of $RUNS done" >&2
done

python3 - "$tmp" "$RUNS" "$old" "$new" <<'PY'
import re, statistics, sys
tmp, runs, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
line = re.compile(r"^(\w+)\s*:\s*([\d.]+) micros/op")
def results(build):
    # benchmark (numbered when a run repeats it) -> micros/op of each round
    out = {}
    for i in range(1, runs + 1):
        seen = {}
        for l in open(f"{tmp}/{build}.{i}"):
            m = line.match(l)
            if m:
                name = m.group(1)
                seen[name] = seen.get(name, 0) + 1
                key = name if seen[name] == 1 else f"{name} ({seen[name]})"
                out.setdefault(key, []).append(float(m.group(2)))
    return out
a, b = results("old"), results("new")
if not a or set(a) != set(b):
    sys.exit("the two builds reported different benchmarks: %s / %s" % (sorted(a), sorted(b)))
print(f"| benchmark | {old} µs/op | {new} µs/op | new/old |")
print("|---|---:|---:|---:|")
for k in a:
    ma, mb = statistics.median(a[k]), statistics.median(b[k])
    print(f"| {k} | {ma:.3f} | {mb:.3f} | {mb / ma:.2f} |")
print(f"\nmedians of {runs} rounds, the two builds running at once on separate cores")
PY
