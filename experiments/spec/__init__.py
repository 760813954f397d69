"""Experiment spec files (YAML or TOML), validated into frozen dataclasses before anything runs.

A spec fully determines a set of runs ("cells"): workload, pool and simulator settings,
calibration, policies, seeds, horizon and the sweep axes. Example (YAML)::

    name: rates-demo                    # sweep name: output folder and wandb group
    description: least-work vs prefix-affinity over rates
    workload:
      name: mixed-default               # named synthetic workload (envs.workloads.WORKLOADS) ...
      # trace: "@traces/conversation_trace.jsonl"   # ... or a trace file ("@traces/" = shared traces dir,
      #                                             #     other relative paths are relative to this file)
      seed: 0                           # generator / arrival-spreading seed
      params: {duration_s: 120}         # keyword overrides of the named workload
      arrival_window_s: [0, 300]        # keep arrivals in [start, end) s (after rate scaling)
    sim:                                # any SimConfig field, nested or dotted
      pool.composition: cp4x6,cp2x8
      slo: {slo_scale: 3.0}
    calibration: null                   # calibration JSON (default: the shipped one)
    horizon_s: null                     # stop time [s]; unfinished requests are SLO misses
    policies: [least-work, prefix-affinity]
    seeds: [0, 1, 2]                    # run seeds (SimConfig.seed)
    seed_workload: true                 # default: workload seed = workload.seed + run seed
    rates: [10, 20, 30]                 # shorthand for the grid axis workload.target_rps [requests/s]
    sweep:
      grid:                             # cartesian axes: dotted path -> non-empty list of values
        cache_capacity_scale: [0.5, 1.0]
      cells:                            # listed sweep: each entry one set of overrides
        - {slo.slo_scale: 2.0}
        - {slo.slo_scale: 4.0, policy: least-work}

Cells = listed cells x grid x policies x seeds (a listed cell with ``policy`` fixes the policy).
With ``seed_workload: true`` (the default) each run seed also re-draws the workload (generator
seed ``workload.seed + seed``; for traces: the spreading of quantised timestamps), so that the 95%
confidence intervals over seeds of ``cpgym report`` cover workload sampling, not only execution
noise; ``false`` replays one workload under every seed.
Dotted paths address:

* ``workload.<field>`` (``name``, ``trace``, ``seed``, ``target_rps``, ``rate_scale``,
  ``arrival_window_s`` (earlier ``window_s``, deprecated), ``skip_invalid``) and
  ``workload.params.<name>`` (named-workload overrides);
* any leaf of :class:`envs.sim.SimConfig` (``pool.composition``, ``slo.slo_scale``,
  ``prediction_error.bias``, ``cache_capacity_scale``, ``engine.max_batch_tokens``,
  ``links.inter_node_bytes_per_s``, ``horizon_s``, ``calibration_path``; not ``seed``, use ``seeds``);
* ``<policy>.<param>`` for a policy parameter, when the policy registry declares parameters
  (``PolicySpec.params``, a mapping of name -> default); otherwise sweep over policy names.

Every error is a :class:`SpecError` naming the file, the key and the expected form, raised by
:func:`load_spec` before any cell runs.

The package is split along its concerns: :mod:`~experiments.spec.model` (the frozen dataclasses),
:mod:`~experiments.spec.paths` (typed dotted paths into config dataclasses),
:mod:`~experiments.spec.loader` (reading and validating a file) and :mod:`~experiments.spec.cells`
(expanding a spec into cells and their keys). Every public name is re-exported here.
"""


from experiments.spec.cells import cell_key, resolve_cells
from experiments.spec.loader import SWEEP_KEYS, TOP_LEVEL_KEYS, WORKLOAD_KEYS, load_spec
from experiments.spec.model import SPEC_VERSION, TRACES_PREFIX, Cell, ExperimentSpec, SpecError, WorkloadSpec
from experiments.spec.paths import ALIASES, SIM_PATHS, WORKLOAD_PATHS

__all__ = ["SpecError", "WorkloadSpec", "Cell", "ExperimentSpec", "load_spec", "cell_key", "SIM_PATHS", "WORKLOAD_PATHS",
           "SPEC_VERSION", "TRACES_PREFIX", "TOP_LEVEL_KEYS", "SWEEP_KEYS", "WORKLOAD_KEYS", "ALIASES", "resolve_cells"]
