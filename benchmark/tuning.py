"""Per-task tuning of every parameterised heuristic (issue #39, "Baselines tuned as hard as
anything learned"): Optuna TPE over documented log-scale ranges, scored on the task's training
split, chosen on its validation split, with range widening when the choice lands on a bound.

Search (:func:`tune`), one **round** at a time:

1. ``num_trials`` trials of a seeded ``optuna.samplers.TPESampler(seed=seed + round,
   multivariate=True, constant_liar=True)`` study, asked and told in batches of
   :data:`DEFAULT_BATCH_SIZE` trials whatever the backend and the number of workers ``jobs`` (a
   batch's trials are scored in parallel), so the same seed gives the same trials in this process,
   on a local process pool and on Ray. The first trial of round 0 is the policy's default parameters (when inside the
   ranges); the first trial of a later round is the previous round's choice. Each trial's score
   is the **training** score: the mean over the training episodes of each episode's mean TTFT of
   its measured requests (``envs.metrics.summary.measured_summary``), simulated with the task's
   configuration at run seed :data:`SIM_SEED`.
2. The ``top_k`` best distinct training trials, and the round's first trial (the defaults, or the
   previous round's choice) are re-scored on the **validation** split; the lowest validation score
   is the round's choice (ties: the better training score). So a tuned choice is never worse on
   validation than the defaults.
3. A chosen value within ``bound_tol`` (3 %) of its range's width (log scale for log ranges) of
   a bound that is not a hard validity limit is **on the bound**: that bound moves one decade out
   (x10 or /10; a linear range by its width), clipped to the limit, and a new round starts. A
   choice at a hard limit (beta = 1, a threshold at 0 or 1) is recorded as ``at_limit`` and
   widens nothing. At most ``max_rounds`` rounds; every round is recorded.

Nothing of the test split is ever simulated (``tests/benchmark/test_tuning.py`` checks it).

Episodes: a trial runs at most ``max_train_episodes`` training episodes, the same evenly spread
subset every trial (``benchmark.tasks.episodes``' ``max_episodes``: first and last kept); the
default :data:`DEFAULT_MAX_TRAIN_EPISODES` keeps every episode of the conversation tasks (45).

Results: ``benchmark/tuned/<task id, / as __>.json`` (package data: ``{"task", "policies": {NAME:
{"params", "train_mean_ttft_s", "validation_mean_ttft_s", "num_trials", "rounds", "seed", "commit",
"command", ...}}}``, sorted keys; ``benchmark.tuned.load_tuned`` reads ``policies[NAME]["params"]``)
and the search record (every trial's parameters and training score, every validation re-score)
as gzip-compressed JSON, ``policies[NAME]`` of ``results/benchmark/tuning/<task __>.json.gz``.

Search spaces: :data:`TUNABLE`, one entry per policy name; ``vertumnus`` (the paper's full
system) searches the analytic §6 controller's thresholds, windows and gate
(``baselines/controller/config.py``; its parameters go through ``PolicySpec.with_params`` like
the routers').
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from baselines.registry import get_policy
from baselines.runner import run_policy
from benchmark.capacity import task_episodes
from benchmark.dispatch import Dispatcher
from benchmark.protocol import task_capacity_cache, task_history
from benchmark.tasks import Task, get_task
from benchmark.tuned import load_tuned
from envs.metrics.summary import measured_summary
from envs.provenance import git_commit


class ParamRange(NamedTuple):
    """Search range of one parameter.

    Args:
        low, high: the range searched (inclusive).
        log: sample on a log scale (needs ``low > 0``).
        integer: an integer parameter.
        hard_low, hard_high: validity limits (``None``: unbounded): widening never passes them.
        source: where the default and the limits come from.
    """

    low: float
    high: float
    log: bool = True
    integer: bool = False
    hard_low: float | None = None
    hard_high: float | None = None
    source: str = ""

    def check(self, name: str) -> None:
        """Raises ``ValueError`` naming ``name`` if the range is empty, outside its limits, or log
        with a bound <= 0."""
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"{name}: range must be finite with low < high, got [{self.low}, {self.high}]")
        if self.log and self.low <= 0:
            raise ValueError(f"{name}: a log-scale range needs low > 0, got {self.low}")
        if (self.hard_low is not None and self.low < self.hard_low) or \
                (self.hard_high is not None and self.high > self.hard_high):
            raise ValueError(f"{name}: range [{self.low}, {self.high}] is outside the limits "
                             f"[{self.hard_low}, {self.hard_high}]")

    def position(self, value: float) -> float:
        """Where ``value`` lies in the range: 0 at ``low``, 1 at ``high`` (log scale if ``log``)."""
        if self.log:
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)

    def widened(self, side: str) -> ParamRange:
        """The range with bound ``side`` (``"low"``/``"high"``) one decade out (log) or one width out
        (linear), clipped to the hard limit (an integer range's bounds rounded outwards)."""
        lo, hi = self.low, self.high
        if side == "low":
            lo = lo / 10 if self.log else lo - (hi - lo)
            if self.hard_low is not None:
                lo = max(lo, self.hard_low)
            lo = math.floor(lo) if self.integer else lo
        else:
            hi = hi * 10 if self.log else hi + (hi - lo)
            if self.hard_high is not None:
                hi = min(hi, self.hard_high)
            hi = math.ceil(hi) if self.integer else hi
        return self._replace(low=lo, high=hi)

    def at_limit(self, side: str) -> bool:
        """Whether bound ``side`` is the hard limit (cannot widen)."""
        limit = self.hard_low if side == "low" else self.hard_high
        return limit is not None and (self.low if side == "low" else self.high) == limit

    def distribution(self):
        import optuna  # third-party, loaded only by a search (the CLI's parser imports this module)

        """The Optuna distribution of this range."""
        if self.integer:
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log)
        return optuna.distributions.FloatDistribution(float(self.low), float(self.high), log=self.log)


#: Where the controller's knobs are defined (their defaults and validity limits).
_CC = "baselines/controller/config.py ControllerConfig"
_WEIGHT = "a weight of a score; only ratios matter to an argmin/argmax, so one weight of the score stays fixed"

#: Search spaces: policy name -> {parameter: range}. Sources of the defaults: the router's
#: parameter dataclass (named in each ``source``). Weights on [1e-3, 1e3] (six decades around the
#: defaults, widened when hit). A parameter whose validity limit is 0 (lambda, weights) is searched
#: on a log scale from 1e-3: there its term is at most ~0.1 % of the others' (a tie-break), so
#: the limit 0 is approached, and a choice at 1e-3 widens the range to 1e-4, and so on.
#: Fixed (not searched): llm-d ``prefix_weight`` (3) and vllm ``running_weight`` (1), the
#: reference weights of their scale-invariant scores; sglang ``eviction_interval_s`` and
#: ``max_tree_size_blocks`` (the tree's memory bookkeeping, upstream defaults).
#: Policies without knobs (``least-work``, ``prefix-affinity``, ``mooncake-ttft``) have no entry.
#: ``vertumnus`` (the reconfiguration tasks' reference): the controller's documented knobs;
#: fixed: ``split_target_load`` (0.75) and ``merge_max_projected_load`` (0.7), whose validity
#: depends on the searched thresholds (with them fixed, every corner of the box is valid), the
#: router's beta and lambda (paper defaults: a controller search), the look-ahead, profiling and
#: mix-tracking settings (not the §6 rule's).
TUNABLE: dict[str, dict[str, ParamRange]] = {
    "vertumnus-router": {
        "beta": ParamRange(1.0, 1e3, hard_low=1.0,
                           source="paper §5: beta >= 1; default 3 (baselines/vertumnus.py VertumnusParams)"),
        "lambda": ParamRange(1e-3, 1e3, hard_low=0.0,
                             source="paper §5: lambda >= 0; default 1 (baselines/vertumnus.py VertumnusParams); "
                                    "lambda = 0 exactly is the vertumnus-lambda0 policy"),
    },
    "sglang-cache-aware": {
        "cache_threshold": ParamRange(0.0, 1.0, log=False, hard_low=0.0, hard_high=1.0,
                                      source="matched share of the prompt, in [0, 1]; default 0.3 "
                                             "(baselines/industry/sglang.py SGLangParams, sgl-router CLI)"),
        "balance_abs_threshold": ParamRange(1, 4096, integer=True, hard_low=1,
                                            source="in-flight requests, >= 0; default 64 (SGLangParams); searched "
                                                   "from 1 (0 and 1 differ only at a load gap of exactly 1)"),
        "balance_rel_threshold": ParamRange(1.0, 100.0, hard_low=1.0,
                                            source="ratio >= 1; default 1.5 (SGLangParams)"),
    },
    "llm-d": {
        "queue_weight": ParamRange(1e-3, 1e3, hard_low=0.0, source=f"{_WEIGHT}; default 2 (baselines/industry/llmd.py "
                                                                   "LlmdParams, llm-d chart); prefix_weight fixed at 3"),
        "kv_utilization_weight": ParamRange(1e-3, 1e3, hard_low=0.0, source=f"{_WEIGHT}; default 2 (LlmdParams)"),
    },
    "dynamo-kv": {
        "overlap_score_weight": ParamRange(1e-3, 1e3, hard_low=0.0,
                                           source="KvRouterConfig overlap_score_weight >= 0; default 1 "
                                                  "(baselines/industry/dynamo.py DynamoParams); temperature stays 0 "
                                                  "(> 0 samples a worker at random: noise on the same cost)"),
    },
    "vllm-tp4": {
        "waiting_weight": ParamRange(1e-3, 1e3, hard_low=0.0,
                                     source=f"{_WEIGHT}; default 4 (baselines/industry/vllm.py VllmDPParams, vLLM "
                                            "DPLBAsyncMPClient); running_weight fixed at 1"),
    },
    # the paper's system: Vertumnus router (beta 3, lambda 1 fixed: a controller search) + the
    # analytic (gated §6) split/merge controller, baselines/controller/config.py ControllerConfig
    "vertumnus": {
        "split_load": ParamRange(0.75, 2.0, log=False, hard_low=0.75,
                                 source=f"{_CC} split_load, forecast load of the split region; default 0.85; >= "
                                        "split_target_load (0.75, fixed) and > merge_max_projected_load (0.7, fixed); "
                                        "above 1: splits only past capacity"),
        "merge_load": ParamRange(0.005, 0.7, hard_low=0.0, hard_high=0.7,
                                 source=f"{_CC} merge_load, forecast load of the merge region; default 0.5; > 0 and "
                                        "<= merge_max_projected_load (0.7, fixed); near 0: never merges"),
        "k_windows": ParamRange(1, 8, log=False, integer=True, hard_low=1,
                                source=f"{_CC} k_windows, windows a condition must be sustained, integer >= 1; "
                                       "default 2 (paper §6); linear: 8 windows (160 s) is already a phase's length"),
        "gate_horizon_s": ParamRange(6.0, 600.0, hard_low=0.0,
                                     source=f"{_CC} gate_horizon_s, span a move's predicted gain is counted over [s], "
                                            "> 0; default 60 (= min_dwell_s)"),
        "gate_z": ParamRange(0.0, 5.0, log=False, hard_low=0.0,
                             source=f"{_CC} gate_z, half-width of the rate noise band in standard errors, >= 0 (0: no "
                                    "band); default 1.96"),
        "min_dwell_s": ParamRange(1.0, 1000.0, hard_low=0.0,
                                  source=f"{_CC} min_dwell_s, lockout before the opposite move [s], >= 0 (0 disables; "
                                         "below the 20 s decision window it acts as 0); default 60"),
        "trend_horizon_s": ParamRange(1.0, 400.0, hard_low=0.0,
                                      source=f"{_CC} trend_horizon_s, horizon of the forecast rate's trend [s], >= 0 "
                                             "(0 disables); default 40 (= k_windows x decision_window_s)"),
        "long_fraction_merge": ParamRange(0.0, 1.0, log=False, hard_low=0.0, hard_high=1.0,
                                          source=f"{_CC} long_fraction_merge, long-request share of arrivals that "
                                                 "signals a merge at stable load, in [0, 1]; default 0.3"),
        "max_gpu_share_per_window": ParamRange(0.01, 1.0, hard_low=0.0, hard_high=1.0,
                                               source=f"{_CC} max_gpu_share_per_window, share of the pool's GPUs in "
                                                      "operations started per window, in (0, 1]; default 0.5"),
    },
}

#: Parameters a search holds at another stored choice of the same task (policy -> {parameter:
#: (stored policy, its parameter)}): the full system starts from the task's best fixed composition
#: chosen on its training episodes (``tuned:fixed``, ``cpgym benchmark tune fixed``), and its
#: controller's knobs are searched from there (the paper's §6 start from profiled capacity,
#: ``initial_composition="profile"``, only buys capacity, largest degrees first, and cannot reach
#: the mixed pools that win the production day: ``results/README.md`` research log).
FIXED_FROM_TUNED: dict[str, dict[str, tuple[str, str]]] = {
    "vertumnus": {"initial_composition": ("fixed", "composition")},
}

#: Run seed of every tuning simulation (``Task.sim_config(seed)``; the simulator has no
#: prediction noise by default, so an episode is one deterministic sample).
SIM_SEED = 0
#: Trials per round: at least 200 (issue #39) and more than the learned routers' simulated
#: training episodes (:data:`LEARNED_TRAINING_EPISODES`).
DEFAULT_NUM_TRIALS = 200
#: Training episodes per trial (evenly spread; every one of the conversation tasks' 45).
DEFAULT_MAX_TRAIN_EPISODES = 64
#: Trials asked (then told) together: the parallelism available to ``jobs`` workers, fixed so
#: that the trials do not depend on ``jobs`` or the backend.
DEFAULT_BATCH_SIZE = 8
#: Trials re-scored on validation per round.
DEFAULT_TOP_K = 5
#: A choice this close to a bound (fraction of the range, log scale for log ranges) is on it.
BOUND_TOL = 0.03
#: Rounds at most (round 0 plus widenings).
DEFAULT_MAX_ROUNDS = 4
#: Simulated training episodes of the shipped learned routers, for the trial-budget comparison
#: (issue #39: budget >= the learned policy's): the residual PPO router
#: (``policies/checkpoints/routing_conversation_residual``: 61,440 steps, 109 finished episodes
#: in ``episodes.csv``) and the arm selector (``policies/checkpoints/routing_vertumnus_arms``:
#: 48 arms x at most 48 training windows per cell = 2,304 window simulations per cell), and the
#: learned reconfiguration controller (``policies/checkpoints/reconfig_target``, README "Train" and
#: its ``*train_config.json``: on 60 matched-phases training seeds, the per-phase TTFT table of the
#: 36 fixed compositions = 2,160 episode simulations, 60 x (1 + 4 noisy) = 300 demonstration
#: rollouts, and 512 + 1,536 PPO steps at 28.4 / 27.1 steps per episode (``*progress.csv``) = 18 +
#: 57 episodes: 2,535 in all, of which 375 run the controller's own environment).
LEARNED_TRAINING_EPISODES = {"routing_conversation_residual": 109, "routing_vertumnus_arms": 2304,
                             "reconfig_target": 2535}


def search_space(name: str) -> dict[str, ParamRange]:
    """The search space of policy ``name``.

    Raises:
        ValueError: if it has none (listing those that do).
    """
    try:
        return dict(TUNABLE[name])
    except KeyError:
        raise ValueError(f"policy {name!r} has no tunable parameters; tunable policies: {', '.join(TUNABLE)}") from None


def check_space(name: str, space: dict[str, ParamRange] | None = None) -> None:
    """Checks that every range of ``name``'s space is valid and that the policy accepts (builds a
    router for) every corner of it.

    Raises:
        ValueError: naming the parameter or the corner.
    """
    space = search_space(name) if space is None else space
    spec = get_policy(name)
    for p, r in space.items():
        if p not in spec.params:
            raise ValueError(f"{name}: {p!r} is not a parameter of the policy (its parameters: {sorted(spec.params)})")
        r.check(f"{name}.{p}")
    corners = [{}]
    for p, r in space.items():
        corners = [{**c, p: v} for c in corners for v in (r.low, r.high)]
    for c in corners:
        spec.with_params(**{p: int(v) if space[p].integer else float(v) for p, v in c.items()}).make_router()


# ------------------------------------------------------------------------------------------
# scoring


@functools.lru_cache(maxsize=8)
def _episodes(task_id: str, split: str, max_episodes: int | None) -> tuple:
    if split not in ("train", "validation"):  # the sealed test split is never tuned on
        raise ValueError(f"tuning scores on the train or validation split only, not {split!r}")
    return tuple(task_episodes(get_task(task_id), split, max_episodes=max_episodes))


def fixed_params(task: Task, name: str, tuned_dir: Path | None = None) -> dict:
    """The parameters :data:`FIXED_FROM_TUNED` holds for ``name`` on a reconfiguration ``task``
    (``{}`` for most policies, and on a routing task, whose pool is part of the task), read from
    ``tuned_dir`` (default the package's ``benchmark/tuned``).

    Raises:
        ValueError: naming the command to run, when the stored choice they come from is missing.
    """
    if task.kind != "reconfig":
        return {}
    out = {}
    for param, (other, key) in FIXED_FROM_TUNED.get(name, {}).items():
        stored = load_tuned(task, other, tuned_dir)
        if stored is None or key not in stored:
            raise ValueError(f"tuning {name} on {task.id} starts from the stored {other} choice, which is missing: "
                             f"run `cpgym benchmark tune {other} --tasks {task.id}` first")
        out[param] = str(stored[key]).replace(",", "+")
    return out


def split_score(task_id: str, name: str, max_train_episodes: int | None, params: dict, split: str,
                fixed: dict | None = None) -> float:
    """Mean over the ``split`` episodes of the task (``"train"``: at most ``max_train_episodes``,
    evenly spread; ``"validation"``: all) of each episode's mean TTFT [s] of its measured
    requests, under policy ``name`` with ``params`` (and the held parameters ``fixed``,
    :func:`fixed_params`).

    Raises:
        ValueError: on the test split, an unknown task or policy, or invalid parameters.
    """
    task = get_task(task_id)
    spec = get_policy(name).with_params(**{**(fixed or {}), **params})
    config = task.sim_config(SIM_SEED)
    eps = _episodes(task_id, split, max_train_episodes if split == "train" else None)
    values = []
    for ep in eps:
        result = run_policy(spec, ep, config, capacity_cache=task_capacity_cache(task_id),
                            history=functools.partial(task_history, task_id))
        m = measured_summary(result, ep.metadata["measure_from_s"])["mean_ttft_s"]
        values.append(m if math.isfinite(m) else math.inf)
    return float(sum(values) / len(values))


Scorer = Callable[[dict, str], float]


# ------------------------------------------------------------------------------------------
# search


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


def _inside(params: dict, space: dict[str, ParamRange]) -> bool:
    return set(params) == set(space) and all(space[p].low <= v <= space[p].high for p, v in params.items())


def _typed(params: dict, space: dict[str, ParamRange]) -> dict:
    return {p: int(v) if space[p].integer else float(v) for p, v in params.items()}


def run_round(score_batch: Callable[[list[dict], str], list[float]], space: dict[str, ParamRange], *, num_trials: int,
              seed: int, batch_size: int = 8, first: dict | None = None, memo: dict | None = None) -> list[dict]:
    """One TPE round: ``num_trials`` trials asked and told in batches of ``batch_size``; returns
    ``[{"number", "params", "train_mean_ttft_s"}]`` in trial order. ``first``: enqueued as trial 0;
    ``memo``: ``{params key: train score}`` shared across rounds (a repeated point is not re-run)."""
    import optuna  # third-party, loaded only by a search (the CLI's parser imports this module)

    memo = {} if memo is None else memo
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    if first is not None:
        study.enqueue_trial(first)
    dists = {p: r.distribution() for p, r in space.items()}
    out: list[dict] = []
    while len(out) < num_trials:
        trials = [study.ask(dists) for _ in range(min(batch_size, num_trials - len(out)))]
        params = [_typed(t.params, space) for t in trials]
        todo = [p for p in dict.fromkeys(_key(p) for p in params) if p not in memo]
        for k, v in zip(todo, score_batch([dict(k) for k in todo], "train") if todo else []):
            memo[k] = v
        for t, p in zip(trials, params):
            v = memo[_key(p)]
            study.tell(t, v if math.isfinite(v) else None, state=None if math.isfinite(v) else
                       optuna.trial.TrialState.FAIL)
            out.append({"number": t.number, "params": p, "train_mean_ttft_s": v})
    return out


def bound_status(params: dict, space: dict[str, ParamRange], tol: float = BOUND_TOL) -> tuple[list[str], list[str]]:
    """``(on_bound, at_limit)``: ``"param:low"``/``"param:high"`` for each chosen value within
    ``tol`` of a widenable bound, and of a bound that is a hard limit."""
    on, lim = [], []
    for p, r in space.items():
        pos = r.position(params[p])
        for side, near in (("low", pos <= tol), ("high", pos >= 1 - tol)):
            if near:
                (lim if r.at_limit(side) else on).append(f"{p}:{side}")
    return on, lim


def tune(score: Scorer, space: dict[str, ParamRange], defaults: dict, *, num_trials: int = DEFAULT_NUM_TRIALS,
         seed: int = 0, backend: str = "local", jobs: int = 1, batch_size: int = DEFAULT_BATCH_SIZE,
         top_k: int = DEFAULT_TOP_K,
         max_rounds: int = DEFAULT_MAX_ROUNDS, bound_tol: float = BOUND_TOL,
         log: Callable[[str], None] | None = None) -> dict:
    """Tunes ``space`` (module docstring: rounds, choice, widening).

    Args:
        score: ``score(params, split) -> float`` (lower is better; ``split`` is ``"train"`` or
            ``"validation"``); picklable for ``jobs > 1`` or Ray (e.g. a ``functools.partial`` of
            :func:`split_score`).
        space: parameter -> :class:`ParamRange`.
        defaults: the policy's default parameters (round 0's first trial when inside the space).
        backend: ``"local"`` (``jobs > 1``: a process pool) or ``"ray"``
            (:class:`benchmark.dispatch.Dispatcher`).
        jobs: workers scoring a batch in parallel (does not change the result).
        batch_size: trials asked before their scores are told (changes the result).

    Returns:
        ``{"params", "train_mean_ttft_s", "validation_mean_ttft_s", "num_trials", "rounds"
        (summaries), "records" (per round: ranges, every trial, the validation re-scores)}``.

    Raises:
        ValueError: on a budget < 1, ``jobs`` < 1, an unknown backend or an invalid range.
    """
    if min(num_trials, jobs, batch_size, top_k, max_rounds) < 1:
        raise ValueError("num_trials, jobs, batch_size, top_k and max_rounds must be >= 1")
    if backend not in ("local", "ray"):
        raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
    for p, r in space.items():
        r.check(p)
    dispatcher = Dispatcher(score, backend, jobs)

    def score_batch(batch: list[dict], split: str) -> list[float]:
        return dispatcher([(p, split) for p in batch])

    try:
        memo: dict = {}
        val_memo: dict = {}
        defaults = _typed({p: defaults[p] for p in space}, space)
        first = defaults if _inside(defaults, space) else None
        rounds, records, chosen = [], [], None
        for rnd in range(max_rounds):
            trials = run_round(score_batch, space, num_trials=num_trials, seed=seed + rnd, batch_size=batch_size,
                               first=first, memo=memo)
            ranked = sorted(trials, key=lambda t: (t["train_mean_ttft_s"], t["number"]))
            top = list({_key(t["params"]): t for t in reversed(ranked)}.values())  # distinct, best kept
            top = sorted(top, key=lambda t: (t["train_mean_ttft_s"], t["number"]))[:top_k]
            if first is not None and _key(trials[0]["params"]) not in {_key(t["params"]) for t in top}:
                top.append(trials[0])  # the enqueued default / previous choice is always a candidate
            todo = [_key(t["params"]) for t in top if _key(t["params"]) not in val_memo]
            for k, v in zip(todo, score_batch([dict(k) for k in todo], "validation") if todo else []):
                val_memo[k] = v
            validation = [{"number": t["number"], "params": t["params"], "train_mean_ttft_s": t["train_mean_ttft_s"],
                           "validation_mean_ttft_s": val_memo[_key(t["params"])]} for t in top]
            chosen = min(validation, key=lambda v: (v["validation_mean_ttft_s"], v["train_mean_ttft_s"], v["number"]))
            on, lim = bound_status(chosen["params"], space, bound_tol)
            ranges = {p: [r.low, r.high] for p, r in space.items()}
            rounds.append({"ranges": ranges, "best_params": chosen["params"], "on_bound": on, "at_limit": lim,
                           "num_trials": num_trials, "train_mean_ttft_s": chosen["train_mean_ttft_s"],
                           "validation_mean_ttft_s": chosen["validation_mean_ttft_s"]})
            records.append({"ranges": ranges, "trials": trials, "validation": validation})
            if log:
                log(f"round {rnd}: {chosen['params']} train {chosen['train_mean_ttft_s']:.4f} s, validation "
                    f"{chosen['validation_mean_ttft_s']:.4f} s; on bound: {on or 'none'}")
            if not on:
                break
            for item in on:
                p, side = item.split(":")
                space = {**space, p: space[p].widened(side)}
            first = chosen["params"]
        return {"params": chosen["params"], "train_mean_ttft_s": chosen["train_mean_ttft_s"],
                "validation_mean_ttft_s": chosen["validation_mean_ttft_s"],
                "num_trials": sum(r["num_trials"] for r in rounds), "rounds": rounds, "records": records}
    finally:
        dispatcher.close()


# ------------------------------------------------------------------------------------------
# per task: run, store


def task_file_stem(task_id: str) -> str:
    """``routing/conversation-0.9-v1`` -> ``routing__conversation-0.9-v1``."""
    return task_id.replace("/", "__")


def tuned_dir() -> Path:
    """``benchmark/tuned/`` (package data)."""
    return Path(str(resources.files("benchmark"))) / "tuned"


def tuned_path(task_id: str, root: Path | None = None) -> Path:
    """The stored tuned parameters of a task: ``benchmark/tuned/<task __>.json``."""
    return (root or tuned_dir()) / f"{task_file_stem(task_id)}.json"


def record_path(task_id: str, root: str | Path = "results/benchmark/tuning") -> Path:
    """The search records of a task: ``<root>/<task __>.json.gz`` (one file per task, every tuned
    policy in it: ``results/`` has a file budget, ``tests/test_results_layout.py``)."""
    return Path(root) / f"{task_file_stem(task_id)}.json.gz"


def dumps_stable(obj: Any) -> str:
    """JSON with sorted keys, one-space indent and a final newline (same data, same bytes)."""
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def load_tuned_file(task_id: str, root: Path | None = None) -> dict:
    """The task's stored file (``{"task", "policies": {}}`` if none)."""
    p = tuned_path(task_id, root)
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {"task": task_id, "policies": {}}


def store_tuned(task_id: str, name: str, entry: dict, root: Path | None = None) -> Path:
    """Writes ``entry`` as ``policies[name]`` of the task's file (the other policies kept)."""
    data = load_tuned_file(task_id, root)
    data["policies"][name] = entry
    p = tuned_path(task_id, root)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps_stable(data), encoding="utf-8")
    return p


def write_record(path: Path, record: dict) -> Path:
    """Writes ``record`` as gzip-compressed compact JSON (header time 0: same data, same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
        gz.write(raw)
    return path


def read_record(path: Path) -> dict:
    """A file written by :func:`write_record`."""
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


def store_record(task_id: str, name: str, record: dict, root: str | Path = "results/benchmark/tuning") -> Path:
    """Writes ``record`` as ``policies[name]`` of the task's search-record file (others kept)."""
    path = record_path(task_id, root)
    data = read_record(path) if path.exists() else {"task": task_id, "policies": {}}
    data["policies"][name] = record
    return write_record(path, data)


def tune_policy(task: Task, name: str, *, num_trials: int = DEFAULT_NUM_TRIALS, seed: int = 0, backend: str = "local",
                jobs: int = 1, batch_size: int = DEFAULT_BATCH_SIZE,
                max_train_episodes: int | None = DEFAULT_MAX_TRAIN_EPISODES, top_k: int = DEFAULT_TOP_K,
                max_rounds: int = DEFAULT_MAX_ROUNDS, command: str = "", log: Callable[[str], None] | None = None,
                tuned_dir: Path | None = None) -> tuple[dict, dict]:
    """Tunes policy ``name`` on ``task``; returns ``(entry, record)``: the stored entry (module
    docstring) and the search record.

    Raises:
        ValueError: for a policy without a search space, a task without a stored capacity, or a
            missing stored choice a parameter is held at (:func:`fixed_params`).
    """
    space = search_space(name)
    check_space(name, space)
    defaults = {p: get_policy(name).params[p] for p in space}
    fixed = fixed_params(task, name, tuned_dir)
    score = functools.partial(split_score, task.id, name, max_train_episodes, fixed=fixed)
    num_train = len(_episodes(task.id, "train", max_train_episodes))
    res = tune(score, space, defaults, num_trials=num_trials, seed=seed, backend=backend, jobs=jobs,
               batch_size=batch_size, top_k=top_k, max_rounds=max_rounds, log=log)
    commit, dirty = git_commit()
    entry = {"params": {**fixed, **res["params"]}, "fixed_params": fixed, "train_mean_ttft_s": res["train_mean_ttft_s"],
             "validation_mean_ttft_s": res["validation_mean_ttft_s"], "num_trials": res["num_trials"],
             "rounds": res["rounds"], "seed": seed, "commit": f"{commit}{'-dirty' if dirty else ''}" if commit else None,
             "command": command, "default_params": _typed(defaults, space),
             "num_train_episodes": num_train, "num_validation_episodes": len(_episodes(task.id, "validation", None)),
             "num_simulated_train_episodes": len({_key(t["params"]) for r in res["records"] for t in r["trials"]})
             * num_train, "learned_training_episodes": dict(LEARNED_TRAINING_EPISODES)}
    record = {"task": task.id, "policy": name, "seed": seed, "sim_seed": SIM_SEED, "batch_size": batch_size,
              "max_train_episodes": max_train_episodes, "rounds": res["records"]}
    return entry, record


def parse_tunable(names: str | Sequence[str]) -> list[str]:
    """``"NAME[,NAME]"`` (``all``: every policy of :data:`TUNABLE`) -> names.

    Raises:
        ValueError: naming a policy without a search space.
    """
    items = [s.strip() for s in (names.split(",") if isinstance(names, str) else names) if s.strip()]
    if items == ["all"]:
        return list(TUNABLE)
    for n in items:
        search_space(n)
    if not items:
        raise ValueError("expected a policy name")
    return items
