#!/usr/bin/env bash
# Industry routers at loads relative to measured capacity, and the llm-d / dynamo-kv upstream fixes
# measured side by side (results/end-to-end/industry-routers/README.md).
#
# Run from the repository root with the project's venv active. ~25 min on 2 busy cores.
#   OUT     output folder (default results/end-to-end/industry-routers)
#   BEFORE  commit before the llm-d / dynamo-kv fixes (default 87d238e); exported with `git archive`
#           and run from the export, so the "before" numbers come from that commit's code.
set -euo pipefail
OUT=${OUT:-results/end-to-end/industry-routers}
BEFORE=${BEFORE:-87d238e}
SUITE=llm-d,dynamo-kv,sglang-cache-aware,mooncake-ttft,vertumnus-router,homogeneous-cp2,homogeneous-cp4
COMMON="--window-s 0 300 --seeds 0,1,2 --jobs 2"
CAP="$OUT/capacity-cache"
src_of() {  # workload flags of a folder name
  if [ "$1" = conversation ]; then echo "--trace ../shared/data/traces/conversation_trace.jsonl"; else echo "--workload $1"; fi
}
mkdir -p "$OUT"
for w in conversation tool-agent leval-like; do
  mkdir -p "$OUT/$w"
  # 1. every policy at 0.5 / 0.85 / 0.95 of the strongest static pool's capacity, each policy's own
  #    capacity measured and rates above it labelled "overloaded"
  cpgym compare $(src_of $w) $COMMON --loads 0.5,0.85,0.95 --label-overload --cache-dir "$CAP" --suite "$SUITE" \
      --out "$OUT/$w" > "$OUT/$w/compare_stdout.txt" 2> "$OUT/$w/compare_stderr.txt" || { cat "$OUT/$w/compare_stderr.txt"; exit 1; }
  cpgym capacity $(src_of $w) --window-s 0 300 --cache-dir "$CAP" --policy "$SUITE" --format json --quiet \
      > "$OUT/$w/capacities.json"
done
# 2. llm-d and dynamo-kv before (commit $BEFORE) and after the upstream fixes, at the same rates
SRC=$(mktemp -d)
git archive "$BEFORE" | tar -x -C "$SRC"
ROOT=$(pwd)
for w in conversation tool-agent leval-like; do
  rates=$(python -c "import pandas as pd; print(','.join(repr(float(r)) for r in sorted(pd.read_csv('$OUT/$w/summary.csv').rate_rps.unique())))")
  for side in before after; do
    dir=$ROOT; [ $side = before ] && dir=$SRC
    (cd "$dir" && PYTHONPATH="$dir" python -m experiments.cli compare $(src_of $w | sed "s#\.\./shared#$ROOT/../shared#") $COMMON \
        --rates "$rates" --suite llm-d,dynamo-kv --out "$ROOT/$OUT/upstream-fixes/$side/$w" > /dev/null)
  done
done
rm -rf "$SRC" "$CAP"
python -m experiments.scripts.before_after_table "$OUT/upstream-fixes/before" "$OUT/upstream-fixes/after" \
    "$OUT/upstream-fixes/before_after.csv"
# the compare folders' parquet copies repeat results.csv
find "$OUT" -name "*.parquet" -delete
