"""Heuristic-parametrised learned routing: the Vertumnus router (paper §5) whose (beta, lambda)
is chosen every decision window by a model fitted offline on simulated per-window costs.

Each ``decision_window_s`` seconds of simulated time (at multiples of it from the start of the
run), :class:`ArmSelectingRouter` computes load and workload features from what a router
observes — the requests it routed in the last ``history_s`` seconds and the pool's outstanding
work — and picks the arm (a (beta, lambda) pair of the tuning grid,
``policies.routing.protocol.tune_vertumnus``) with the least predicted cost; between decisions it routes
exactly like :class:`~baselines.vertumnus.VertumnusRouter` with that arm.

Features (:data:`FEATURE_NAMES`, computed by :class:`LoadObserver` over the arrivals of the last
``history_s`` seconds; before the first arrival the model's ``fallback_arm`` is used):

* ``offered_utilisation``: predicted GPU time of the arrivals per second per GPU of the pool,
  ``sum_i C_min * E_{C_min}(R_i, P_i) / (H * num_gpus)``, with ``P_i`` the prefix already seen
  in earlier arrivals (the router's global prefix index, below) and ``E_C`` the pool's predicted
  cost model (``envs.sim.cost_model.CostModel.service_time_s``): a workload-independent load;
* ``log_rate_per_gpu``: ``log`` of arrivals per second per GPU;
* ``mean_log_prompt_tokens`` / ``std_log_prompt_tokens``: of the arrivals' prompt lengths;
* ``prefix_reuse_share``: share of the arrivals' prompt tokens whose KV blocks were already seen
  in an arrival of the last ``prefix_memory_s`` seconds (leading blocks only, in [0, 1]);
* ``backlog_s_per_worker``: mean predicted outstanding work per worker at the decision [s]
  (``PoolView.outstanding_work_s``).

The model (:class:`ArmCostModel`) predicts, per arm, the log mean TTFT of a window relative to
the window's mean over arms (ridge regression on standardised features, optionally with squares
and pairwise products); it is fitted by ``policies.routing.train_arms``.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from baselines.registry import PolicySpec
from baselines.vertumnus import VertumnusParams, VertumnusRouter
from envs.sim.request import Request
from envs.sim.router import PoolView
from policies.common.checkpoint import ARM_MODEL_FILE, read_json_file
from policies.common.heuristic import HeuristicPolicy

FEATURE_NAMES = ("offered_utilisation", "log_rate_per_gpu", "mean_log_prompt_tokens", "std_log_prompt_tokens",
                 "prefix_reuse_share", "backlog_s_per_worker")
#: File of an arm-selection checkpoint folder (next to ``train_config.json``).
MODEL_FILE = ARM_MODEL_FILE


class LoadObserver:
    """Router-side record of recent arrivals and the features of :data:`FEATURE_NAMES`.

    Args:
        history_s: the features describe the arrivals of the last ``history_s`` seconds [s].
        prefix_memory_s: a KV block counts as seen if an arrival of the last ``prefix_memory_s``
            seconds held it [s].

    Raises:
        ValueError: if a duration is not > 0.
    """

    def __init__(self, history_s: float = 30.0, prefix_memory_s: float = 60.0) -> None:
        if not history_s > 0 or not prefix_memory_s > 0:
            raise ValueError(f"history_s and prefix_memory_s must be > 0, got {history_s}, {prefix_memory_s}")
        self.history_s = float(history_s)
        self.prefix_memory_s = float(prefix_memory_s)
        self._arrivals: deque = deque()  # (time_s, prompt_tokens, gpu_work_s, seen_tokens)
        self._seen: dict[int, float] = {}  # block hash -> last arrival time [s]
        self._start_s: float | None = None

    def observe(self, request: Request, view: PoolView) -> None:
        """Records one arrival (call once per routed request, at its arrival)."""
        now = view.now_s
        if self._start_s is None:
            self._start_s = now
        seen = self._seen
        n_seen = 0
        for h in request.block_hashes:
            if seen.get(h, -math.inf) < now - self.prefix_memory_s:
                break
            n_seen += 1
        for h in request.block_hashes:
            seen[h] = now
        L = request.num_prompt_tokens
        p = min(n_seen * view.kv_block_size_tokens, L - 1)
        c_min = min(view.degree(w) for w in view.worker_ids)
        work = c_min * view.cost_model.service_time_s(c_min, L - p, p)
        self._arrivals.append((now, L, work, p))

    def features(self, view: PoolView, decision_s: float) -> np.ndarray | None:
        """The feature vector (order :data:`FEATURE_NAMES`) of the arrivals in
        ``[decision_s - history_s, decision_s)``; ``None`` when there is none."""
        arr = self._arrivals
        while arr and arr[0][0] < decision_s - self.history_s:
            arr.popleft()
        if len(self._seen) > 4096:  # bounded memory on long runs: forget blocks not seen for prefix_memory_s
            cutoff = decision_s - self.prefix_memory_s
            self._seen = {h: t for h, t in self._seen.items() if t >= cutoff}
        rows = [a for a in arr if a[0] < decision_s]
        if not rows or self._start_s is None:
            return None
        span_s = min(self.history_s, decision_s - self._start_s)
        if not span_s > 0:
            return None
        x = np.asarray(rows, dtype=float)
        num_gpus = sum(view.degree(w) for w in view.worker_ids)
        log_len = np.log(x[:, 1])
        backlog = float(np.mean([view.outstanding_work_s(w) for w in view.worker_ids]))
        return np.array([x[:, 2].sum() / (span_s * num_gpus), math.log(len(x) / span_s / num_gpus), log_len.mean(),
                         log_len.std(), x[:, 3].sum() / x[:, 1].sum(), backlog])


@dataclass(frozen=True)
class ArmCostModel:
    """Per-arm ridge regression of a window's relative log mean TTFT on window features.

    Args:
        arms: ``((beta, lambda), ...)`` — the choices (paper §5 bounds: beta >= 1, lambda >= 0).
        feature_names: the features used (a subset of :data:`FEATURE_NAMES`, in that order).
        feature_mean / feature_scale: standardisation of those features.
        degree: 1 (linear terms) or 2 (also squares and pairwise products).
        coef: ``(num_arms, num_terms)`` coefficients, ``num_terms`` = 1 + the terms of
            :func:`design_row` (intercept first).
        fallback_arm: index of the arm used before any feature is available.
        switch_margin: hysteresis of :meth:`choose` in the units of the prediction (relative log
            mean TTFT): a router keeps its current arm unless another arm's predicted cost is lower
            by more than this (0: always the arm predicted best). Selected by ``cpgym train arms``
            on deployed validation runs (``policies.routing.train_arms.deployed_validation``); a model
            file without the field loads with 0.

    Raises:
        ValueError: on inconsistent shapes, an unknown feature, degree not in {1, 2}, an arm
            outside the paper's bounds or a switch_margin that is not finite and >= 0.
    """

    arms: tuple[tuple[float, float], ...]
    feature_names: tuple[str, ...]
    feature_mean: tuple[float, ...]
    feature_scale: tuple[float, ...]
    degree: int
    coef: tuple[tuple[float, ...], ...]
    fallback_arm: int
    switch_margin: float = 0.0

    def __post_init__(self) -> None:
        for b, lam in self.arms:
            VertumnusParams(beta=b, lambda_=lam)  # bounds
        if unknown := [f for f in self.feature_names if f not in FEATURE_NAMES]:
            raise ValueError(f"ArmCostModel: unknown features {unknown}; expected names from {FEATURE_NAMES}")
        k = len(self.feature_names)
        if self.degree not in (1, 2):
            raise ValueError(f"ArmCostModel: degree must be 1 or 2, got {self.degree}")
        if len(self.feature_mean) != k or len(self.feature_scale) != k:
            raise ValueError("ArmCostModel: feature_mean / feature_scale need one value per feature")
        if len(self.coef) != len(self.arms) or any(len(c) != num_terms(k, self.degree) for c in self.coef):
            raise ValueError(f"ArmCostModel: coef must be ({len(self.arms)}, {num_terms(k, self.degree)})")
        if not 0 <= self.fallback_arm < len(self.arms):
            raise ValueError(f"ArmCostModel: fallback_arm {self.fallback_arm} out of range")
        if not (math.isfinite(self.switch_margin) and self.switch_margin >= 0):
            raise ValueError(f"ArmCostModel: switch_margin must be finite and >= 0, got {self.switch_margin}")

    def feature_index(self) -> list[int]:
        return [FEATURE_NAMES.index(f) for f in self.feature_names]

    def predict_costs(self, features: np.ndarray) -> np.ndarray:
        """Predicted relative log mean TTFT per arm, shape ``(..., num_arms)``, of full feature
        vectors (order :data:`FEATURE_NAMES`), shape ``(..., len(FEATURE_NAMES))``."""
        f = np.asarray(features, dtype=float)[..., self.feature_index()]
        z = (f - np.asarray(self.feature_mean)) / np.asarray(self.feature_scale)
        return design_matrix(z, self.degree) @ np.asarray(self.coef).T

    def choose(self, features: np.ndarray | None, current: int | None = None) -> int:
        """Index of the arm with the least predicted cost (ties: first); ``fallback_arm`` for
        ``None`` features; with ``switch_margin`` > 0, ``current`` (the arm in use, or ``None``) is
        kept unless the best arm's predicted cost is lower than ``current``'s by more than it."""
        if features is None:
            return self.fallback_arm
        cost = self.predict_costs(features)
        best = int(np.argmin(cost))
        if current is not None and self.switch_margin > 0 and cost[current] - cost[best] <= self.switch_margin:
            return int(current)
        return best

    def to_json(self) -> dict:
        return {"arms": [list(a) for a in self.arms], "feature_names": list(self.feature_names),
                "feature_mean": list(self.feature_mean), "feature_scale": list(self.feature_scale),
                "degree": self.degree, "coef": [list(c) for c in self.coef], "fallback_arm": self.fallback_arm,
                "switch_margin": self.switch_margin}

    @classmethod
    def from_json(cls, data: dict, where: str = "arm model") -> ArmCostModel:
        """Raises ValueError naming ``where`` on a missing field or bad values (``switch_margin``,
        optional, default 0: a JSON number, not a string or boolean)."""
        margin = data.get("switch_margin", 0.0)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise ValueError(f"{where}: field 'switch_margin' must be a number >= 0, got {margin!r}")
        try:
            return cls(arms=tuple((float(b), float(lam)) for b, lam in data["arms"]),
                       feature_names=tuple(data["feature_names"]), feature_mean=tuple(map(float, data["feature_mean"])),
                       feature_scale=tuple(map(float, data["feature_scale"])), degree=int(data["degree"]),
                       coef=tuple(tuple(map(float, c)) for c in data["coef"]), fallback_arm=int(data["fallback_arm"]),
                       switch_margin=float(margin))
        except KeyError as exc:
            raise ValueError(f"{where}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None


def num_terms(num_features: int, degree: int) -> int:
    """Columns of :func:`design_matrix`: intercept, linear terms, and for degree 2 the squares
    and pairwise products."""
    return 1 + num_features + (num_features * (num_features + 1) // 2 if degree == 2 else 0)


def design_matrix(z: np.ndarray, degree: int) -> np.ndarray:
    """``[1, z, (z_i z_j for i <= j)]`` of standardised features ``z``, shape ``(..., k)`` ->
    ``(..., num_terms(k, degree))``."""
    z = np.asarray(z, dtype=float)
    cols = [np.ones(z.shape[:-1] + (1,)), z]
    if degree == 2:
        k = z.shape[-1]
        iu = np.triu_indices(k)
        cols.append((z[..., :, None] * z[..., None, :])[..., iu[0], iu[1]])
    return np.concatenate(cols, axis=-1)


class ArmSelectingRouter(VertumnusRouter):
    """The Vertumnus router with (beta, lambda) re-chosen every ``decision_window_s`` by ``model``.

    Args:
        model: the fitted :class:`ArmCostModel` (a constant model = a fixed arm).
        decision_window_s: decisions at multiples of this from the start of the run [s].
        history_s, prefix_memory_s: see :class:`LoadObserver`.
        name: policy name stored in results.
        record: when a list, ``(decision_s, features or None, arm index)`` is appended at every
            decision (used to collect training features).
    """

    def __init__(self, model: ArmCostModel, decision_window_s: float = 10.0, history_s: float = 30.0,
                 prefix_memory_s: float = 60.0, name: str = "vertumnus-arms", record: list | None = None) -> None:
        if not decision_window_s > 0:
            raise ValueError(f"decision_window_s must be > 0, got {decision_window_s}")
        b, lam = model.arms[model.fallback_arm]
        super().__init__(VertumnusParams(beta=b, lambda_=lam), name)
        self.model = model
        self.decision_window_s = float(decision_window_s)
        self.history_s = float(history_s)
        self.prefix_memory_s = float(prefix_memory_s)
        self.record = record
        self._params = [VertumnusParams(beta=b, lambda_=lam) for b, lam in model.arms]
        self._observer = LoadObserver(history_s, prefix_memory_s)
        self._next_decision_s = 0.0
        self._current_arm: int | None = None  # the last arm chosen from features (hysteresis)

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        self.params = self._params[self.model.fallback_arm]
        super().reset(view, rng)
        self._observer = LoadObserver(self.history_s, self.prefix_memory_s)
        self._next_decision_s = 0.0
        self._current_arm = None

    def route(self, request: Request, view: PoolView) -> int:
        now = view.now_s
        if now >= self._next_decision_s:
            decision_s = math.floor(now / self.decision_window_s) * self.decision_window_s
            feats = self._observer.features(view, decision_s)
            arm = self.model.choose(feats, self._current_arm)
            if feats is not None:
                self._current_arm = arm
            self.params = self._params[arm]
            if self.record is not None:
                self.record.append((decision_s, feats, arm))
            self._next_decision_s = decision_s + self.decision_window_s
        self._observer.observe(request, view)
        return super().route(request, view)


def constant_model(arms, arm: int) -> ArmCostModel:
    """A model that always picks ``arms[arm]`` (for fixed-arm runs that record features)."""
    k = len(FEATURE_NAMES)
    coef = tuple(tuple([0.0 if i == arm else 1.0] + [0.0] * k) for i in range(len(arms)))
    return ArmCostModel(tuple(arms), FEATURE_NAMES, (0.0,) * k, (1.0,) * k, 1, coef, arm)


# ------------------------------------------------------------------------------------------
# checkpoints


def is_arm_checkpoint(path) -> bool:
    """Whether ``path`` (a folder, or a file inside one) is an arm-selection checkpoint (holds
    :data:`MODEL_FILE`)."""
    p = Path(path).expanduser()
    return (p / MODEL_FILE).is_file() if p.is_dir() else p.name == MODEL_FILE and p.is_file()


def load_arm_checkpoint(path) -> tuple[ArmCostModel, dict]:
    """``(model, router settings)`` of a checkpoint folder: :data:`MODEL_FILE` holds
    ``{"model": ..., "router": {"decision_window_s", "history_s", "prefix_memory_s"}}``.

    Raises:
        FileNotFoundError: naming the file if it is missing.
        ValueError: naming the file on invalid JSON or fields.
    """
    p = Path(path).expanduser()
    f = p / MODEL_FILE if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(2, f"no {MODEL_FILE}; expected the folder written by `cpgym train arms`", str(f))
    data = read_json_file(f)
    if "model" not in data or "router" not in data:
        raise ValueError(f"{f}: expected fields 'model' and 'router'")
    router = data["router"]
    keys = ("decision_window_s", "history_s", "prefix_memory_s")
    if not isinstance(router, dict) or any(k not in router for k in keys):
        raise ValueError(f"{f}: 'router' needs {keys}")
    return ArmCostModel.from_json(data["model"], str(f)), {k: float(router[k]) for k in keys}


def arm_policy_spec(path, name: str | None = None):
    """A :class:`~baselines.registry.PolicySpec` of the checkpoint's router (runs through
    ``baselines.runner.run_policy`` like a heuristic; in a routing environment through
    :class:`policies.common.heuristic.HeuristicPolicy`, see :class:`ArmSelectionPolicy`)."""
    model, router = load_arm_checkpoint(path)
    label = name or f"learned:{Path(path).expanduser().resolve().name}"
    return PolicySpec(label, lambda: ArmSelectingRouter(model, name=label, **router),
                      f"Vertumnus router with (beta, lambda) chosen per {router['decision_window_s']:g} s by a fitted model",
                      "policies.routing.arm_selection (cpgym train arms)")


class ArmSelectionPolicy:
    """An arm-selection checkpoint behind the SB3 ``predict`` interface of a routing environment.

    Args:
        path: checkpoint folder.
        env: the :class:`~envs.routing_env.PrefillRoutingEnv` it acts in (the router reads the
            live pool, like :class:`policies.common.heuristic.HeuristicPolicy`, which it wraps).
        name: label for tables (default ``learned:<folder name>``).
    """

    def __init__(self, path, env, name: str | None = None) -> None:
        spec = arm_policy_spec(path, name)
        self.name = spec.name
        self._policy = HeuristicPolicy(spec.make_router, env, name=spec.name)

    def predict(self, observation, state=None, episode_start=None, deterministic: bool = True, action_masks=None):
        """SB3 signature; ``(action, state)`` (the observation is not needed: see the class docstring)."""
        return self._policy.predict(observation, state, episode_start, deterministic, action_masks)


def write_model(path: Path, model: ArmCostModel, router: dict) -> None:
    """Writes :data:`MODEL_FILE` (``model`` and router settings) into folder ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / MODEL_FILE).write_text(json.dumps({"model": model.to_json(), "router": router}, indent=1) + "\n")
