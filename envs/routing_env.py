"""Gymnasium environment for request-level routing (paper §5): one step per routing decision.

The environment owns the simulation loop (Decima / Park style): ``reset()`` builds a
:class:`~envs.sim.Simulator` for one episode window and advances it to the first request that
needs a routing decision; ``step(action)`` dispatches that request to the chosen worker
(``Simulator.decide``) and advances to the next decision (``Simulator.run_until_decision``).
Heuristic routers plug into exactly the same two calls (``Simulator.run``), so a heuristic run
through this environment and ``cpgym simulate`` are the same computation (tested).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.accounting import EpisodeAccounting
from envs.episodes import (  # noqa: F401  (re-exported: their historical import path)
    DEFAULT_TARGET_RPS,
    DEFAULT_WINDOW_S,
    PickleBeforeReset,
    check_env_arguments,
    default_routing_windows,
    episode_windows,
    nonempty_windows,
    reset_options,
    split_windows,
)
from envs.fault_features import FAULT_OBSERVATION_FEATURES, fault_flags
from envs.metrics.summary import measured_summary
from envs.sim import PENDING, Calibration, PoolView, Request, SimConfig, Simulator, WorkerState, Workload

#: Former name of :class:`envs.accounting.EpisodeAccounting` (kept importable from here).
_Accounting = EpisodeAccounting

# ------------------------------------------------------------------------------------------
# Observation layout (physical units; every feature is clipped to the documented bound).

#: Bound of every time feature [s] (a queue of more than a day of predicted work is clipped).
TIME_BOUND_S = 1e5
#: Bound of token counts [tokens].
TOKEN_BOUND = 1e9
#: Bound of request counts.
COUNT_BOUND = 1e6

WORKER_FEATURES: tuple[tuple[str, float], ...] = (
    ("present", 1.0),                  # 1 if a (non-retired) worker has this slot (= worker id)
    ("eligible", 1.0),                 # 1 if the pending request may be routed here (action mask)
    ("degree", 64.0),                  # CP degree C [GPUs]; 0 for an empty slot
    ("is_reconfiguring", 1.0),         # 1 if not ACTIVE: DRAINING or SWITCHING (paper §6), or REBUILDING after a fault
    ("outstanding_work_s", TIME_BOUND_S),   # q_w [s] (paper §5)
    ("ready_hit_tokens", TOKEN_BOUND),      # P_{i,w}: ready prefix hit of the pending request [tokens]
    ("predicted_service_s", TIME_BOUND_S),  # s = E_{C_w}(L - P_{i,w}, P_{i,w}) [s]
    ("predicted_finish_s", TIME_BOUND_S),   # q_w + s [s]
    ("num_queued_requests", COUNT_BOUND),
    ("num_queued_new_tokens", TOKEN_BOUND),  # [tokens]
    ("kv_usage", 1.0),                 # share of the worker's KV blocks in use, in [0, 1]
    ("present_hit_tokens", TOKEN_BOUND),    # leading blocks present, ready or pending reconciliation [tokens]
)
REQUEST_FEATURES: tuple[tuple[str, float], ...] = (
    ("num_prompt_tokens", TOKEN_BOUND),     # L [tokens]
    ("ttft_slo_s", TIME_BOUND_S),           # the request's TTFT SLO [s]
    ("isolated_service_s", TIME_BOUND_S),   # E_{C_min}(L, 0) on the smallest supported degree [s]
    ("max_ready_hit_tokens", TOKEN_BOUND),  # max over eligible workers of P_{i,w} [tokens]
    ("waited_s", TIME_BOUND_S),             # now - arrival [s] (> 0 after a park or a redirect)
    ("num_routings", COUNT_BOUND),          # earlier routings of this request (redirects)
)
POOL_FEATURES: tuple[tuple[str, float], ...] = (
    ("num_eligible_workers", COUNT_BOUND),
    ("num_requests_in_system", COUNT_BOUND),   # routed, not yet finished (incl. this one if redirected)
    ("total_outstanding_work_s", TIME_BOUND_S),  # sum of q_w [s]
    ("min_eligible_outstanding_work_s", TIME_BOUND_S),  # [s]
    ("epoch", COUNT_BOUND),                    # configuration epoch (paper §6/§8)
)

#: Per-worker features of the ``"workers_extra"`` key (same rows as ``"workers"``).
WORKER_EXTRA_FEATURES: tuple[tuple[str, float], ...] = (
    # C_w*s - C_min*E_{C_min}(R_{i,w}, P_{i,w}): the extra GPU time of the Vertumnus cost (paper §5,
    # baselines.vertumnus.extra_gpu_time_s) with C_min over the eligible workers [GPU s]; 0 if not eligible
    ("extra_gpu_time_s", TIME_BOUND_S),
)
#: Episode-context features of the ``"context"`` key.
CONTEXT_FEATURES: tuple[tuple[str, float], ...] = (
    ("time_to_window_end_s", TIME_BOUND_S),   # max(0, window end - now) [s]; window end from the window's metadata
    ("recent_arrival_rate_rps", COUNT_BOUND),  # arrivals in (now - RECENT_RATE_WINDOW_S, now] / that span [requests/s]
)
#: Look-back of ``recent_arrival_rate_rps`` [s] (shorter at the episode start: the elapsed time).
RECENT_RATE_WINDOW_S = 10.0

REWARD_KINDS = ("time_in_system", "slo_miss_tokens")


@dataclass(frozen=True)
class RoutingRewardConfig:
    """Reward of :class:`PrefillRoutingEnv`.

    Args:
        kind: ``"time_in_system"`` (default) or ``"slo_miss_tokens"``; see the environment's
            *Rewards* section.
        invalid_action_penalty: subtracted from the reward of a step whose action was not an
            eligible worker (the request is then routed to the least-work eligible worker).
            Units of the chosen reward (seconds for ``time_in_system``). Default 1.0.
        scale: multiplies the reward (before the penalty). Default 1.0.

    Raises:
        ValueError: naming the field, on an unknown kind, a negative penalty or a scale <= 0.
    """

    kind: str = "time_in_system"
    invalid_action_penalty: float = 1.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in REWARD_KINDS:
            raise ValueError(f"reward.kind must be one of {REWARD_KINDS}, got {self.kind!r}")
        # numbers first: a string or a list failed inside the comparison ("'>' not supported ...")
        if not (_is_real(self.invalid_action_penalty) and self.invalid_action_penalty >= 0
                and math.isfinite(self.invalid_action_penalty)):
            raise ValueError("reward.invalid_action_penalty must be a finite number >= 0, "
                             f"got {self.invalid_action_penalty!r}")
        if not (_is_real(self.scale) and self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"reward.scale must be a finite number > 0, got {self.scale!r}")


def _is_real(value) -> bool:
    """A real number (Python or numpy), bool excluded."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def discrete_action(action, n: int) -> int:
    """The index ``k`` of an action of a ``Discrete(n)`` action space, as a Python int.

    Accepted: a Python or numpy integer, or an integer numpy array of shape ``()`` or ``(1,)``
    (what SB3's ``predict`` returns for one observation; ``DummyVecEnv`` passes numpy integers).

    Raises:
        ValueError: naming the action and the space, if the action is not an element of it: not
            an integer (a float, even ``1.0``; a bool; a string; a longer array) or outside
            ``[0, n)`` (``1.7`` was truncated to 1, ``"x"`` failed inside ``int()``, an array of
            shape ``(1,)`` raised ``TypeError``).
    """
    if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
        k = int(action)
    elif isinstance(action, np.ndarray) and action.shape in ((), (1,)) and np.issubdtype(action.dtype, np.integer):
        k = int(action.reshape(()))
    else:
        k = -1
    if not 0 <= k < n:
        raise ValueError(f"action {action!r} is not an element of the action space Discrete({n}): expected an integer "
                         f"in [0, {n}) (a Python or numpy integer, or an integer array of shape () or (1,))")
    return k


def check_render_mode(render_mode: str | None, render_modes: Sequence[str]) -> None:
    """Gymnasium's ``render_mode`` convention for an environment with ``metadata["render_modes"]
    == render_modes``.

    Raises:
        ValueError: naming ``render_mode`` and the supported modes, if it is neither ``None`` nor
            one of them (``gym.make(id, render_mode="human")`` failed with "unexpected keyword
            argument").
    """
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(f"render_mode must be None or one of metadata['render_modes'] = {list(render_modes)}, "
                         f"got {render_mode!r}")


def least_work_worker(sim: Simulator, request: Request) -> int:
    """The eligible worker with the least outstanding work ``q_w`` (ties: fewer queued requests,
    then pool order) — the remap target of an invalid action; -1 if none is eligible."""
    view = sim.view
    best, best_key = -1, None
    for wid in sim.worker_ids:
        if not sim.is_eligible(sim.workers[wid], request):
            continue
        key = (view.outstanding_work_s(wid), len(sim.workers[wid].queue))
        if best_key is None or key < best_key:
            best, best_key = wid, key
    return best


class PrefillRoutingEnv(PickleBeforeReset, gym.Env):
    """Route each arriving prefill request to a CP worker of a fixed-GPU prefill pool.

    ## Description

    The calibrated discrete-event simulator of ``envs.sim`` replays one *episode window* of a
    trace or synthetic workload. Every arriving request (and every request redirected away
    from a draining worker, paper §6) is one decision: the agent picks the worker that will
    prefill it. Workers differ in CP degree, queue (``q_w``) and prefix cache, so the choice
    trades queueing against cache-aware service time and GPU time, as the Vertumnus router
    does with its cost ``J`` (paper §5).

    ## Action Space

    ``Discrete(max_num_workers)`` with ``max_num_workers = PoolConfig.max_num_workers``
    (``num_gpus // min(supported_degrees)``; 40 for the default pool). Action ``k`` means the
    worker whose id is ``k`` (ids are stable across split/merge, see ``envs.sim.pool``).
    :meth:`action_masks` gives the eligible slots (sb3-contrib MaskablePPO). An action of the
    space that is not eligible (masked out: empty or padded slot, draining worker, too little KV
    memory) is *remapped* to the eligible worker with the least outstanding work and penalised
    by ``reward.invalid_action_penalty``; ``info["invalid_action"]`` flags it. A Python or numpy
    integer and an integer array of shape ``()`` or ``(1,)`` (SB3's ``predict``) are accepted;
    anything that is not an element of the space (a float such as ``1.7`` or ``1.0``, a bool, a
    string, an integer outside ``[0, max_num_workers)``) raises ``ValueError`` naming the action
    and the space (:func:`discrete_action`), also after the episode ended.

    ## Observation Space

    ``Dict`` of float32 ``Box`` es in physical units, every feature in ``[0, bound]`` (values
    beyond the bound are clipped): ``"workers"`` of shape ``(max_num_workers, 12)`` (row = worker
    id, zeros for an empty slot), ``"request"`` of shape ``(6,)`` and ``"pool"`` of shape
    ``(5,)``; names, units and bounds in ``WORKER_FEATURES``, ``REQUEST_FEATURES`` and
    ``POOL_FEATURES``; ``"workers_extra"`` of shape ``(max_num_workers, 1)`` (the extra GPU time of
    the Vertumnus cost per worker, ``WORKER_EXTRA_FEATURES``) and ``"context"`` of shape ``(2,)``
    (time to the window end and the recent arrival rate, ``CONTEXT_FEATURES``). With
    ``num_slots`` > the pool's ``max_num_workers`` the worker rows are padded with zero rows
    (``present`` = 0, never eligible), so pools of different sizes share one space. Everything the
    Vertumnus router uses is there: ``q_w``, the ready hit ``P_{i,w}``, the degree ``C_w``, the
    worker state, the predicted service time ``E_{C_w}(R_{i,w}, P_{i,w})`` and the request length
    ``L``. Normalisation is left to the policy (``policies.common.extractor`` scales logarithmically).
    With ``observe_faults=True`` the ``"faults"`` key of shape ``(max_num_workers, 3)`` adds per
    worker slot the flags ``FAULT_OBSERVATION_FEATURES`` = (down, degraded, rebuilding) in
    ``{0, 1}``: a *detected* failure of the slot's first GPU, a straggler GPU, a REBUILDING worker
    (:func:`envs.fault_features.fault_flags`; all zeros without a fault model); absent by default.

    ## Rewards

    ``time_in_system`` (default, Decima/Park style): the reward of a step is minus the
    time-in-system integral ``∫ n(t) dt`` from this decision to the next, where ``n(t)`` counts
    routed, unfinished requests; a request routed for the first time is also charged, once, its
    time since arrival and the constant TTFT terms outside the pool (KV hand-off
    ``L·kv_bytes_per_token/bandwidth`` + first decode step). The last step runs the simulation
    to its end, so over an episode ``Σ rewards = -Σ_i TTFT_i`` exactly (without invalid-action
    penalties; requests never routed — rejected — are not counted).

    Worked example (one CP-1 worker, ``E = 1 + 0.1·R`` s, constant ``c`` per request): r0
    (L=10) arrives at 0 s, r1 (L=10) at 0.5 s. Step 0 routes r0 at t=0: charge ``c``; run to
    t=0.5 with one request in the system: reward ``-(0.5 + c)``. Step 1 routes r1: charge
    ``c``; r0 finishes at 2.0 (two requests in the system for 1.5 s = 3.0), r1 at 4.0 (one for
    2.0 s): reward ``-(5.0 + c)``. Sum ``-(5.5 + 2c)`` = -(TTFT0 + TTFT1) = -((2 + c) + (3.5 + c)).

    ``slo_miss_tokens``: at the step during which a request finishes with TTFT above its SLO,
    the reward is ``-L_i / mean(L)`` (mean over the episode's requests); at the episode end
    every request that did not finish (rejected, unfinished at the horizon) is charged the
    same. Over an episode ``Σ rewards = -N·(1 - token-weighted SLO attainment)``. In the
    example above with an SLO of 3 s and ``c < 0.5`` s: r1 misses, the second step earns ``-1``.

    Both are multiplied by ``reward.scale``.

    ## Starting State

    ``reset(seed=, options=)`` picks an episode window uniformly with ``self.np_random`` (or
    ``options["window_index"]``) and a simulator seed (or ``options["sim_seed"]``), builds the
    simulator (plus ``make_attachments()`` — controllers, cache managers) and runs to the first
    decision. Any other ``options`` key, or a value that is not an integer (``window_index`` in
    range, ``sim_seed`` >= 0), is a ValueError naming the key (:func:`envs.episodes.reset_options`).

    ## Episode End

    The episode ends when no decision is left. ``truncated=True`` (and ``terminated=False``)
    when ``SimConfig.horizon_s`` stopped the simulation while work remained: a request not yet
    routed (its arrival after the horizon, or parked) or a routed request unfinished — the
    return is cut short, so a learner should bootstrap there. ``terminated=True`` (and
    ``truncated=False``) only at a true end: every request finished or was rejected as
    unroutable (:meth:`envs.accounting.EpisodeAccounting.episode_end`). Stepping after the end
    is a no-op that repeats these flags. The last step's ``info`` holds ``episode_return`` and
    ``episode_mean_ttft_s``, ``episode_p90_ttft_s``, ``episode_slo_attainment_token_weighted`` of
    the requests arriving at or after the window's ``metadata["measure_from_s"]`` (0 by default;
    a warm-started protocol window, ``policies.routing.protocol``, excludes its warm-up). Every step's
    ``info["step_duration_s"]`` is the simulated time from this decision to the next one (to the
    end of the simulation on the last step) [s], for discounting per second
    (``policies.common.time_discount``).

    ## Info

    ``reset``, every ``step`` and every step after the end return the same six keys:
    ``sim_time_s`` (simulated clock [s]), ``window_index`` (the episode window),
    ``num_invalid_actions`` (masked actions so far), ``invalid_action`` (this step's action was
    masked and remapped; ``False`` at reset and after the end), ``worker_id`` (the worker the
    request went to; ``-1`` at reset and after the end, when no request is routed) and
    ``step_duration_s`` [s] (``0.0`` at reset and after the end). Once the episode has ended
    (the last step and every step after it) ``info`` also holds ``episode_return``,
    ``episode_mean_ttft_s``, ``episode_p90_ttft_s`` [s] and
    ``episode_slo_attainment_token_weighted`` (share in [0, 1]).

    ## Arguments

    Args:
        workloads: the episode windows (a workload or a sequence of them); ``None`` = the
            training windows of the Mooncake conversation trace at 12 requests/s (60 s windows,
            see :func:`split_windows`).
        config: simulator configuration (pool, engine, latency, SLO, seed, horizon), the same
            object the CLI builds; its ``seed`` is replaced per episode.
        calibration: cost model; ``None`` = the config's or the shipped default.
        reward: :class:`RoutingRewardConfig` (or a kind string).
        make_attachments: optional factory of objects with ``attach(sim)`` (e.g. a cluster
            controller) attached to every episode's simulator.
        make_simulator: optional ``(workload, config) -> Simulator`` replacing the plain
            ``Simulator(workload, config, calibration)`` (e.g. ``baselines.runner.build_simulator``
            of a named policy, which applies its composition, calibration transform and
            attachments); the pool's ``max_num_workers`` must match ``config``'s.
        num_slots: number of worker slots of the observation and action spaces (default: the
            pool's ``max_num_workers``); more pads with empty, masked slots.
        observe_faults: add the ``"faults"`` observation key (see Observation Space; default
            False: the observation of the shipped checkpoints).
        render_mode: ``None`` (Gymnasium's convention; no rendering is implemented:
            ``metadata["render_modes"]`` is empty).

    Raises:
        ValueError: if no window holds a request, the reward is invalid (or not a
            ``RoutingRewardConfig``, kind string or ``None``), ``num_slots`` is not an integer
            or below the pool's ``max_num_workers``, ``render_mode`` is not ``None``, or naming the
            argument when ``workloads``, ``config`` or ``calibration`` is not of its documented type
            or ``observe_faults`` is not a bool (:func:`envs.episodes.check_env_arguments`).

    ## Version History

    * v0: initial version (cpgym 0.1.0).
    * v0 (cpgym 0.2): ``"workers_extra"`` and ``"context"`` observation keys; ``num_slots`` padding.
    * v0 (cpgym 0.2): an action that is not an element of the action space raises ``ValueError``
      (an integer out of range was remapped and penalised like a masked one, ``1.7`` truncated
      to 1); masked actions are still remapped. ``render_mode`` argument (``None`` only).
    * v0 (cpgym 0.2): ``info`` has the same keys at reset, at every step and after the end
      (``invalid_action``, ``worker_id``, ``step_duration_s`` were missing at reset and after the
      end); section "Info".
    * v0 (cpgym 0.2): ``pickle`` after ``reset()`` raises a ``TypeError`` saying what to do
      instead (the pickle could not be loaded: SimPy's bound event classes); ``copy.deepcopy``
      continues the episode (:class:`envs.episodes.PickleBeforeReset`).
    * v0 (cpgym 0.2): the ``"context"`` features are clipped to their bounds like every other key
      (a burst of arrivals or a window longer than ``TIME_BOUND_S`` left the observation space).
    """

    metadata = {"render_modes": []}

    def __init__(self, workloads: Workload | Sequence[Workload] | None = None, config: SimConfig | None = None,
                 calibration: Calibration | None = None, reward: RoutingRewardConfig | str | None = None,
                 make_attachments: Callable[[], list] | None = None,
                 make_simulator: Callable[[Workload, SimConfig], Simulator] | None = None,
                 num_slots: int | None = None, observe_faults: bool = False, render_mode: str | None = None) -> None:
        super().__init__()
        check_render_mode(render_mode, self.metadata["render_modes"])
        check_env_arguments(config, calibration, observe_faults=observe_faults)
        self.render_mode = render_mode
        self.observe_faults = bool(observe_faults)  # adds the "faults" key (envs.fault_features.fault_flags)
        self.windows = nonempty_windows(workloads if workloads is not None else default_routing_windows())
        self.config = config or SimConfig()
        self.calibration = calibration or Calibration.resolve(self.config.calibration_path)
        if reward is None:
            reward = RoutingRewardConfig()
        elif isinstance(reward, str):
            reward = RoutingRewardConfig(kind=reward)
        elif not isinstance(reward, RoutingRewardConfig):  # failed only at the first step
            raise ValueError(f"reward must be a RoutingRewardConfig, a kind {REWARD_KINDS} or None, got {reward!r}")
        self.reward_config = reward
        self.make_attachments = make_attachments
        self.make_simulator = make_simulator
        pool = self.config.pool
        if num_slots is not None and (isinstance(num_slots, bool) or not isinstance(num_slots, numbers.Integral)):
            raise ValueError(f"num_slots must be an integer, got {num_slots!r}")
        if num_slots is not None and num_slots < pool.max_num_workers:
            raise ValueError(f"num_slots must be >= the pool's max_num_workers ({pool.max_num_workers}), got {num_slots}")
        #: Worker slots of the spaces (>= the pool's ``max_num_workers``; the rest are padding).
        self.max_num_workers = num_slots if num_slots is not None else pool.max_num_workers
        n = self.max_num_workers
        self._w_high = np.array([b for _, b in WORKER_FEATURES], dtype=np.float32)
        self._r_high = np.array([b for _, b in REQUEST_FEATURES], dtype=np.float32)
        self._p_high = np.array([b for _, b in POOL_FEATURES], dtype=np.float32)
        self._c_high = tuple(b for _, b in CONTEXT_FEATURES)
        self.observation_space = spaces.Dict({
            "workers": spaces.Box(0.0, np.broadcast_to(self._w_high, (n, len(WORKER_FEATURES))).copy(), dtype=np.float32),
            "request": spaces.Box(0.0, self._r_high.copy(), dtype=np.float32),
            "pool": spaces.Box(0.0, self._p_high.copy(), dtype=np.float32),
            "workers_extra": spaces.Box(0.0, TIME_BOUND_S, (n, len(WORKER_EXTRA_FEATURES)), dtype=np.float32),
            "context": spaces.Box(0.0, np.array(self._c_high, dtype=np.float32), dtype=np.float32),
            **_fault_space(n, observe_faults),
        })
        self.action_space = spaces.Discrete(n)
        self._min_degree = min(pool.supported_degrees)
        self.sim: Simulator | None = None
        self._acct: EpisodeAccounting | None = None
        self._req: Request | None = None
        self._mask = np.ones(n, dtype=bool)
        self._decision_listeners: list[Callable[[Request, int, PoolView], None]] = []
        self._episode_mean_tokens = 1.0
        self._seen: bytearray = bytearray()
        self._arrivals_s = np.zeros(0)
        self._arrivals_list: list[float] = []
        self._arrival_cursor_lo = self._arrival_cursor_hi = 0
        self._window_end_s = 0.0
        self.window_index = -1

    # ----------------------------------------------------------------------------------------
    def add_decision_listener(self, fn: Callable[[Request, int, PoolView], None]) -> None:
        """Registers ``fn(request, worker_id, view)``, called after every dispatch (kept across
        episodes) — how a heuristic :class:`~envs.sim.Router`'s ``on_dispatch`` is served."""
        self._decision_listeners.append(fn)

    @property
    def pending_request(self) -> Request | None:
        """The request of the current decision (``None`` after the episode ended)."""
        return self._req

    def action_masks(self) -> np.ndarray:
        """Boolean mask of shape ``(max_num_workers,)``: True for eligible workers. After the
        episode ended (no pending request) every slot is True (the action is ignored)."""
        return self._mask.copy()

    # ----------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        opt_idx, opt_seed = reset_options(options, len(self.windows))
        for _attempt in range(100):
            idx = opt_idx if opt_idx is not None else int(self.np_random.integers(len(self.windows)))
            sim_seed = opt_seed if opt_seed is not None else int(self.np_random.integers(2**31 - 1))
            req = self._start_episode(idx, sim_seed)
            if req is not None:
                break
            if opt_idx is not None:
                raise ValueError(f"episode window {idx} has no routable request")
        else:  # pragma: no cover - only with windows whose every request is unroutable
            raise RuntimeError("no episode window with a routable request found in 100 draws")
        return self._observe(req), self._info(False, None, False, 0.0)

    def _start_episode(self, idx: int, sim_seed: int) -> Request | None:
        wl = self.windows[idx]
        self.window_index = idx
        cfg = replace(self.config, seed=sim_seed)
        if self.make_simulator is not None:
            sim = self.make_simulator(wl, cfg)
        else:
            sim = Simulator(wl, cfg, self.calibration, policy_name="env")
        if self.make_attachments is not None:
            for a in self.make_attachments():
                a.attach(sim)
        self.sim = sim
        self._acct = EpisodeAccounting(sim)
        sim.finish_listeners.append(self._acct.on_finish)
        self._seen = bytearray(wl.num_requests)
        self._arrivals_s = np.fromiter((r.arrival_time_s for r in wl.requests), dtype=float, count=wl.num_requests)
        self._arrivals_list = self._arrivals_s.tolist()
        self._arrival_cursor_lo = self._arrival_cursor_hi = 0
        md = wl.metadata or {}
        if "window_end_s" in md and "window_start_s" in md:
            self._window_end_s = float(md["window_end_s"]) - float(md["window_start_s"])
        else:
            self._window_end_s = float(self._arrivals_s[-1])
        self._episode_total_tokens = sum(r.num_prompt_tokens for r in wl.requests)
        self._episode_mean_tokens = self._episode_total_tokens / wl.num_requests
        self._num_invalid = 0
        self._return = 0.0
        self._end_flags = (True, False)
        self._req = sim.run_until_decision()
        return self._req

    def step(self, action):
        """Routes the pending request to worker slot ``action`` (an ineligible slot goes to the
        least-work worker and is counted in ``info``), runs the simulator to the next decision
        and returns Gymnasium's ``(obs, reward, terminated, truncated, info)`` (reward: class
        docstring). After the episode ended a step is a no-op repeating the end flags.

        Raises:
            RuntimeError: before the first :meth:`reset`.
        """
        sim = self.sim
        if sim is None:
            raise RuntimeError("call reset() before step()")
        wid = discrete_action(action, self.max_num_workers)
        req = self._req
        if req is None:
            # Stepping after the end: a no-op repeating the end flags (Gymnasium leaves this
            # undefined; never crash).
            return self._observe(None), 0.0, *self._end_flags, self._info(True, None, False, 0.0)
        invalid = not self._mask[wid]
        if invalid:
            wid = least_work_worker(sim, req)
            self._num_invalid += 1
        acct = self._acct
        now = sim.env.now
        rid = req.request_id
        if not self._seen[rid]:
            self._seen[rid] = 1
            acct.admit(req, now)
        sim.decide(wid)
        if self._decision_listeners:
            view = sim.view
            for fn in self._decision_listeners:
                fn(req, wid, view)
        nxt = sim.run_until_decision()
        self._req = nxt
        terminated = truncated = False
        if nxt is None:
            terminated, truncated, end = acct.episode_end()
            self._end_flags = (terminated, truncated)
            tis, miss = acct.collect(end)
        else:
            tis, miss = acct.collect(sim.env.now)
        rc = self.reward_config
        if rc.kind == "time_in_system":
            reward = -tis
        else:
            if nxt is None:
                # every request that did not finish counts as a miss (paper §3)
                miss += self._episode_total_tokens - acct.finished_tokens
            reward = -miss / self._episode_mean_tokens
        reward *= rc.scale
        if invalid:
            reward -= rc.invalid_action_penalty
        self._return += reward
        done = nxt is None
        # step_duration_s: simulated time to the next decision (policies.common.time_discount)
        info = self._info(done, wid, invalid, sim.env.now - now)
        return self._observe(nxt), float(reward), terminated, truncated, info

    def _info(self, done: bool, worker_id: int | None, invalid: bool, step_duration_s: float) -> dict:
        """The ``info`` dict: the same six keys at reset, every step and after the end, plus the
        ``episode_*`` keys once the episode has ended (class docstring, "Info")."""
        info = {"sim_time_s": self.sim.env.now, "window_index": self.window_index, "num_invalid_actions": self._num_invalid,
                "invalid_action": bool(invalid), "worker_id": -1 if worker_id is None else int(worker_id),
                "step_duration_s": float(step_duration_s)}
        if done:
            info["episode_return"] = self._return
            md = self.windows[self.window_index].metadata or {}
            s = measured_summary(self.sim.result(), float(md.get("measure_from_s", 0.0)))
            info["episode_mean_ttft_s"] = s["mean_ttft_s"]
            info["episode_p90_ttft_s"] = s["p90_ttft_s"]
            info["episode_slo_attainment_token_weighted"] = s["slo_attainment_token_weighted"]
        return info

    # ----------------------------------------------------------------------------------------
    def _observe(self, req: Request | None) -> dict:
        n = self.max_num_workers
        W = np.zeros((n, len(WORKER_FEATURES)), dtype=np.float32)
        R = np.zeros(len(REQUEST_FEATURES), dtype=np.float32)
        P = np.zeros(len(POOL_FEATURES), dtype=np.float32)
        X = np.zeros((n, len(WORKER_EXTRA_FEATURES)), dtype=np.float32)
        ctx = np.zeros(len(CONTEXT_FEATURES), dtype=np.float32)
        mask = self._mask
        if req is None:
            mask[:] = True
            return self._with_faults({"workers": W, "request": R, "pool": P, "workers_extra": X, "context": ctx})
        mask[:] = False
        sim = self.sim
        now = sim.env.now
        ws = sim.workers
        cm = sim.cost_model
        bs = sim.kv_block_size_tokens
        L = req.num_prompt_tokens
        hashes = req.block_hashes
        cap = L - 1
        nh = len(hashes)
        active = WorkerState.ACTIVE
        is_eligible = sim.is_eligible
        num_eligible = 0
        total_q = 0.0
        min_q = math.inf
        max_hit = 0
        ids: list[int] = []
        rows: list[tuple] = []
        extra: list[tuple] = []  # eligible (slot, C_w, s, A, B): the extra GPU time needs C_min first
        c_min = 1 << 30
        # E_C(R, P) = A + B / C (CostModel.split_s; the same floating-point operations as
        # service_time_s): A and B computed once per distinct (cost model, P), reused for s_w and for
        # E_{C_min} of the extra GPU time
        wcm = None
        last_p = -1
        A = B = 0.0
        for wid in sim.worker_ids:
            w = ws[wid]
            rem = w.step_predicted_end_s - now if w.batch else 0.0
            q = w.queued_predicted_s + (rem if rem > 0.0 else 0.0)
            cache = w.cache
            nb = cache.match_ready(hashes)
            p = nb * bs
            if p > cap:
                p = cap
            if nb < nh and cache.state(hashes[nb]) == PENDING:  # a pending run follows the ready hit
                pp = cache.match_present(hashes) * bs
                if pp > cap:
                    pp = cap
            else:
                pp = p
            C = w.degree
            if p != last_p or w.cost_model is not wcm:  # the worker's own GPU type
                wcm = w.cost_model
                last_p = p
                A, B = wcm.split_s(L - p, p)
            s = A + B / C
            el = is_eligible(w, req)
            total_q += q
            if el:
                mask[wid] = True
                num_eligible += 1
                if C < c_min:
                    c_min = C
                extra.append((wid, C, s, A, B) if wcm is cm else (wid, C, s, *cm.split_s(L - p, p)))
                if q < min_q:
                    min_q = q
                if p > max_hit:
                    max_hit = p
            cb = cache.capacity_blocks
            ids.append(wid)
            rows.append((1.0, 1.0 if el else 0.0, C, 0.0 if w.state == active else 1.0, q, p, s, q + s, len(w.queue),
                         w.num_queued_new_tokens, len(cache) / cb if cb else 1.0, pp))
        if rows:
            W[ids] = rows
        for wid, C, s, A, B in extra:
            x = C * s - c_min * (A + B / c_min)
            X[wid, 0] = x if x > 0.0 else 0.0
        t0 = now - RECENT_RATE_WINDOW_S
        if t0 < 0.0:
            t0 = 0.0
        span = now - t0
        num_recent = self._num_arrivals_in(t0, now)
        # clipped to the CONTEXT_FEATURES bounds like every other feature (a window longer than
        # TIME_BOUND_S, or a burst of arrivals within a microsecond, left the observation space)
        rate = num_recent / span if span > 0 else 0.0
        end_high, rate_high = self._c_high
        ctx[:] = (min(max(self._window_end_s - now, 0.0), end_high), min(rate, rate_high))
        R[:] = (L, sim.ttft_slo_s(req.request_id), cm.service_time_s(self._min_degree, L, 0), max_hit,
                now - req.arrival_time_s, sim._num_routings[req.request_id])
        P[:] = (num_eligible, self._acct.n, total_q, min_q if num_eligible else 0.0, sim.epoch)
        np.minimum(W, self._w_high, out=W)
        np.minimum(R, self._r_high, out=R)
        np.minimum(P, self._p_high, out=P)
        np.minimum(X, TIME_BOUND_S, out=X)
        return self._with_faults({"workers": W, "request": R, "pool": P, "workers_extra": X, "context": ctx})

    def _num_arrivals_in(self, t0: float, t1: float) -> int:
        """Number of the episode's arrivals in ``(t0, t1]`` for non-decreasing ``t0`` and ``t1``
        within an episode: two cursors into the sorted arrival times that only move forward
        (the same count as two ``searchsorted(..., side="right")`` calls)."""
        arr = self._arrivals_list
        n = len(arr)
        hi = self._arrival_cursor_hi
        while hi < n and arr[hi] <= t1:
            hi += 1
        lo = self._arrival_cursor_lo
        while lo < hi and arr[lo] <= t0:
            lo += 1
        self._arrival_cursor_lo, self._arrival_cursor_hi = lo, hi
        return hi - lo

    def _with_faults(self, obs: dict) -> dict:
        if self.observe_faults:
            obs["faults"] = fault_flags(self.sim, self.max_num_workers)
        return obs


def _fault_space(max_num_workers: int, observe_faults: bool) -> dict:
    """The optional ``"faults"`` observation entry: per worker slot (down, degraded, rebuilding)
    flags in {0, 1} (``envs.fault_features.fault_flags``); absent unless ``observe_faults``, so the
    default observation space (and checkpoints trained on it) is unchanged."""
    if not observe_faults:
        return {}
    return {"faults": spaces.Box(0.0, 1.0, (max_num_workers, len(FAULT_OBSERVATION_FEATURES)), dtype=np.float32)}
