"""Evaluation of learned and heuristic routing policies on held-out episode windows and seeds.

Every (policy, window, seed) is one episode. Heuristics run through
``baselines.runner.run_policy`` (equal to running them through the environment, tested);
learned checkpoints run through :class:`envs.routing_env.PrefillRoutingEnv` with masked,
deterministic actions. Each episode gives the metrics of ``envs.metrics.summarize``; the
table reports their mean over episodes with a 95% confidence interval (Student t over the
per-episode values; episodes = held-out windows x seeds).
"""

from __future__ import annotations

import time
from dataclasses import replace

from baselines.runner import run_policy
from envs.metrics import summarize
from envs.metrics.stats import mean_ci95
from envs.metrics.table import metric_names
from policies.common.checkpoint import LearnedPolicy, checkpoint_path
from policies.common.heuristic import run_episode
from policies.common.policy_args import check_distinct, check_policy_argument, is_checkpoint
from policies.routing.arm_selection import arm_policy_spec, is_arm_checkpoint

#: The metrics of a routing episode row (names of :mod:`envs.metrics.table`).
METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "num_unfinished")


def evaluate(policies: list[str], source, sim_config, seeds: list[int], part: str = "eval",
             window_indices: list[int] | None = None, log=None, on_row=None) -> list[dict]:
    """Runs every policy on every selected window of every seed.

    Args:
        policies: registered heuristic names and/or checkpoint paths (``"shipped"``).
        source: :class:`policies.routing.train.EpisodeSource`.
        sim_config: base :class:`~envs.sim.SimConfig`; its seed is replaced by each seed.
        seeds: workload seeds (trace arrival spreading / generator) and simulator seeds.
        part: ``"eval"`` (held-out windows), ``"train"`` or ``"all"``.
        window_indices: positions inside the part (default: all of them).
        on_row: optional ``callable(rows)`` called with the rows so far after each episode (e.g. to
            save them: a run stopped midway keeps its finished episodes).

    Returns:
        One row per episode: ``policy, seed, window, window_name`` plus ``METRICS``.

    Raises:
        ValueError: on an unknown policy name (with close matches), a repeated seed or window
            index (:func:`check_distinct`) or a window index out of range.
        FileNotFoundError: for a checkpoint path that does not exist.
    """
    check_distinct(list(seeds), "seeds")
    if window_indices is not None:
        check_distinct(list(window_indices), "window_indices")
    from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)

    learned = {}
    if any(is_checkpoint(p) for p in policies):
        import torch as th

        th.set_num_threads(1)  # batch-1 inference of a small net: one thread is fastest

    arm_specs = {}
    for p in policies:
        check_policy_argument(p)
        if is_checkpoint(p) and is_arm_checkpoint(checkpoint_path(p)):
            arm_specs[p] = arm_policy_spec(checkpoint_path(p))
        elif is_checkpoint(p):
            learned[p] = LearnedPolicy(p)
    rows = []
    for seed in seeds:
        wins = source.windows(part, seed=seed)
        idx = window_indices if window_indices is not None else list(range(len(wins)))
        for i in idx:
            if not 0 <= i < len(wins):
                raise ValueError(f"window index {i} out of range: the {part} part has {len(wins)} windows")
            wl = wins[i]
            cfg = replace(sim_config, seed=seed)
            for p in policies:
                t0 = time.perf_counter()
                if p in learned:
                    pol = learned[p]
                    env = PrefillRoutingEnv([wl], cfg)
                    res, _, _ = run_episode(env, pol, options={"window_index": 0, "sim_seed": seed})
                    res.policy = pol.name
                else:
                    res = run_policy(arm_specs.get(p, p), wl, cfg)
                s = summarize(res)
                row = {"policy": res.policy, "seed": seed, "window": i, "window_name": wl.name,
                       "num_requests": wl.num_requests, "wall_s": time.perf_counter() - t0}
                row.update({k: s[k] for k in METRICS})
                rows.append(row)
                if on_row is not None:
                    on_row(list(rows))
                if log:
                    log(f"{row['policy']:28s} seed {seed} window {i:2d}: mean TTFT {row['mean_ttft_s']:.3f} s, "
                        f"SLO tok {row['slo_attainment_token_weighted']:.3f}")
    return rows


def aggregate(rows: list[dict], reference: str | None = None) -> list[dict]:
    """Per policy (first-seen order): ``num_episodes`` and, per metric, the mean and
    ``<metric>_ci95`` (half-width). With ``reference`` (a policy label), also the paired
    difference of mean TTFT against it over the same (seed, window) episodes:
    ``delta_mean_ttft_s`` and ``delta_mean_ttft_s_ci95`` [s] (negative = faster), and
    ``delta_slo_attainment`` with its CI."""
    out = []
    ref = {(r["seed"], r["window"]): r for r in rows if r["policy"] == reference} if reference else {}
    for name in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == name]
        agg = {"policy": name, "num_episodes": len(rs)}
        for m in METRICS:
            mean, ci = mean_ci95([r[m] for r in rs])
            agg[m] = mean
            agg[m + "_ci95"] = ci
        if ref:
            pairs = [(r, ref[(r["seed"], r["window"])]) for r in rs if (r.get("seed"), r.get("window")) in ref]
            agg["delta_mean_ttft_s"], agg["delta_mean_ttft_s_ci95"] = mean_ci95(
                [a["mean_ttft_s"] - b["mean_ttft_s"] for a, b in pairs])
            agg["delta_slo_attainment"], agg["delta_slo_attainment_ci95"] = mean_ci95(
                [a["slo_attainment_token_weighted"] - b["slo_attainment_token_weighted"] for a, b in pairs])
        out.append(agg)
    return out
