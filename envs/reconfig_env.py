"""Gymnasium environment for cluster-level reconfiguration (paper §6): one step per observation
window; the action is a no-op, one split or one merge (``action_mode="operation"``) or a target
composition of the pool that the environment moves towards (``action_mode="target"``)."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.accounting import EpisodeAccounting
from envs.episodes import PickleBeforeReset, check_env_arguments, nonempty_windows, reset_options
from envs.fault_features import FAULT_OBSERVATION_FEATURES, fault_flags
from envs.planning.capacity import CapacityCache, CapacityTable, ProfileConfig
from envs.planning.composition import degree_counts, enumerate_compositions, pool_over_degrees
from envs.planning.defaults import DECISION_WINDOW_S, DEFAULT_TARGET_DEGREES
from envs.planning.operations import composition_distance, operations_towards, projected_degree_counts
from envs.routing_env import COUNT_BOUND, TIME_BOUND_S, TOKEN_BOUND, _fault_space, check_render_mode, discrete_action
from envs.sim import Calibration, PoolConfig, SimConfig, Simulator, WorkerState, Workload
from envs.sim.reconfig import Operation, apply_operation, eligible_operations
from envs.workloads import build_workload

RECONFIG_WORKER_FEATURES: tuple[tuple[str, float], ...] = (
    ("present", 1.0),
    ("degree", 64.0),                      # CP degree [GPUs]
    ("is_active", 1.0),
    ("is_reconfiguring", 1.0),             # DRAINING or SWITCHING (paper §6), or REBUILDING after a fault
    ("outstanding_work_s", TIME_BOUND_S),  # q_w [s]
    ("num_queued_requests", COUNT_BOUND),
    ("kv_usage", 1.0),                     # share of KV blocks in use
)
WINDOW_FEATURES: tuple[tuple[str, float], ...] = (
    ("arrival_rate_rps", COUNT_BOUND),          # arrivals in the last window / window length
    ("mean_prompt_tokens", TOKEN_BOUND),        # over the last window's arrivals [tokens]
    ("long_request_fraction", 1.0),             # share of arrivals with L > long_request_tokens
    ("token_rate_per_s", TOKEN_BOUND),          # prompt tokens arriving per second [tokens/s]
    ("mean_ttft_s", TIME_BOUND_S),              # of requests finished in the last window [s]
    ("slo_attainment_token_weighted", 1.0),     # of requests finished in the last window
    ("num_requests_in_system", COUNT_BOUND),
    ("total_outstanding_work_s", TIME_BOUND_S),  # sum of q_w [s]
    ("num_operations_in_flight", COUNT_BOUND),
    ("epoch", COUNT_BOUND),
)
#: Appended to ``WINDOW_FEATURES`` with ``capacity_features=True`` (what the heuristic
#: controller, ``baselines.controller.ReconfigController``, decides on, and more), then one
#: ``worker_capacity_rps_cp<C>`` per supported CP degree C. ``(name, low, high)``.
CAPACITY_WINDOW_FEATURES: tuple[tuple[str, float, float], ...] = (
    ("arrival_rate_trend_rps", -COUNT_BOUND, COUNT_BOUND),  # this window's arrival rate minus the previous one's
    ("prefix_hit_share", 0.0, 1.0),                        # cached / prompt tokens of requests finished in the window
    ("capacity_rps", 0.0, COUNT_BOUND),                    # profiled capacity of the current composition [req/s]
    ("load", 0.0, 100.0),                                  # arrival rate / capacity_rps
    ("capacity_rps_after_best_split", 0.0, COUNT_BOUND),   # best eligible split's composition (0: none eligible)
    ("capacity_rps_after_best_merge", 0.0, COUNT_BOUND),   # best eligible merge's composition (0: none eligible)
    ("time_since_last_operation_s", 0.0, TIME_BOUND_S),    # since the last split/merge started (or the episode start)
)
#: Appended to the window vector with ``history_features=True`` (after the capacity features):
#: what the episode has shown so far, so that a policy can tell the traffic of this episode (its
#: mix and rate levels, which decide the best fixed composition in hindsight) from one window's
#: noise, and how the last two windows differ. ``(name, low, high)``.
HISTORY_WINDOW_FEATURES: tuple[tuple[str, float, float], ...] = (
    ("episode_arrival_rate_rps", 0.0, COUNT_BOUND),          # arrivals since reset / elapsed time [req/s]
    ("episode_long_request_fraction", 0.0, 1.0),              # share of the arrivals since reset that are long
    ("episode_token_rate_per_s", 0.0, TOKEN_BOUND),           # prompt tokens since reset / elapsed time [tokens/s]
    ("previous_arrival_rate_rps", 0.0, COUNT_BOUND),         # the window before the last one [req/s]
    ("previous_long_request_fraction", 0.0, 1.0),             # the window before the last one
    ("max_window_arrival_rate_rps", 0.0, COUNT_BOUND),       # highest window arrival rate since reset [req/s]
    ("max_window_long_request_fraction", 0.0, 1.0),           # highest window long-request share since reset
    ("elapsed_s", 0.0, TIME_BOUND_S),                         # simulated time since reset [s]
)


#: Per candidate composition in ``action_mode="target"`` (the ``"targets"`` observation, one row
#: per menu entry). ``(name, high)``.
TARGET_FEATURES: tuple[tuple[str, float], ...] = (
    ("capacity_rps", COUNT_BOUND),       # profiled capacity of the composition for the window's mix [req/s]
    ("load", 100.0),                     # window arrival rate / capacity_rps
    ("distance_share", 2.0),             # GPU-level distance from the projected composition / pool GPUs
    ("is_projected", 1.0),               # the pool is (or will be, once in-flight operations commit) this composition
    ("is_last_action", 1.0),             # the previous step chose this composition
)
#: 0/1 flags of the observation, per key: never normalised (``policies.reconfig.flag_normalize``).
OBSERVATION_FLAGS: dict[str, tuple[str, ...]] = {
    "workers": ("present", "is_active", "is_reconfiguring"),
    "targets": ("is_projected", "is_last_action"),
}


def observation_flag_columns(observation_space) -> dict[str, tuple[int, ...]]:
    """``{key: last-axis column indices}`` of the 0/1 flags in a :class:`PrefillReconfigEnv`
    observation space (:data:`OBSERVATION_FLAGS`, and every column of ``"faults"``), for the keys
    it has."""
    names = {"workers": [n for n, _ in RECONFIG_WORKER_FEATURES], "targets": [n for n, _ in TARGET_FEATURES],
             "faults": list(FAULT_OBSERVATION_FEATURES)}
    flags = {**OBSERVATION_FLAGS, "faults": tuple(FAULT_OBSERVATION_FEATURES)}
    return {key: tuple(names[key].index(f) for f in flags[key]) for key in observation_space.spaces if key in flags}



def target_menu(pool: PoolConfig, degrees: Sequence[int]) -> list[str]:
    """The target compositions of ``action_mode="target"``: every composition of ``pool``'s GPUs
    over ``degrees`` that fits its topology (``envs.planning.composition.enumerate_compositions``),
    most large-degree workers first; e.g. 40 GPUs in nodes of 8 over (2, 4): ``cp4x10``,
    ``cp4x9,cp2x2``, ..., ``cp2x20`` (11), over (2, 4, 8): 36.

    Raises:
        ValueError: when a degree is not supported by the pool or no composition exists.
    """

    degrees = tuple(sorted({int(d) for d in degrees}))
    bad = [d for d in degrees if d not in pool.supported_degrees]
    if not degrees or bad:
        raise ValueError(f"target_degrees {list(degrees)}: expected a non-empty subset of the pool's supported degrees "
                         f"{list(pool.supported_degrees)}")
    restricted = pool_over_degrees(pool, degrees)
    menu = enumerate_compositions(restricted) if restricted is not None else []
    if not menu:
        raise ValueError(f"no composition of {pool.num_gpus} GPUs over CP degrees {list(degrees)} fits the pool")
    return menu


def observation_profile_config():
    """The ``envs.planning.capacity.ProfileConfig`` of the capacity observation: coarser than the
    controller's (mixes within total-variation distance 0.3 share a profile, no re-profiling,
    7 bisection steps: 1 % of the throughput bound) so that a training run profiles a few dozen
    mixes instead of one per window; the observation is an input to a learned policy, not the
    controller's decision rule."""
    return ProfileConfig(mix_tolerance=0.3, refine_max_mixes=0, num_bisection_steps=7)


def _check_number(name: str, value, low: float, strict: bool) -> None:
    """Raises ValueError naming ``name`` unless ``value`` is a finite real number ``> low``
    (``strict``) or ``>= low``."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and (
        value > low if strict else value >= low)
    if not ok:
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {low:g}, got {value!r}")


def _check_action_mode(action_mode: str, capacity_features: bool, target_degrees, max_operation_gpus_per_window) -> None:
    """Raises ValueError naming the argument on an unknown ``action_mode``, ``"target"`` without
    ``capacity_features``, a GPU budget that is not > 0, or ``target_degrees`` /
    ``max_operation_gpus_per_window`` given with ``"operation"`` (they were silently ignored)."""
    if action_mode not in ("operation", "target"):
        raise ValueError(f"action_mode must be 'operation' or 'target', got {action_mode!r}")
    if action_mode == "target" and not capacity_features:
        raise ValueError("action_mode='target' observes per-composition capacities: set capacity_features=True")
    if max_operation_gpus_per_window is not None and not (
            isinstance(max_operation_gpus_per_window, numbers.Real) and not isinstance(max_operation_gpus_per_window, bool)
            and max_operation_gpus_per_window > 0):
        raise ValueError(f"max_operation_gpus_per_window must be a number > 0 [GPUs], got {max_operation_gpus_per_window!r}")
    if target_degrees is not None and (isinstance(target_degrees, (str, bytes)) or not hasattr(target_degrees, "__iter__")
                                       or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                                  for d in target_degrees)):
        # a string "24" was read as the degrees 2 and 4
        raise ValueError(f"target_degrees must be a sequence of integer CP degrees, e.g. [2, 4], got {target_degrees!r}")
    if action_mode == "operation":
        for name, value in (("target_degrees", target_degrees),
                            ("max_operation_gpus_per_window", max_operation_gpus_per_window)):
            if value is not None:
                raise ValueError(f"{name} applies to action_mode='target' only (got {value!r} with "
                                 "action_mode='operation')")


def check_operation_budget(pool, compositions: list[str], max_operation_gpus_per_window: float) -> None:
    """Refuses a GPU budget per window below the largest single operation a move between the
    target ``compositions`` (or away from ``pool.composition``) can need: splitting or forming a
    worker of the largest CP degree takes that many GPUs, so a smaller budget never starts it and
    those compositions are silently unreachable.

    Raises:
        ValueError: naming ``max_operation_gpus_per_window`` and the minimum [GPUs].
    """
    largest = max(d for c in (*compositions, pool.composition) for d, n in degree_counts(c, pool).items() if n > 0)
    if max_operation_gpus_per_window < largest:
        raise ValueError(f"max_operation_gpus_per_window must be >= {largest} (the GPUs of one split or merge of a "
                         f"CP-{largest} worker, the largest degree of the target menu and the initial composition), "
                         f"got {max_operation_gpus_per_window:g}; a smaller budget can never start those operations")


def candidate_operations(pool: PoolConfig) -> list[tuple[str, int, int]]:
    """Every split/merge the pool topology allows, as ``(kind, degree_before, first_gpu)``:
    a split of a degree-2C worker at ``f`` (aligned to 2C, inside one node), a merge of the
    degree-C siblings at ``f`` and ``f + C``. The order is fixed (it is the action index - 1)."""
    degs = set(pool.supported_degrees)
    out = []
    for kind in ("split", "merge"):
        for d in sorted(degs):
            if kind == "split" and (d // 2) not in degs or d < 2 and kind == "split":
                continue
            if kind == "merge" and 2 * d not in degs:
                continue
            size = d if kind == "split" else 2 * d
            for f in range(0, pool.num_gpus - size + 1, size):
                try:
                    pool.check_group(size, f)
                except ValueError:
                    continue
                out.append((kind, d, f))
    return out


class PrefillReconfigEnv(PickleBeforeReset, gym.Env):
    """Choose, once per observation window, whether to split or merge one CP worker.

    ## Description

    The routing of every request is done by an inner heuristic router (default: the
    Vertumnus router, ``baselines.registry`` ``"vertumnus-router"``); this environment decides the
    worker composition (paper §6): every ``decision_window_s`` simulated seconds (paper: 20 s) the agent
    may start one split (a degree-2C worker into two degree-C workers) or one merge (two
    sibling degree-C workers into one degree-2C worker), which then runs the drain / switch /
    commit protocol of ``envs.sim.reconfig`` as simulation events. GPU count is preserved.

    ## Action Space

    ``Discrete(1 + K)``: 0 = no-op, ``k >= 1`` = the ``(k-1)``-th entry of
    :func:`candidate_operations` (every topology-compatible split/merge of the pool). The mask
    (:meth:`action_masks`) allows the no-op and the operations that
    ``envs.sim.reconfig.eligible_operations`` allows now (the workers exist with that degree and
    are ACTIVE). An ineligible action (masked out) is replaced by the no-op and penalised by
    ``invalid_action_penalty``; ``info["invalid_action"]`` flags it.

    With ``action_mode="target"``: ``Discrete(K)`` over :func:`target_menu` (every composition of
    the pool over ``target_degrees``, listed in :attr:`target_compositions`). Each step the
    environment plans the operations towards the chosen composition with
    ``envs.planning.operations.operations_towards`` (paper §6 ranking: shortest predicted drain,
    then least KV-reconciliation traffic; in-flight operations counted as done) within
    ``max_operation_gpus_per_window`` GPUs and starts them; choosing the composition the pool
    already is (or is heading to) starts nothing, so "go to X and stay" is one repeated action.
    Every composition is reachable by splits and merges, so the mask allows all of them.

    In both modes a Python or numpy integer and an integer array of shape ``()`` or ``(1,)``
    (SB3's ``predict``) are accepted; anything that is not an element of the action space (a
    float such as ``1.7`` or ``1.0``, a bool, a string, an integer outside ``[0, n)``) raises
    ``ValueError`` naming the action and the space (:func:`envs.routing_env.discrete_action`),
    also after the episode ended.

    ## Observation Space

    ``Dict``: ``"workers"`` ``(max_num_workers, 7)`` (``RECONFIG_WORKER_FEATURES``: present,
    degree [GPUs], ACTIVE, reconfiguring — DRAINING, SWITCHING or REBUILDING —, outstanding work
    [s], queued requests, KV usage; row = worker id) and ``"window"`` ``(10,)``
    (``WINDOW_FEATURES``: the last window's arrival rate, mean
    length, long-request fraction, token rate, TTFT and SLO attainment of finished requests,
    requests in the system, outstanding work, operations in flight, epoch) — physical units,
    clipped to the documented bounds, all >= 0. With ``capacity_features=True`` the window
    vector also holds ``CAPACITY_WINDOW_FEATURES`` (rate trend — the only signed entry —,
    prefix-hit share, profiled capacity and load of the current composition, capacity of the
    compositions after the best eligible split and merge, time since the last operation) and
    the profiled per-worker capacity of every supported CP degree (``7 + len(supported_degrees)``
    more entries); with ``history_features=True`` it then holds the 8 ``HISTORY_WINDOW_FEATURES``
    (episode-so-far arrival rate [req/s], long-request share and token rate [tokens/s], the
    previous window's rate and long share, the highest window rate and long share so far, elapsed
    time [s]; all since ``reset``, the previous window's entries 0 at ``reset``). Capacities come from a
    :class:`envs.planning.capacity.CapacityTable` (paper §6 capacity profiling, by simulation
    under the TTFT SLO) for the window's length mix net of the mean prefix hit. Each episode
    starts a new table (a table's reference mixes follow the order in which it met them, so a
    table kept across episodes made ``reset(seed=s)`` observe other capacities after other
    episodes); its profiles are memoised in the environment's ``capacity_cache``
    (:class:`envs.planning.capacity.CapacityCache`, kept across episodes), so a mix is still profiled
    once per environment. A ``capacity_table`` passed in is used as is by every episode (shared,
    e.g. by the environments of one training run; its observations then depend on the episodes
    it served before). With ``action_mode="target"`` (which needs
    the capacity observation) the ``"targets"`` key ``(K, 5)`` (``TARGET_FEATURES``) gives per
    menu composition its profiled capacity and load at the window's rate and mix, its GPU-level
    distance from the projected composition (``envs.planning.operations.composition_distance``
    over the pool's GPUs), whether the pool is (heading to) it and whether the last step chose it.
    With ``observe_faults=True`` the ``"faults"`` key ``(max_num_workers, 3)`` adds per worker slot
    the flags (down, degraded, rebuilding) in ``{0, 1}`` of ``PrefillRoutingEnv``
    (:func:`envs.fault_features.fault_flags`); absent by default.

    ## Rewards

    ``time_in_system`` (as ``PrefillRoutingEnv``): minus the time-in-system integral over the
    window, each request also charged once (when first dispatched) its wait before dispatch and
    the constant hand-off + first-decode terms, so the episode sum is ``-Σ TTFT`` exactly
    (without penalties), times ``reward_scale``. ``slo_miss_tokens``: minus the prompt tokens of
    requests that finished above their SLO in the window divided by the episode's mean prompt
    length (unfinished requests charged at the end).

    ## Starting State

    ``reset`` picks an episode window with ``self.np_random`` (or ``options["window_index"]``)
    and a simulator seed (or ``options["sim_seed"]``), builds the simulator on the configured
    pool and advances one observation window under the inner router. Any other ``options`` key,
    or a value that is not an integer (``window_index`` in range, ``sim_seed`` >= 0), is a
    ValueError naming the key (:func:`envs.episodes.reset_options`).

    ## Episode End

    The episode ends at the first window after which the simulation has stopped.
    ``truncated=True`` (and ``terminated=False``) when ``SimConfig.horizon_s`` stopped it while
    work remained: a request not yet routed (its arrival after the horizon, or parked) or a
    routed request unfinished — a learner should bootstrap there. ``terminated=True`` (and
    ``truncated=False``) only at a true end: every request finished or was rejected as
    unroutable (:meth:`envs.accounting.EpisodeAccounting.episode_end`). Stepping after the end
    is a no-op that repeats these flags.

    ## Information

    ``reset`` and every ``step`` (also after the end) return an ``info`` dict with the same keys:

    * ``sim_time_s``: the end of the observation window just simulated = the time of the next
      decision (:attr:`decision_time_s`) [s];
    * ``window_start_s``: the start of that window [s] (0 at ``reset``; after the end, when
      nothing is simulated, ``sim_time_s``);
    * ``invalid_action``: whether this step's action was ineligible (penalised; False at
      ``reset`` and after the end, where the action is ignored);
    * ``num_invalid_actions``, ``num_operations``: counts since ``reset`` of ineligible actions
      and of the splits/merges started;
    * ``window_index``: index of the episode window in ``workloads``;
    * ``composition``: the pool's current workers as ``(CP degree [GPUs], first GPU)`` pairs,
      in GPU order.

    ## Arguments

    Args:
        workloads: episode windows (default: the ``phases`` synthetic workload, seed 0).
        config: simulator configuration (default ``SimConfig()``).
        calibration: cost model (default: the config's or the shipped one).
        make_router: zero-argument factory of the inner :class:`~envs.sim.Router`, required
            (``gymnasium.make("cpgym/PrefillReconfig-v0")`` and :func:`baselines.envs.make_reconfig_env`
            give the Vertumnus router, ``baselines.envs.vertumnus_inner_router``); a router with an ``attach(sim)``
            method gets each episode's simulator before ``reset`` (e.g.
            :class:`policies.joint.LearnedRouter`).
        decision_window_s: observation / decision window [s] (default
            :data:`envs.planning.defaults.DECISION_WINDOW_S`, paper §6: 20 s).
        reward: ``"time_in_system"`` or ``"slo_miss_tokens"``.
        reward_scale: multiplies the reward (default 0.01: an episode is thousands of
            request-seconds).
        invalid_action_penalty: subtracted for an ineligible action (default 1.0).
        long_request_tokens: length above which a request counts as long [tokens] (default
            8192: the Mooncake traces' 8k split, see ``shared/data/traces/SOURCES.md``).
        observe_faults: add the ``"faults"`` observation key (see Observation Space; default
            False: the observation of the v0 checkpoints).
        capacity_features: add the capacity observation (see Observation Space; default
            False: the observation of the v0 checkpoints).
        history_features: add the episode-so-far observation (see Observation Space; default
            False: the observation of the checkpoints trained before it).
        capacity_table: the ``CapacityTable`` every episode profiles with, shared as is (default: a
            new one per episode with :func:`observation_profile_config`, created on first use).
        action_mode: ``"operation"`` (no-op / one split / one merge; the v0 checkpoints) or
            ``"target"`` (a target composition; needs ``capacity_features``).
        target_degrees: CP degrees of the target menu (default :data:`envs.planning.defaults.DEFAULT_TARGET_DEGREES`,
            restricted to the pool's supported degrees); ``action_mode="target"`` only.
        max_operation_gpus_per_window: GPU budget of the operations started in one step of
            ``action_mode="target"`` (default: the whole pool); ``action_mode="target"`` only; at
            least the largest CP degree of the menu and the initial composition (one operation's
            GPUs), else ValueError.
        render_mode: ``None`` (Gymnasium's convention; no rendering is implemented:
            ``metadata["render_modes"]`` is empty).
        window_s: deprecated spelling of ``decision_window_s`` (one release; DeprecationWarning).

    Raises:
        ValueError: naming the argument, on a window, reward scale or penalty that is not a
            finite number (> 0, > 0, >= 0), a bad reward, ``long_request_tokens`` that is not an
            integer >= 0, a ``make_router`` that is not callable, a bad action mode or target
            menu, ``target_degrees`` or ``max_operation_gpus_per_window`` given (not ``None``)
            with ``action_mode="operation"``, a ``max_operation_gpus_per_window`` below one
            operation of the menu (:func:`check_operation_budget`), a ``render_mode`` that is not
            ``None``, an ``observe_faults``, ``capacity_features`` or ``history_features`` that is
            not a bool, ``workloads``, ``config`` or ``calibration`` not of its documented type
            (:func:`envs.episodes.check_env_arguments`), or empty workloads.

    ## Version History

    * v0: initial version (cpgym 0.1.0); ``capacity_features`` added; ``action_mode="target"``
      added (the default stays ``"operation"``); ``history_features`` added (default off).
    * v0: an action that is not an element of the action space raises ``ValueError`` (an
      integer out of range was a penalised no-op, ``1.7`` truncated to 1); masked actions are
      still penalised no-ops. ``render_mode`` argument (``None`` only).
    * v0: a ``max_operation_gpus_per_window`` smaller than the largest CP degree of the target
      menu and the initial composition raises ``ValueError`` (the operations it could never start
      left their compositions silently unreachable).
    * v0 (cpgym 0.2): ``pickle`` after ``reset()`` raises a ``TypeError`` saying what to do
      instead (the pickle could not be loaded: SimPy's bound event classes); ``copy.deepcopy``
      continues the episode (:class:`envs.episodes.PickleBeforeReset`).
    * v0 (cpgym 0.2): an episode whose run ends within ``reset``'s window earns that window's
      reward at its first (and last) step (it returned 0, losing ``-Σ TTFT``); the action of that
      step is ignored.
    * v0 (cpgym 0.2): with ``capacity_features`` and no ``capacity_table`` argument each episode
      profiles with a new table (profiles memoised across episodes in ``capacity_cache``), so
      ``reset(seed=s)`` gives the same observations whatever episodes ran before (the table kept
      across episodes made them depend on the mixes it had met).
    * v0: ``window_s`` renamed ``decision_window_s`` (attribute too); ``window_s=`` is
      still accepted, with a ``DeprecationWarning``, for one release.
    """

    metadata = {"render_modes": []}

    def __init__(self, workloads: Workload | Sequence[Workload] | None = None, config: SimConfig | None = None,
                 calibration: Calibration | None = None, make_router: Callable | None = None,
                 decision_window_s: float = DECISION_WINDOW_S,
                 reward: str = "time_in_system", reward_scale: float = 0.01, invalid_action_penalty: float = 1.0,
                 long_request_tokens: int = 8192, observe_faults: bool = False, capacity_features: bool = False,
                 history_features: bool = False, capacity_table=None, action_mode: str = "operation",
                 target_degrees: Sequence[int] | None = None,
                 max_operation_gpus_per_window: float | None = None, render_mode: str | None = None,
                 window_s: float | None = None) -> None:
        super().__init__()
        if window_s is not None:  # the earlier spelling, kept for one release
            warnings.warn("PrefillReconfigEnv(window_s=...) is deprecated and will be removed in the next release; "
                          "use decision_window_s=...", DeprecationWarning, stacklevel=2)
            decision_window_s = window_s
        check_render_mode(render_mode, self.metadata["render_modes"])
        check_env_arguments(config, calibration, observe_faults=observe_faults, capacity_features=capacity_features,
                            history_features=history_features)
        self.render_mode = render_mode
        self.observe_faults = bool(observe_faults)  # adds the "faults" key (envs.fault_features.fault_flags)
        # finite numbers: an infinite window ended every episode at reset with zero rates; an
        # infinite scale or penalty gave infinite rewards
        _check_number("decision_window_s", decision_window_s, 0.0, strict=True)
        if reward not in ("time_in_system", "slo_miss_tokens"):
            raise ValueError(f"reward must be 'time_in_system' or 'slo_miss_tokens', got {reward!r}")
        _check_number("reward_scale", reward_scale, 0.0, strict=True)
        _check_number("invalid_action_penalty", invalid_action_penalty, 0.0, strict=False)
        if isinstance(long_request_tokens, bool) or not isinstance(long_request_tokens, numbers.Integral) \
                or long_request_tokens < 0:
            raise ValueError(f"long_request_tokens must be an integer >= 0 [tokens], got {long_request_tokens!r}")
        if not callable(make_router):  # envs imports no baselines: the inner router is given
            raise ValueError(f"make_router must be a zero-argument factory of routers (e.g. "
                             f"baselines.envs.vertumnus_inner_router), got {make_router!r}")
        if target_degrees is not None and not isinstance(target_degrees, (str, bytes)) and hasattr(target_degrees, "__iter__"):
            target_degrees = tuple(target_degrees)  # a generator was used up by the check and then read as empty
        _check_action_mode(action_mode, capacity_features, target_degrees, max_operation_gpus_per_window)
        if workloads is None:
            workloads = [build_workload(name="phases", seed=0)]
        self.windows = nonempty_windows(workloads)
        self.config = config or SimConfig()
        self.calibration = calibration or Calibration.resolve(self.config.calibration_path)
        self.make_router = make_router
        self.decision_window_s = float(decision_window_s)
        self.reward_kind = reward
        self.reward_scale = float(reward_scale)
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.long_request_tokens = int(long_request_tokens)
        pool = self.config.pool
        self.candidates = candidate_operations(pool)
        self.max_num_workers = pool.max_num_workers
        self._wid = pool.worker_id_for
        n = self.max_num_workers
        self._w_high = np.array([b for _, b in RECONFIG_WORKER_FEATURES], dtype=np.float32)
        self.capacity_features = bool(capacity_features)
        if capacity_table is not None:
            if not isinstance(capacity_table, CapacityTable):  # it failed only at the first capacity observation
                raise ValueError(f"capacity_table must be an envs.planning.capacity.CapacityTable or None, got "
                                 f"{type(capacity_table).__name__} {capacity_table!r:.60}")
        self.capacity_table = capacity_table
        self._own_tables = capacity_table is None  # a new table per episode (class docstring, Observation Space)
        #: Memo of the capacity profiles of the episodes' own tables (created on first use).
        self.capacity_cache = None
        self.degrees = tuple(sorted(pool.supported_degrees))
        g_low = [0.0] * len(WINDOW_FEATURES)
        g_high = [b for _, b in WINDOW_FEATURES]
        if self.capacity_features:
            g_low += [lo for _, lo, _ in CAPACITY_WINDOW_FEATURES] + [0.0] * len(self.degrees)
            g_high += [hi for _, _, hi in CAPACITY_WINDOW_FEATURES] + [COUNT_BOUND] * len(self.degrees)
        self.history_features = bool(history_features)
        if self.history_features:
            g_low += [lo for _, lo, _ in HISTORY_WINDOW_FEATURES]
            g_high += [hi for _, _, hi in HISTORY_WINDOW_FEATURES]
        self._g_low = np.array(g_low, dtype=np.float32)
        self._g_high = np.array(g_high, dtype=np.float32)
        self.action_mode = action_mode
        spaces_ = {
            "workers": spaces.Box(0.0, np.broadcast_to(self._w_high, (n, len(self._w_high))).copy(), dtype=np.float32),
            "window": spaces.Box(self._g_low.copy(), self._g_high.copy(), dtype=np.float32),
            **_fault_space(n, observe_faults),
        }
        if action_mode == "target":
            if target_degrees is None:
                target_degrees = [d for d in DEFAULT_TARGET_DEGREES if d in pool.supported_degrees]
            self.target_compositions = target_menu(pool, target_degrees)

            self._target_counts = [degree_counts(c, pool) for c in self.target_compositions]
            self.max_operation_gpus_per_window = float(max_operation_gpus_per_window or pool.num_gpus)
            check_operation_budget(pool, self.target_compositions, self.max_operation_gpus_per_window)
            k = len(self.target_compositions)
            self._t_high = np.array([b for _, b in TARGET_FEATURES], dtype=np.float32)
            spaces_["targets"] = spaces.Box(0.0, np.broadcast_to(self._t_high, (k, len(self._t_high))).copy(),
                                            dtype=np.float32)
            self.action_space = spaces.Discrete(k)
        else:
            self.target_compositions = []
            self.action_space = spaces.Discrete(1 + len(self.candidates))
        self.observation_space = spaces.Dict(spaces_)
        self._last_action = -1
        self.sim: Simulator | None = None
        self.window_index = -1

    @property
    def decision_time_s(self) -> float:
        """Simulated time of the next decision (the end of the last observation window) [s]."""
        return self._t

    # ------------------------------------------------------------------------------------------
    def _operation(self, k: int) -> Operation | None:
        kind, d, f = self.candidates[k - 1]
        ws = self.sim.workers
        if kind == "split":
            wid = self._wid(f)
            w = ws.get(wid)
            return Operation.split(wid) if w is not None and w.degree == d and w.first_gpu == f else None
        a, b = self._wid(f), self._wid(f + d)
        wa, wb = ws.get(a), ws.get(b)
        if wa is None or wb is None or wa.degree != d or wb.degree != d:
            return None
        return Operation.merge(a, b)

    def action_masks(self) -> np.ndarray:
        """Boolean mask of shape ``(1 + K,)``: the no-op and the operations eligible now; with
        ``action_mode="target"`` shape ``(K,)``, all True (every composition is reachable)."""
        if self.action_mode == "target":
            return np.ones(self.action_space.n, dtype=bool)
        mask = np.zeros(self.action_space.n, dtype=bool)
        mask[0] = True
        if self.sim is None or self._ended:
            return mask
        eligible = set(eligible_operations(self.sim))
        if not eligible:
            return mask
        for k in range(1, self.action_space.n):
            op = self._operation(k)
            if op is not None and op in eligible:
                mask[k] = True
        return mask

    # ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        idx, sim_seed = reset_options(options, len(self.windows))
        if idx is None:
            idx = int(self.np_random.integers(len(self.windows)))
        if sim_seed is None:
            sim_seed = int(self.np_random.integers(2**31 - 1))
        wl = self.windows[idx]
        self.window_index = idx
        if self._own_tables:
            self.capacity_table = None  # the episode's own table, created on first use (_capacity_profiles)
        sim = Simulator(wl, replace(self.config, seed=sim_seed), self.calibration, policy_name="reconfig-env")
        self.sim = sim
        self.router = self.make_router()
        attach = getattr(self.router, "attach", None)
        if attach is not None:  # a router that observes the simulator itself (policies.joint.LearnedRouter)
            attach(sim)
        self.router.reset(sim.view, sim.policy_rng)
        self._acct = EpisodeAccounting(sim)
        sim.finish_listeners.append(self._acct.on_finish)
        sim.finish_listeners.append(self._on_finish_window)
        self._seen = bytearray(wl.num_requests)
        self._total_tokens = sum(r.num_prompt_tokens for r in wl.requests)
        self._mean_tokens = self._total_tokens / wl.num_requests
        self._next_arrival_idx = 0
        self._ended = False
        self._end_flags = (True, False)
        self._num_invalid = 0
        self._num_ops = 0
        self._t = 0.0
        self._last_op_s = 0.0
        self._prev_rate_rps = 0.0
        # history features: arrivals, long arrivals and prompt tokens since reset, the last two
        # windows' (rate, long share), window maxima, and the time they were last updated
        self._hist_counts = [0, 0, 0]
        self._hist_windows = [(0.0, 0.0), (0.0, 0.0)]
        self._hist_max = [0.0, 0.0]
        self._hist_t = -1.0
        self._last_action = -1
        self._run_window()
        # the whole run may fit in the first window: then the first step ends the episode and
        # still earns that window's reward (it was lost: a return of 0 instead of -sum TTFT)
        self._end_reported = False
        return self._observe(), self._info(0.0, False)

    def _on_finish_window(self, sim, batch, _w) -> None:
        now = sim.env.now
        h = self._acct.handoff_s_per_token
        fd = self._acct.first_decode_s
        for req in batch:
            L = req.num_prompt_tokens
            ttft = now - req.arrival_time_s + L * h + fd
            self._fin_n += 1
            self._fin_ttft += ttft
            self._fin_tokens += L
            self._fin_cached_tokens += sim.num_cached_tokens(req.request_id)
            if ttft <= sim.ttft_slo_s(req.request_id):
                self._fin_met_tokens += L

    def _run_window(self) -> None:
        """Advances one observation window with the inner router routing every decision."""
        sim = self.sim
        self._fin_n = 0
        self._fin_ttft = 0.0
        self._fin_tokens = 0
        self._fin_met_tokens = 0
        self._fin_cached_tokens = 0
        end = self._t + self.decision_window_s
        router = self.router
        view = sim.view
        acct = self._acct
        seen = self._seen
        while True:
            req = sim.run_until_decision(until_s=end)
            if req is None:
                break
            rid = req.request_id
            if not seen[rid]:
                seen[rid] = 1
                acct.admit(req, sim.env.now)
            wid = router.route(req, view)
            sim.decide(wid)
            router.on_dispatch(req, wid, view)
        self._t = end
        self._ended = sim.done

    def step(self, action):
        """Applies ``action`` (the no-op or a split/merge operation; with ``action_mode="target"``
        a target composition, approached with planned operations), runs one observation window
        and returns Gymnasium's ``(obs, reward, terminated, truncated, info)`` (reward: class
        docstring). After the episode ended a step is a no-op repeating the end flags.

        Raises:
            RuntimeError: before the first :meth:`reset`.
        """
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        k = discrete_action(action, self.action_space.n)
        if self._end_reported:  # stepping after the end: a no-op repeating the end flags (an empty window)
            return self._observe(), 0.0, *self._end_flags, self._info(self._t, False)
        invalid = False
        start = self._t
        if not self._ended:  # else the run ended within reset's window: the action is ignored
            if self.action_mode == "target":
                self._move_towards(k)
            elif k != 0:
                op = self._operation(k)
                if op is None or op not in set(eligible_operations(self.sim)):
                    invalid = True
                    self._num_invalid += 1
                else:
                    apply_operation(self.sim, op)
                    self._num_ops += 1
                    self._last_op_s = self._t
            self._run_window()
        sim = self.sim
        acct = self._acct
        terminated = truncated = False
        if self._ended:
            terminated, truncated, end = acct.episode_end()
            self._end_flags = (terminated, truncated)
            self._end_reported = True
            tis, miss = acct.collect(end)
        else:
            tis, miss = acct.collect(max(self._t, sim.env.now))
        if self.reward_kind == "time_in_system":
            reward = -tis
        else:
            if self._ended:
                miss += self._total_tokens - acct.finished_tokens
            reward = -miss / self._mean_tokens
        reward *= self.reward_scale
        if invalid:
            reward -= self.invalid_action_penalty
        return self._observe(), float(reward), terminated, truncated, self._info(start, invalid)

    def _info(self, window_start_s: float, invalid: bool) -> dict:
        """The ``info`` of ``reset`` and ``step`` (the keys of the class docstring's *Information*)."""
        sim = self.sim
        return {"sim_time_s": self._t, "window_start_s": window_start_s, "invalid_action": invalid,
                "num_invalid_actions": self._num_invalid, "num_operations": self._num_ops,
                "window_index": self.window_index,
                "composition": [(w.degree, w.first_gpu) for w in (sim.workers[i] for i in sim.worker_ids)]}

    def _move_towards(self, k: int) -> None:
        """Starts the operations towards menu composition ``k`` (``action_mode="target"``)."""
        self._last_action = k
        for op in operations_towards(self.sim, self._target_counts[k], max_gpus=self.max_operation_gpus_per_window):
            apply_operation(self.sim, op)
            self._num_ops += 1
            self._last_op_s = self._t

    def _observe(self) -> dict:
        sim = self.sim
        n = self.max_num_workers
        W = np.zeros((n, len(RECONFIG_WORKER_FEATURES)), dtype=np.float32)
        G = np.zeros(len(WINDOW_FEATURES), dtype=np.float32)
        now = sim.env.now
        total_q = 0.0
        for wid in sim.worker_ids:
            w = sim.workers[wid]
            rem = w.step_predicted_end_s - now if w.batch else 0.0
            q = w.queued_predicted_s + (rem if rem > 0.0 else 0.0)
            total_q += q
            cb = w.cache.capacity_blocks
            W[wid] = (1.0, w.degree, w.state == WorkerState.ACTIVE,
                      w.state in (WorkerState.DRAINING, WorkerState.SWITCHING, WorkerState.REBUILDING), q, len(w.queue),
                      len(w.cache) / cb if cb else 1.0)
        # arrivals in (t - window, t]
        reqs = sim.workload.requests
        lo = self._t - self.decision_window_s
        i = self._next_arrival_idx
        cnt = 0
        tok = 0
        long_n = 0
        first = -1
        while i < len(reqs) and reqs[i].arrival_time_s <= self._t:
            if reqs[i].arrival_time_s > lo:
                first = i if first < 0 else first
                cnt += 1
                L = reqs[i].num_prompt_tokens
                tok += L
                long_n += L > self.long_request_tokens
            i += 1
        self._next_arrival_idx = i
        rec = sim.attachments.get("reconfig")
        in_flight = len(rec.in_flight()) if rec is not None else 0
        w = self.decision_window_s
        G[:] = (cnt / w, tok / cnt if cnt else 0.0, long_n / cnt if cnt else 0.0, tok / w,
                self._fin_ttft / self._fin_n if self._fin_n else 0.0,
                self._fin_met_tokens / self._fin_tokens if self._fin_tokens else 1.0,
                self._acct.n, total_q, in_flight, sim.epoch)
        lam = None
        if self.capacity_features:
            lam = self._capacity_profiles(reqs[first:first + cnt] if cnt else [])
            G = np.concatenate([G, self._capacity_observation(lam, cnt / self.decision_window_s)])
        if self.history_features:
            G = np.concatenate([G, self._history_observation(cnt, long_n, tok)])
        np.minimum(W, self._w_high, out=W)
        np.clip(G, self._g_low, self._g_high, out=G)
        obs = {"workers": W, "window": G}
        if self.action_mode == "target":
            obs["targets"] = self._target_observation(lam, cnt / self.decision_window_s)
        if self.observe_faults:
            obs["faults"] = fault_flags(self.sim, self.max_num_workers)
        return obs

    # ------------------------------------------------------------------------------------------
    def _capacity_profiles(self, window_requests) -> dict[int, float]:
        """Per-worker capacity [req/s] of each supported degree for the window's length mix
        (net of the window's mean prefix hit); zeros when the window had no arrivals."""
        if not window_requests:
            return dict.fromkeys(self.degrees, 0.0)
        if self.capacity_table is None:
            if self.capacity_cache is None:
                self.capacity_cache = CapacityCache()
            self.capacity_table = self.capacity_cache.table(self.config, self.calibration, observation_profile_config())
        table = self.capacity_table
        mean_cached = self._fin_cached_tokens / self._fin_n if self._fin_n else 0.0
        shares = table.shares(np.array([r.num_prompt_tokens for r in window_requests], float), mean_cached)
        return {d: table.shares_profile(d, shares).capacity_rps for d in self.degrees}

    def _capacity_observation(self, lam: dict[int, float], rate_rps: float) -> np.ndarray:
        """The ``CAPACITY_WINDOW_FEATURES`` and per-degree capacities (see the class docstring)
        from the per-worker capacities ``lam`` [req/s] of :meth:`_capacity_profiles`."""
        sim = self.sim
        cap = sum(lam[sim.workers[i].degree] for i in sim.worker_ids)
        best_split = best_merge = 0.0
        mask = self.action_masks()
        for k in np.flatnonzero(mask[1:]) + 1:
            kind, d, _ = self.candidates[k - 1]
            if kind == "split":
                best_split = max(best_split, cap - lam[d] + 2 * lam[d // 2])
            else:
                best_merge = max(best_merge, cap - 2 * lam[d] + lam[2 * d])
        trend = rate_rps - self._prev_rate_rps
        self._prev_rate_rps = rate_rps
        hit = self._fin_cached_tokens / self._fin_tokens if self._fin_tokens else 0.0
        feats = [trend, hit, cap, rate_rps / cap if cap > 0 else 0.0, best_split, best_merge, self._t - self._last_op_s]
        return np.array(feats + [lam[d] for d in self.degrees], dtype=np.float32)

    def _history_observation(self, cnt: int, long_n: int, tok: int) -> np.ndarray:
        """The ``HISTORY_WINDOW_FEATURES`` after a window with ``cnt`` arrivals, ``long_n`` of them
        long, ``tok`` prompt tokens; a second observation at the same time (stepping after the
        end) repeats the first."""
        if self._t > self._hist_t:
            self._hist_t = self._t
            h = self._hist_counts
            h[0] += cnt
            h[1] += long_n
            h[2] += tok
            rate, long_share = cnt / self.decision_window_s, long_n / cnt if cnt else 0.0
            self._hist_windows = [self._hist_windows[1], (rate, long_share)]
            self._hist_max = [max(self._hist_max[0], rate), max(self._hist_max[1], long_share)]
        n, n_long, n_tok = self._hist_counts
        t = self._t
        prev_rate, prev_long = self._hist_windows[0]
        return np.array([n / t if t > 0 else 0.0, n_long / n if n else 0.0, n_tok / t if t > 0 else 0.0,
                         prev_rate, prev_long, *self._hist_max, t], dtype=np.float32)

    def _target_observation(self, lam: dict[int, float], rate_rps: float) -> np.ndarray:
        """The ``"targets"`` rows (``TARGET_FEATURES``, one per menu composition)."""
        projected = projected_degree_counts(self.sim)
        gpus = self.config.pool.num_gpus
        T = np.zeros((len(self._target_counts), len(TARGET_FEATURES)), dtype=np.float32)
        for k, counts in enumerate(self._target_counts):
            cap = sum(n * lam[d] for d, n in counts.items())
            dist = composition_distance(projected, counts)
            T[k] = (cap, rate_rps / cap if cap > 0 else 0.0, dist / gpus, dist == 0, k == self._last_action)
        np.minimum(T, self._t_high, out=T)
        return T
