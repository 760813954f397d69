#!/bin/bash
# The held-out evaluation of shipped-reconfig (policies/checkpoints/reconfig_target) on matched-phases:
# the heuristic controller, no reconfiguration (the checkpoint's training composition, where every controller
# starts), cp1x40, every other composition of
# the 40-GPU pool over CP degrees {2, 4, 8} (the checkpoint's target menu), and the joint two-timescale
# pair (the shipped routing checkpoint as the controller's inner router).
#
#   learned_reconfig_eval.sh                       # the first test set, seeds 1000-1009 (README table)
#   learned_reconfig_eval.sh SEEDS OUT [with-tuned]
#     SEEDS  comma-separated workload seeds; OUT the CSV (the JSON table goes next to it, .json);
#     with-tuned also runs vertumnus-adaptive-tuned (results/learned-reconfig/tuned-controller/).
#   e.g. the second test set (results/learned-reconfig/held-out-seeds-1010-1019/):
#   learned_reconfig_eval.sh 1010,1011,1012,1013,1014,1015,1016,1017,1018,1019 \
#       results/learned-reconfig/held-out-seeds-1010-1019/eval_seeds_1010_1019.csv with-tuned
set -e
cd "$(dirname "$0")/../.."
SEEDS=${1:-1000,1001,1002,1003,1004,1005,1006,1007,1008,1009}
OUT=${2:-results/learned-reconfig/eval_seeds_1000_1009.csv}
TUNED=()
AGAINST=vertumnus-adaptive
if [ "${3:-}" = with-tuned ]; then
  AGAINST=vertumnus-adaptive,vertumnus-adaptive-tuned
  TUNED=(--tuned results/learned-reconfig/tuned-controller/tuned-controller-matched-phases.json)
elif [ -n "${3:-}" ]; then
  echo "learned_reconfig_eval.sh: the third argument must be 'with-tuned', got '$3'" >&2; exit 2
fi
# every composition of the menu but the one the episodes start from (the checkpoint's training composition,
# which vertumnus-router runs)
FIXED=$(python -c "
from envs.sim import SimConfig
from envs.reconfig_env import target_menu
from policies.reconfig.evaluate import checkpoint_pool_composition
start = checkpoint_pool_composition('shipped-reconfig') or SimConfig().pool.composition
print(','.join('fixed:' + c.replace(',', '+') for c in target_menu(SimConfig().pool, (2, 4, 8)) if c != start))")
python -m experiments.cli evaluate --kind reconfig --policy shipped-reconfig --workload matched-phases \
  --seeds "$SEEDS" \
  --against $AGAINST,vertumnus-router,joint:shipped,fixed:cp1x40,$FIXED "${TUNED[@]}" \
  --out "$OUT" --format json > "${OUT%.csv}.json"
