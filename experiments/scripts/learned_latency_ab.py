"""Per-decision cost of a learned router, this checkout vs another one, in ONE process.

``cpgym bench env`` run twice, once per checkout, is at the mercy of a shared machine's load
between the two runs. This script loads ``policies/common/numpy_policy.py`` and ``envs/routing_env.py``
of ``--baseline`` (another checkout, e.g. the main worktree) next to this checkout's, routes the
same episode with both, alternating ``--repeats`` times, and reports per side the fastest mean
over the episode of (a) the numpy decision (``NumpyWorkerSetActor.act``) and (b) building the
observation (``PrefillRoutingEnv._observe``). It also checks that both sides give bit-identical
logits and observations at every decision (exit status 1 otherwise).

Run from the repository root::

    python -m experiments.scripts.learned_latency_ab --baseline /work/main --repeats 9

Default scenario: the shipped checkpoint, the first 60 s window of the Mooncake conversation
trace at 12 requests/s, the default 40-GPU pool (what ``cpgym bench env`` measures).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _episode(env_cls, actor, window, config, check=None):
    """(decision us, observation us, decisions, [(obs, logits)]) of one episode."""
    env = env_cls([window], config)
    obs, _ = env.reset(options={"window_index": 0, "sim_seed": 0})
    t_act = t_obs = 0.0
    k = 0
    trace = []
    pc = time.perf_counter
    while True:
        m = env.action_masks()
        t0 = pc()
        a = actor.act(obs, m)
        t1 = pc()
        env._observe(env.pending_request)  # the same observation again (idempotent)
        t2 = pc()
        t_act += t1 - t0
        t_obs += t2 - t1
        if check is not None:
            trace.append((obs, actor.logits(obs)))
        k += 1
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            return 1e6 * t_act / k, 1e6 * t_obs / k, k, trace


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from envs.routing_env import PrefillRoutingEnv, episode_windows
    from envs.sim import SimConfig
    from envs.workloads import WorkloadSource, default_traces_dir
    from policies.common.checkpoint import LearnedPolicy
    from policies.common.numpy_policy import NumpyWorkerSetActor

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", required=True, help="root of the other checkout (holds envs/ and policies/)")
    p.add_argument("--repeats", type=int, default=9, help="alternating repetitions; the fastest counts (default 9)")
    p.add_argument("--policy", default="shipped", help="checkpoint (default: the shipped one)")
    args = p.parse_args(argv)
    base = Path(args.baseline)
    old_env = _load(base / "envs" / "routing_env.py", "baseline_routing_env")
    old_np = _load(base / "policies" / "numpy_policy.py", "baseline_numpy_policy")
    wl = WorkloadSource(trace=str(default_traces_dir() / "conversation_trace.jsonl"), target_rps=12.0).build()
    window = episode_windows(wl, 60.0)[0]
    ext = LearnedPolicy(args.policy).model.policy.features_extractor
    sides = {"baseline": (old_env.PrefillRoutingEnv, old_np.NumpyWorkerSetActor(ext)),
             "this checkout": (PrefillRoutingEnv, NumpyWorkerSetActor(ext))}
    _, _, _, ref = _episode(*sides["baseline"], window, SimConfig(), check=True)
    _, _, _, new = _episode(*sides["this checkout"], window, SimConfig(), check=True)
    same = len(ref) == len(new) and all(
        np.array_equal(lo, ln) and all(np.array_equal(oo[key], on[key]) for key in oo) for (oo, lo), (on, ln) in zip(ref, new))
    best = {s: [float("inf"), float("inf")] for s in sides}
    k = 0
    for _ in range(args.repeats):
        for s, (env_cls, actor) in sides.items():
            a, o, k, _ = _episode(env_cls, actor, window, SimConfig())
            best[s] = [min(best[s][0], a), min(best[s][1], o)]
    rows = [{"side": s, "numpy_decision_us": a, "observation_us": o, "total_us": a + o, "num_decisions": k,
             "repeats": args.repeats} for s, (a, o) in best.items()]
    print(json.dumps({"bit_identical_logits_and_observations": same, "rows": rows}, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
