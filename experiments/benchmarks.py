"""Speed measurements as library functions (``cpgym bench-env`` is a thin wrapper):
:func:`bench_routing_env` times the routing environment and the policies' decisions."""

from __future__ import annotations

import time
from dataclasses import dataclass

from baselines.registry import get_policy
from baselines.runner import build_simulator
from envs.sim.options import option as _opt
from envs.sim.options import split_name_list
from policies.common.checkpoint import LearnedPolicy, checkpoint_path, resolve_checkpoint
from policies.routing.arm_selection import ArmSelectionPolicy, is_arm_checkpoint


@dataclass(frozen=True)
class EnvBenchConfig:
    """What :func:`bench_routing_env` measures (one ``cpgym bench-env`` flag per field).

    Raises:
        ValueError: naming the field, on ``steps``, ``n_envs`` or ``torch_threads`` < 1, and on a
            ``heuristics`` list with an empty or repeated item (``"none"`` measures no heuristic).
    """

    steps: int = _opt(20_000, "env steps per measurement")
    n_envs: int = _opt(2, "DummyVecEnv size")
    # the Vertumnus *router* (``vertumnus`` is the full system: its loop runs the controller too)
    heuristics: str = _opt("least-work,prefix-affinity,vertumnus-router,round-robin",
                           "comma-separated heuristics whose decision latency is measured ('none' to skip)")
    policy: str = _opt("shipped", "learned checkpoint for the latency ('none' to skip)")
    torch_threads: int = _opt(1, "torch CPU threads for the learned policy")

    def __post_init__(self) -> None:
        for name in ("steps", "n_envs", "torch_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"bench-env: {name} must be >= 1, got {getattr(self, name)}")
        self.heuristic_names()

    def heuristic_names(self) -> list[str]:
        """``heuristics`` as a list (``"none"``: no heuristic). An empty item was skipped, so
        ``--heuristics ""`` silently measured none, and a repeated name was timed twice.

        Raises:
            ValueError: naming the field, on an empty list or item or a repeated name.
        """
        if self.heuristics.strip() == "none":
            return []
        return split_name_list(self.heuristics, "bench-env: heuristics")


@dataclass(frozen=True)
class EnvBenchResult:
    """Outcome of :func:`bench_routing_env` (wall-clock rates of this machine).

    Args:
        workload / num_windows / pool / num_gpus / max_num_workers: what was measured.
        raw_env_steps_per_s: ``env.step`` only (the action — the first eligible worker — is
            computed outside the timed region), observation building and reward accounting
            included; ``raw_env_steps_per_s_incl_resets`` adds the resets.
        dummy_vec_env_steps_per_s: steps/s under SB3 ``DummyVecEnv`` of ``dummy_vec_env_n_envs``
            copies, masks fetched per step.
        decision_latency_us: policy -> mean decision latency [us/decision]: heuristics
            (``Router.route`` inside ``Simulator.run``) and a learned checkpoint, through its numpy
            forward pass (``policies.common.numpy_policy``, what ``cpgym evaluate`` uses) and through SB3
            ``model.predict`` (label suffix `` (torch)``), masks passed, batch 1; label suffix
            `` (observation + decision)``: the numpy decision plus building its observation (the
            feature work a heuristic's ``route`` does inside its own latency).
        env_steps_per_s: policy -> steps/s of the whole decide-and-step loop of that policy.
    """

    workload: str
    num_windows: int
    pool: str
    num_gpus: int
    max_num_workers: int
    raw_env_steps_per_s: float
    raw_env_steps_per_s_incl_resets: float
    dummy_vec_env_steps_per_s: float
    dummy_vec_env_n_envs: int
    decision_latency_us: dict
    env_steps_per_s: dict

    def rows(self) -> list[dict]:
        """``{policy, decision_latency_us, env_steps_per_s}`` rows: the raw env and DummyVecEnv
        (``decision_latency_us`` None), then every measured policy."""
        out = [{"policy": "env (raw step)", "decision_latency_us": None, "env_steps_per_s": self.raw_env_steps_per_s},
               {"policy": f"env (DummyVecEnv x{self.dummy_vec_env_n_envs})", "decision_latency_us": None,
                "env_steps_per_s": self.dummy_vec_env_steps_per_s}]
        return out + [{"policy": k, "decision_latency_us": v, "env_steps_per_s": self.env_steps_per_s[k]}
                      for k, v in self.decision_latency_us.items()]


def _raw_env(wins, config, steps: int) -> tuple[float, float]:
    from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)

    env = PrefillRoutingEnv(wins, config)
    env.reset(seed=0)
    n, t_step, t_reset = 0, 0.0, 0.0
    pc = time.perf_counter
    while n < steps:
        a = int(env.action_masks().argmax())
        t0 = pc()
        _, _, term, trunc, _ = env.step(a)
        t_step += pc() - t0
        n += 1
        if term or trunc:
            t0 = pc()
            env.reset()
            t_reset += pc() - t0
    return n / t_step, n / (t_step + t_reset)


def _vec_env(wins, config, steps: int, n_envs: int) -> float:
    import numpy as np
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)

    venv = DummyVecEnv([(lambda: PrefillRoutingEnv(wins, config)) for _ in range(n_envs)])
    venv.seed(0)
    venv.reset()
    k = max(steps // n_envs, 1)
    t0 = time.perf_counter()
    for _ in range(k):
        masks = np.stack(venv.env_method("action_masks"))
        venv.step(masks.argmax(axis=1))
    return k * n_envs / (time.perf_counter() - t0)


def heuristic_label(name: str) -> str:
    """A heuristic's row label: its name for a router alone; for a policy with attachments (the full
    ``vertumnus`` system: controller and cache manager) the name and what its steps/s include, e.g.
    ``vertumnus (route; loop incl. ReconfigController, GlobalCacheManager)``: its decision latency
    is ``route`` alone, its decide-and-step loop runs the attachments too (113 steps/s read as the
    router's when the row said only ``vertumnus``)."""
    attached = [type(a).__name__ for a in get_policy(name).make_attachments()]
    return f"{name} (route; loop incl. {', '.join(attached)})" if attached else name


def _heuristic_latency_us(name: str, window, config) -> tuple[float, float]:
    sim, spec = build_simulator(name, window, config)
    router = spec.make_router()
    view = sim.view
    router.reset(view, sim.policy_rng)
    total, k = 0.0, 0
    t_loop = time.perf_counter()
    while (req := sim.run_until_decision()) is not None:
        t0 = time.perf_counter()
        wid = router.route(req, view)
        total += time.perf_counter() - t0
        sim.decide(wid)
        router.on_dispatch(req, wid, view)
        k += 1
    return 1e6 * total / max(k, 1), k / (time.perf_counter() - t_loop)


def _learned_latency_us(checkpoint: str, window, config, torch_threads: int, backend: str) -> tuple[str, float, float, float]:
    """``(label, us per decision, steps/s of the decide+step loop, us to build one observation)``
    of a checkpoint, batch 1. The observation time re-builds the current decision's observation
    (``PrefillRoutingEnv._observe``, the per-decision feature work that ``env.step`` does before
    returning it), so ``decision + observation`` is what a deployed learned router pays per request."""
    import torch as th

    from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)

    th.set_num_threads(torch_threads)
    env = PrefillRoutingEnv([window], config)
    if is_arm_checkpoint(checkpoint_path(checkpoint)):  # no network: one backend
        pol = ArmSelectionPolicy(checkpoint_path(checkpoint), env)
        label = pol.name
    else:
        pol = LearnedPolicy(checkpoint, backend=backend)
        label = pol.name if backend == "numpy" else f"{pol.name} (torch)"
    obs, _ = env.reset(seed=0, options={"window_index": 0, "sim_seed": 0})
    total, total_obs, k = 0.0, 0.0, 0
    pc = time.perf_counter
    t_loop = pc()
    while True:
        m = env.action_masks()
        t0 = pc()
        a, _ = pol.predict(obs, deterministic=True, action_masks=m)
        t1 = pc()
        env._observe(env.pending_request)  # the same observation again (idempotent)
        total_obs += pc() - t1
        total += t1 - t0
        obs, _, term, trunc, _ = env.step(int(a))
        k += 1
        if term or trunc or k >= 3000:
            elapsed = pc() - t_loop - total_obs
            return label, 1e6 * total / k, k / elapsed, 1e6 * total_obs / k


def bench_routing_env(cfg: EnvBenchConfig, workload, episode_window_s: float, config) -> EnvBenchResult:
    """Times the routing environment on the ``episode_window_s`` episode windows of ``workload``
    (``envs.routing_env.episode_windows``) and the decision latency of ``cfg``'s heuristics and
    checkpoint on the first window, on the pool of ``config`` (``SimConfig``).

    Raises:
        ValueError: on an unknown heuristic or a window with no request; ``FileNotFoundError``
            on a missing checkpoint.
    """
    from envs.routing_env import episode_windows  # lazy: gymnasium (start-up of the CLI)

    heuristics = cfg.heuristic_names()
    for name in heuristics:  # names and checkpoint checked before anything is timed (they failed after the env runs)
        get_policy(name)
    if cfg.policy != "none":
        resolve_checkpoint(cfg.policy)
    windows = episode_windows(workload, episode_window_s)
    raw, raw_resets = _raw_env(windows, config, cfg.steps)
    vec = _vec_env(windows, config, cfg.steps, cfg.n_envs)
    lat, sps = {}, {}
    for name in heuristics:
        label = heuristic_label(name)
        lat[label], sps[label] = _heuristic_latency_us(name, windows[0], config)
    if cfg.policy != "none":
        arm = is_arm_checkpoint(checkpoint_path(cfg.policy))  # a router: it reads the pool, not the observation
        for backend in ("numpy",) if arm else ("numpy", "torch"):
            name, lat_us, steps, obs_us = _learned_latency_us(cfg.policy, windows[0], config, cfg.torch_threads, backend)
            lat[name], sps[name] = lat_us, steps
            if backend == "numpy" and not arm:
                lat[f"{name} (observation + decision)"], sps[f"{name} (observation + decision)"] = lat_us + obs_us, steps
    return EnvBenchResult(workload=workload.name, num_windows=len(windows), pool=config.pool.composition,
                          num_gpus=config.pool.num_gpus, max_num_workers=config.pool.max_num_workers,
                          raw_env_steps_per_s=raw, raw_env_steps_per_s_incl_resets=raw_resets,
                          dummy_vec_env_steps_per_s=vec, dummy_vec_env_n_envs=cfg.n_envs, decision_latency_us=lat,
                          env_steps_per_s=sps)
