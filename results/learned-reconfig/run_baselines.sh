#!/bin/bash
# Baseline rows of the learned-reconfiguration evaluation, one CSV per held-out seed (incremental):
# the heuristic controller, no reconfiguration (the initial cp4x6,cp2x8), cp1x40 and every other
# composition of the 40-GPU pool over CP degrees {2, 4, 8} (the target menu of shipped-reconfig).
set -e
cd "$(dirname "$0")/../.."
FIXED=$(python -c "
from envs.sim import SimConfig
from envs.reconfig_env import target_menu
print(','.join('fixed:' + c.replace(',', '+') for c in target_menu(SimConfig().pool, (2, 4, 8)) if c != 'cp4x6,cp2x8'))")
for s in ${SEEDS:-1000 1001 1002 1003 1004 1005 1006 1007 1008 1009}; do
  out=results/learned-reconfig/baselines_seed$s.csv
  [ -f "$out" ] && continue
  python -m experiments.cli evaluate --kind reconfig --policy none --workload matched-phases --seeds $s \
    --against vertumnus-adaptive,vertumnus-router,fixed:cp1x40,$FIXED --out "$out.tmp" --quiet > /dev/null
  mv "$out.tmp" "$out"
  mv "$out.tmp.provenance.json" "$out.provenance.json"
done
