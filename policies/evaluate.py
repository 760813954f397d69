"""Evaluation of learned and heuristic routing policies on held-out episode windows and seeds.

Every (policy, window, seed) is one episode. Heuristics run through
``experiments.runner.run_policy`` (equal to running them through the environment, tested);
learned checkpoints run through :class:`envs.routing_env.PrefillRoutingEnv` with masked,
deterministic actions. Each episode gives the metrics of ``envs.metrics.summarize``; the
table reports their mean over episodes with a 95% confidence interval (Student t over the
per-episode values; episodes = held-out windows x seeds).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

METRICS = ("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "num_unfinished")

# two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30 (standard table); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_ci95(values) -> tuple[float, float]:
    """``(mean, half-width of the 95% CI)`` of the mean (Student t; NaN half-width for n < 2)."""
    x = np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    if n < 2:
        return float(x.mean()), math.nan
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(n))


def is_checkpoint(name: str) -> bool:
    """Whether a ``--policy`` value names a checkpoint (``"shipped"``, a ``.zip`` or a folder)."""
    from pathlib import Path

    return name == "shipped" or name.endswith(".zip") or Path(name).expanduser().is_dir()


def check_policy_argument(name: str) -> None:
    """Validates a policy given on the command line: a registered heuristic, ``"shipped"``, or an
    existing checkpoint folder / ``.zip``.

    Raises:
        FileNotFoundError: naming the path, for a checkpoint path that does not exist (a value
            holding a path separator or ending in ``.zip``) or a folder without ``model.zip``.
        ValueError: for an unknown name: suggests the closest names (``difflib``) and names the
            accepted forms (``shipped``, checkpoint paths, the registered policies).
    """
    import difflib

    from baselines.registry import POLICIES
    from policies.checkpoint import looks_like_path, resolve_checkpoint

    if name in POLICIES:
        return
    if is_checkpoint(name) or looks_like_path(name):
        resolve_checkpoint(name)
        return
    close = difflib.get_close_matches(name, ["shipped", *POLICIES], n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise ValueError(f"unknown policy {name!r}; {hint}expected 'shipped' (the shipped routing checkpoint), "
                     f"a checkpoint folder or .zip path (e.g. policies/checkpoints/routing_conversation), "
                     f"or a registered policy: {', '.join(POLICIES)}")


def evaluate(policies: list[str], source, sim_config, seeds: list[int], part: str = "eval",
             window_indices: list[int] | None = None, log=None) -> list[dict]:
    """Runs every policy on every selected window of every seed.

    Args:
        policies: registered heuristic names and/or checkpoint paths (``"shipped"``).
        source: :class:`policies.train.EpisodeSource`.
        sim_config: base :class:`~envs.sim.SimConfig`; its seed is replaced by each seed.
        seeds: workload seeds (trace arrival spreading / generator) and simulator seeds.
        part: ``"eval"`` (held-out windows), ``"train"`` or ``"all"``.
        window_indices: positions inside the part (default: all of them).

    Returns:
        One row per episode: ``policy, seed, window, window_name`` plus ``METRICS``.

    Raises:
        ValueError: on an unknown policy name (with close matches) or a window index out of range.
        FileNotFoundError: for a checkpoint path that does not exist.
    """
    from envs.metrics import summarize
    from envs.routing_env import PrefillRoutingEnv
    from experiments.runner import run_policy
    from policies.checkpoint import LearnedPolicy
    from policies.heuristic import run_episode

    learned = {}
    if any(is_checkpoint(p) for p in policies):
        import torch as th

        th.set_num_threads(1)  # batch-1 inference of a small net: one thread is fastest
    for p in policies:
        check_policy_argument(p)
        if is_checkpoint(p):
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
                    res = run_policy(p, wl, cfg)
                s = summarize(res)
                row = {"policy": res.policy, "seed": seed, "window": i, "window_name": wl.name,
                       "num_requests": wl.num_requests, "wall_s": time.perf_counter() - t0}
                row.update({k: s[k] for k in METRICS})
                rows.append(row)
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
            agg["delta_mean_ttft_s"], agg["delta_mean_ttft_s_ci95"] = mean_ci95([a["mean_ttft_s"] - b["mean_ttft_s"] for a, b in pairs])
            agg["delta_slo_attainment"], agg["delta_slo_attainment_ci95"] = mean_ci95(
                [a["slo_attainment_token_weighted"] - b["slo_attainment_token_weighted"] for a, b in pairs])
        out.append(agg)
    return out
