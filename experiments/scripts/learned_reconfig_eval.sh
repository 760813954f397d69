#!/bin/bash
# The held-out evaluation of shipped-reconfig (policies/checkpoints/reconfig_target) on matched-phases
# seeds 1000-1009: the heuristic controller, no reconfiguration (initial cp4x6,cp2x8), cp1x40, every
# other composition of the 40-GPU pool over CP degrees {2, 4, 8} (the checkpoint's target menu), and
# the joint two-timescale pair (the shipped routing checkpoint as the controller's inner router).
set -e
cd "$(dirname "$0")/../.."
FIXED=$(python -c "
from envs.sim import SimConfig
from envs.reconfig_env import target_menu
print(','.join('fixed:' + c.replace(',', '+') for c in target_menu(SimConfig().pool, (2, 4, 8)) if c != 'cp4x6,cp2x8'))")
python -m experiments.cli evaluate --kind reconfig --policy shipped-reconfig --workload matched-phases \
  --seeds 1000,1001,1002,1003,1004,1005,1006,1007,1008,1009 \
  --against vertumnus-adaptive,vertumnus-router,joint:shipped,fixed:cp1x40,$FIXED \
  --out results/learned-reconfig/eval_seeds_1000_1009.csv --format json > results/learned-reconfig/eval_seeds_1000_1009.json
