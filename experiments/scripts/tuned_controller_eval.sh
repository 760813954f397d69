#!/bin/bash
# The heuristic split/merge controller tuned on matched-phases training seeds 0-9 (four rounds of a
# coordinate search) and evaluated on the held-out seeds 1000-1009 of shipped-reconfig's evaluation
# (learned_reconfig_eval.sh). First the four sweeps (6 + 4 + 2 + 12 settings x 10 seeds; ~1 h, ~30 min,
# ~10 min and ~50 min on the shared 2-core machine; resumable):
#   cpgym sweep experiments/specs/controller-matched-phases-tuning.yaml --jobs 2 --wandb disabled \
#       --out runs/sweeps/controller-matched-phases-tuning
#   cpgym sweep experiments/specs/controller-matched-phases-tuning-2.yaml --jobs 2 --wandb disabled \
#       --out runs/sweeps/controller-matched-phases-tuning-2
#   cpgym sweep experiments/specs/controller-matched-phases-tuning-3.yaml --jobs 2 --wandb disabled \
#       --out runs/sweeps/controller-matched-phases-tuning-3
#   cpgym sweep experiments/specs/controller-matched-phases-tuning-4.yaml --jobs 2 --wandb disabled \
#       --out runs/sweeps/controller-matched-phases-tuning-4
# then this script: the selection (lowest mean TTFT over the training seeds; round 1 alone, rounds 1-2
# and 1-3 pooled, and all four rounds pooled = the tuned setting), held-out runs of the selected setting, and its rows appended to
# eval_seeds_1000_1009.csv for paired deltas.
set -e
cd "$(dirname "$0")/../.."
S1=${1:-runs/sweeps/controller-matched-phases-tuning}
S2=${2:-runs/sweeps/controller-matched-phases-tuning-2}
S3=${3:-runs/sweeps/controller-matched-phases-tuning-3}
S4=${4:-runs/sweeps/controller-matched-phases-tuning-4}
R=results/learned-reconfig/tuned-controller
mkdir -p $R
python -m experiments.tune_controller "$S1" --out $R/round1.json > $R/round1.txt
python -m experiments.tune_controller "$S1" "$S2" --out $R/rounds1-2.json > $R/rounds1-2.txt
python -m experiments.tune_controller "$S1" "$S2" "$S3" --out $R/rounds1-3.json > $R/rounds1-3.txt
python -m experiments.tune_controller "$S1" "$S2" "$S3" "$S4" --out $R/tuned-controller-matched-phases.json > $R/rounds1-4.txt
# context on the same training seeds: no reconfiguration and the two best single compositions of the held-out table
python -m experiments.cli evaluate --kind reconfig --policy none --workload matched-phases --seeds 0,1,2,3,4,5,6,7,8,9 \
  --against vertumnus-router,fixed:cp4x9+cp2x2,fixed:cp4x10 --out $R/train_seeds_0_9_no_reconfiguration.csv \
  --format json --quiet > $R/train_seeds_0_9_no_reconfiguration.json
python -m experiments.cli evaluate --kind reconfig --policy none --workload matched-phases \
  --seeds 1000,1001,1002,1003,1004,1005,1006,1007,1008,1009 \
  --against vertumnus-adaptive-tuned --tuned $R/tuned-controller-matched-phases.json \
  --out $R/eval_seeds_1000_1009.csv --format json --quiet > /dev/null
python - <<'PY'
import pandas as pd
R = "results/learned-reconfig"
both = pd.concat([pd.read_csv(f"{R}/eval_seeds_1000_1009.csv"), pd.read_csv(f"{R}/tuned-controller/eval_seeds_1000_1009.csv")])
both.to_csv(f"{R}/tuned-controller/eval_seeds_1000_1009_with_shipped.csv", index=False)
PY
for ref in vertumnus-adaptive-tuned best-fixed-in-hindsight; do
  python -m experiments.cli evaluate --from-csv $R/eval_seeds_1000_1009_with_shipped.csv --reference $ref --format json \
    > $R/table_vs_$ref.json
done
