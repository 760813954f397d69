"""``cpgym bench sim`` (alias: ``cpgym bench``): simulator speed — simulated requests per wall-second
(and per CPU-second of this process, robust to a shared machine), simulated time per
wall time and peak memory, per policy, measured side by side in one process. With
``--kv-tiers hbm,dram[,store]`` each policy runs with the tiers and without them, alternating
run by run, and both rows are reported.

``--format json``: ``{"workload", "load_time_s", "results": [row, ...]}``, one row per policy (and
KV-tier setting) with ``policy``, ``kv_tiers``, ``num_requests``, ``wall_time_s`` and
``requests_per_wall_s``, ``cpu_time_s`` and ``requests_per_cpu_s`` (``time.process_time`` of this
process over the runs alone, in-loop: the workload is built before; the median of the
``--repeat`` runs that follow the first run), ``sim_time_s``, ``sim_over_wall`` (simulated over
wall time), ``peak_traced_memory_mib`` (the Python heap's peak, ``tracemalloc``, on one more
untimed run after the others), ``num_workers``, and ``first_run_cpu_s`` /
``first_run_requests_per_cpu_s`` (the first run). A policy thus runs ``--repeat`` + 2 times.

The first run. A policy whose controller or initial composition reads the capacity table
(``vertumnus``, ``vertumnus-adaptive``, ...) simulates its profiles once per mix regime (paper §6:
capacity is profiled offline, per CP degree; ``envs.planning.capacity``). Like the loops that run
the simulator many times on one workload (tuning trials, a policy comparison), the runs of one
policy here share one :class:`~envs.planning.capacity.CapacityCache`: the first run fills it and
is timed on its own (``first_run_*``, profiling included); the ``--repeat`` runs after it reuse the
profiles (``requests_per_cpu_s``). For every policy the first run also carries the process's
one-off warm-up (first calls of the code), so it is somewhat slower even without a capacity
table, much slower on a workload of a few requests."""

from __future__ import annotations

import argparse

from baselines.registry import get_policy
from baselines.runner import run_policy
from envs.planning.capacity import CapacityCache
from envs.sim.options import split_name_list
from envs.sim.tier_config import TierConfig
from experiments.common import dumps_json, sim_config_from_args, workload_from_args
from experiments.flags.bench import add_arguments  # noqa: F401  (re-exported)


def run(args: argparse.Namespace) -> int:
    import statistics
    import time
    import tracemalloc
    from dataclasses import replace

    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {args.repeat}")
    if args.horizon_s is not None:  # the rates divide every request of the workload by the run's time
        raise ValueError("--horizon-s does not apply to cpgym bench sim: every run simulates all its requests "
                         "(shorten the workload with --arrival-window-s)")
    config = sim_config_from_args(args)
    t0 = time.perf_counter()
    workload = workload_from_args(args)
    load_s = time.perf_counter() - t0
    # With --kv-tiers, every policy also runs with tiers off, the two interleaved run by run so
    # that both see the same machine load (side by side in one invocation).
    variants = [("off", config)]
    if config.kv_tiers.enabled:
        variants = [("off", replace(config, kv_tiers=TierConfig())), ("on", config)]
    tiers_label = ",".join(config.kv_tiers.levels)
    rows = []

    for name in split_name_list(args.policy, "--policy"):
        spec = get_policy(name)
        walls: dict[str, list[float]] = {v: [] for v, _ in variants}
        cpus: dict[str, list[float]] = {v: [] for v, _ in variants}
        sims: dict[str, float] = {}
        caches = {label: CapacityCache() for label, _ in variants}  # profiles: module docstring
        first: dict[str, float] = {}
        for label, cfg in variants:
            c = time.process_time()
            run_policy(spec, workload, cfg, capacity_cache=caches[label])
            first[label] = time.process_time() - c
        for _ in range(max(1, args.repeat)):
            for label, cfg in variants:
                t, c = time.perf_counter(), time.process_time()
                res = run_policy(spec, workload, cfg, capacity_cache=caches[label])
                walls[label].append(time.perf_counter() - t)
                cpus[label].append(time.process_time() - c)  # robust to other processes sharing the cores
                sims[label] = res.sim_time_s
        for label, cfg in variants:
            tracemalloc.start()
            run_policy(spec, workload, cfg, capacity_cache=caches[label])
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            wall, cpu = statistics.median(walls[label]), statistics.median(cpus[label])
            rows.append({"policy": name, "kv_tiers": tiers_label if label == "on" else "hbm",
                         "num_requests": workload.num_requests, "wall_time_s": wall,
                         "requests_per_wall_s": workload.num_requests / wall, "cpu_time_s": cpu,
                         "requests_per_cpu_s": workload.num_requests / cpu, "sim_time_s": sims[label],
                         "sim_over_wall": sims[label] / wall, "peak_traced_memory_mib": peak / 2**20,
                         "num_workers": len(config.pool.placements()), "first_run_cpu_s": first[label],
                         "first_run_requests_per_cpu_s": workload.num_requests / first[label]})
    if args.format == "json":
        print(dumps_json({"workload": workload.name, "load_time_s": load_s, "results": rows}))
    else:
        print(f"workload {workload.name}: {workload.num_requests} requests (built in {load_s:.2f} s); "
              f"pool {config.pool.num_gpus} GPUs ({config.pool.composition}); median of {args.repeat} runs after a first run")
        print(f"{'policy':22s} {'KV tiers':>16s} {'wall s':>8s} {'req/wall-s':>10s} {'req/cpu-s':>10s} "
              f"{'1st-run req/cpu-s':>17s} {'sim/wall':>10s} {'peak MiB':>9s}")
        for r in rows:
            print(f"{r['policy']:22s} {r['kv_tiers']:>16s} {r['wall_time_s']:8.3f} {r['requests_per_wall_s']:10.0f} "
                  f"{r['requests_per_cpu_s']:10.0f} {r['first_run_requests_per_cpu_s']:17.0f} "
                  f"{r['sim_over_wall']:10.0f} {r['peak_traced_memory_mib']:9.1f}")
        print("req/cpu-s: median of the --repeat runs after the first run (capacity profiles, if the policy has "
              "any, reused); 1st-run req/cpu-s: the first run (profiling and warm-up included)")
    return 0
