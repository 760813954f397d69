"""Does a reconfiguration checkpoint trained with every observation entry normalised (before
``policies.flag_normalize``) depend on how its 0/1 flags are scaled? Runs the checkpoint on
whole-workload episodes (its training workload, pool and window; one per seed) twice: with its
stored ``VecNormalize`` statistics, and with the same statistics but the flags
(:func:`envs.reconfig_env.observation_flag_columns`) passed through unnormalised. Prints per seed
both mean TTFTs [s] and, for the stored statistics, the steps with a flag at the clip value (a flag
value never seen in training: the issue), then the paired mean TTFT change [%] with its 95 % CI::

    python -m experiments.scripts.reconfig_flag_normalization                  # shipped-reconfig, seeds 500-504
    python -m experiments.scripts.reconfig_flag_normalization CHECKPOINT --seeds 500,501

Shipped ``reconfig_target`` on validation seeds 500-509 (2026-12-07): 0.4187 s with its stored
statistics (seed 500: 0.4083 s, as ``cpgym evaluate --policy shipped-reconfig --seeds 500``),
0.4282 s with the flags unnormalised, paired change +2.43 % ± 5.90; under the stored statistics 5
of 280 steps had a flag at the clip value (``targets`` ``is_projected`` of menu entries 7 and 8,
seeds 505 and 506). The policy was trained on normalised flags, so unnormalised flags are inputs it
never saw (different actions on 8 of 10 seeds): only retraining tells what the fix is worth.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def passing_flags(stats, flag_columns):
    """A :class:`policies.flag_normalize.FlagPreservingVecNormalize` with ``stats``' statistics
    (a loaded plain ``VecNormalize``, no environment) that passes ``flag_columns`` through."""
    from policies.flag_normalize import FlagPreservingVecNormalize

    out = FlagPreservingVecNormalize.__new__(FlagPreservingVecNormalize)
    out.__dict__.update(stats.__dict__)
    out.flag_columns = {k: tuple(v) for k, v in flag_columns.items()}
    return out


def measure(checkpoint: str, seeds: list[int], log=print) -> list[dict]:
    """Per seed: ``{seed, stored_mean_ttft_s, flags_raw_mean_ttft_s, num_steps, num_clipped_flag_steps,
    num_different_actions}``."""
    from dataclasses import replace

    from envs.reconfig_env import observation_flag_columns
    from envs.sim import PoolConfig, SimConfig
    from envs.metrics import summarize
    from envs.workloads import build_workload
    from policies.evaluate_reconfig import LearnedReconfig

    stored, raw = LearnedReconfig(checkpoint), LearnedReconfig(checkpoint)
    if stored.vecnormalize is None:
        raise ValueError(f"{checkpoint}: no vecnormalize.pkl: nothing is normalised")
    tc, sc = stored.meta.get("train_config") or {}, stored.meta.get("sim_config") or {}
    pool = PoolConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in (sc.get("pool") or {}).items()})
    config = SimConfig(pool=pool)
    params = {k: v for k, v in (tc.get("params") or [])}
    flag_columns = observation_flag_columns(stored.model.observation_space)
    raw.vecnormalize = passing_flags(raw.vecnormalize, flag_columns)
    clip = stored.vecnormalize.clip_obs
    counts = {"steps": 0, "clipped": 0}

    def watch(act):
        def wrapped(obs, mask):
            counts["steps"] += 1
            norm = stored.vecnormalize.normalize_obs(obs)
            if any((np.abs(np.asarray(norm[k])[..., list(c)]) >= clip).any() for k, c in flag_columns.items()):
                counts["clipped"] += 1
            return act(obs, mask)
        return wrapped

    stored.act = watch(stored.act)
    rows = []
    for seed in seeds:
        wl = build_workload(name=tc.get("workload") or "matched-phases", seed=seed, **params)
        counts.update(steps=0, clipped=0)
        a, acts_a = stored.run(wl, replace(config, seed=seed), seed)
        steps, clipped = counts["steps"], counts["clipped"]
        raw.capacity_cache = stored.capacity_cache  # profiles are pure functions of their key: computed once
        b, acts_b = raw.run(wl, replace(config, seed=seed), seed)
        row = {"seed": seed, "stored_mean_ttft_s": summarize(a)["mean_ttft_s"],
               "flags_raw_mean_ttft_s": summarize(b)["mean_ttft_s"], "num_steps": steps, "num_clipped_flag_steps": clipped,
               "num_different_actions": sum(x != y for x, y in zip(acts_a, acts_b)) + abs(len(acts_a) - len(acts_b))}
        rows.append(row)
        log(f"seed {seed}: mean TTFT {row['stored_mean_ttft_s']:.4f} s stored stats, {row['flags_raw_mean_ttft_s']:.4f} s "
            f"flags unnormalised; {clipped}/{steps} steps with a flag at the clip value; "
            f"{row['num_different_actions']} different actions")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.scripts.reconfig_flag_normalization",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", nargs="?", default="shipped-reconfig",
                    help="reconfiguration checkpoint (default shipped-reconfig)")
    ap.add_argument("--seeds", default="500,501,502,503,504",
                    help="workload and simulator seeds (default 500-504: validation seeds)")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        rows = measure(args.checkpoint, seeds)
    except (ValueError, OSError) as exc:
        print(f"{ap.prog}: error: {exc}", file=sys.stderr)
        return 2
    from policies.evaluate import mean_ci95

    a = [r["stored_mean_ttft_s"] for r in rows]
    b = [r["flags_raw_mean_ttft_s"] for r in rows]
    d, h = mean_ci95([100.0 * (y / x - 1.0) for x, y in zip(a, b)])
    print(f"mean over seeds {seeds}: {np.mean(a):.4f} s stored stats, {np.mean(b):.4f} s flags unnormalised; "
          f"paired change {d:+.2f} % ± {h:.2f} (95 % CI); steps with a flag at the clip value: "
          f"{sum(r['num_clipped_flag_steps'] for r in rows)}/{sum(r['num_steps'] for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
