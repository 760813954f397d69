"""What "capacity" means in cpgym: the one rate search and every named capacity definition.

Every load in cpgym is a fraction of a capacity: the highest arrival rate [requests/s] at which
a simulated pool still passes a *criterion*. This module holds the search for that rate,
implemented once (:func:`search_capacity` over a :class:`RateSearch`), and each criterion as a
named definition (a frozen dataclass with its thresholds, its :class:`RateSearch` and its
verdict on a finished run), registered in :data:`CAPACITY_DEFINITIONS`:

* ``sustainable-slo`` (:class:`CapacityDefinition`): the TTFT slowdown of the last third of
  arrivals is at most 1.2 x that of the first third, and token-weighted SLO attainment >= 0.9.
  Used by ``baselines.capacity.find_capacity`` (``cpgym capacity``, ``cpgym compare --loads``,
  ``cpgym reproduce``, the paper experiments' load fractions).
* ``profiled-slo-per-degree`` (:class:`ProfiledSLODefinition`): token-weighted SLO attainment
  >= 0.9 x its zero-load value (mean TTFT <= 2 x the zero-load mean when that is 0). Used by
  ``envs.planning.capacity.CapacityTable`` (the controller's per-CP-degree profile, paper §6).
* ``protocol-queueing-delay`` (:class:`ProtocolQueueingDefinition`): mean queueing delay of the
  last quarter of the arrival span <= 5 s. Used by ``policies.routing.protocol.capacity_rps``
  (the learned-vs-heuristic routing protocol's loads, ``cpgym train-arms``).
* ``fault-drain-time`` (:class:`FaultDrainDefinition`): the last request finishes <= 30 s after
  the last arrival. Used by ``experiments.faults.estimate_capacity_rps`` (``cpgym faults``).
* ``kv-tiers-queueing-delay`` (:class:`KVTiersQueueingDefinition`): every request finishes and
  the mean queueing delay of the last quarter of requests <= 1 s. Used by
  ``experiments.kv_tiers.estimate_capacity_rps`` (``cpgym kv-tiers``).

The search (:class:`RateSearch`) brackets the capacity — a given bracket, a bracket whose ends
are checked, or doubling from a start rate — and then bisects it (geometric or arithmetic
midpoints) for a fixed number of steps or until the bracket's relative width is at most a
tolerance; the capacity is the bracket's lower end (an accepted rate). Every criterion is
assumed monotone in the rate (more load never passes when less failed).

The definitions differ in what they measure because their callers ask different questions
(a policy's sustainable rate over a long window; a controller's per-degree profile on a
synthetic mix; a quick reference load for a study); their values are not interchangeable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from envs.metrics import summarize
from envs.sim.config import SimConfig
from envs.sim.cost_model import Calibration

__all__ = ["RateSearch", "CapacityBracketError", "search_capacity", "CapacityDefinition", "ProfiledSLODefinition",
           "ProtocolQueueingDefinition", "FaultDrainDefinition", "KVTiersQueueingDefinition", "CAPACITY_DEFINITIONS",
           "thirds_growth", "isolated_ttft_s", "tail_queueing_drains"]

BRACKETS = ("given", "checked", "doubling")
MIDPOINTS = ("geometric", "arithmetic")


@dataclass(frozen=True)
class RateSearch:
    """How the highest accepted rate (or rate factor) is searched (module docstring).

    Args:
        bracket: ``"given"``: ``[low, high]`` is the bracket, neither end probed;
            ``"checked"``: ``low`` must be accepted (else :class:`CapacityBracketError`), and an
            accepted ``high`` is the capacity (no bisection);
            ``"doubling"``: from ``low`` (the start), double until a rate fails (the bracket is
            the last accepted rate and that one); a failing start gives capacity 0, or with
            ``fallback_divisor`` the bracket ``[start / fallback_divisor, start]`` (the lower end
            probed: :class:`CapacityBracketError` if it fails too).
        midpoint: ``"geometric"`` (``sqrt(lo x hi)``) or ``"arithmetic"`` (``(lo + hi) / 2``).
        num_steps: bisection steps; ``None`` = until ``rel_tol``.
        rel_tol: stop when ``hi / lo - 1 <= rel_tol`` (and when ``lo`` is 0); ``None`` = after
            ``num_steps``. At least one of the two is given.
        max_doublings: doublings after the start before :class:`CapacityBracketError`;
            ``None`` = no limit. ``"doubling"`` only.
        fallback_divisor: see ``bracket``; > 1 or ``None``. ``"doubling"`` only.

    Raises:
        ValueError: naming the field, on an unknown bracket or midpoint or an out-of-range value.
    """

    bracket: str
    midpoint: str
    num_steps: int | None = None
    rel_tol: float | None = None
    max_doublings: int | None = None
    fallback_divisor: float | None = None

    def __post_init__(self) -> None:
        if self.bracket not in BRACKETS:
            raise ValueError(f"search.bracket must be one of {BRACKETS}, got {self.bracket!r}")
        if self.midpoint not in MIDPOINTS:
            raise ValueError(f"search.midpoint must be one of {MIDPOINTS}, got {self.midpoint!r}")
        if self.num_steps is None and self.rel_tol is None:
            raise ValueError("search needs num_steps or rel_tol (or both)")
        if self.num_steps is not None and not (isinstance(self.num_steps, int) and self.num_steps >= 0):
            raise ValueError(f"search.num_steps must be an integer >= 0, got {self.num_steps!r}")
        if self.rel_tol is not None and not 0.0 < self.rel_tol < math.inf:
            raise ValueError(f"search.rel_tol must be a finite number > 0, got {self.rel_tol}")
        if self.max_doublings is not None and not (isinstance(self.max_doublings, int) and self.max_doublings >= 1):
            raise ValueError(f"search.max_doublings must be an integer >= 1, got {self.max_doublings!r}")
        if self.fallback_divisor is not None and not 1.0 < self.fallback_divisor < math.inf:
            raise ValueError(f"search.fallback_divisor must be a finite number > 1, got {self.fallback_divisor}")


class CapacityBracketError(ValueError):
    """No bracket: the lowest probed rate already fails (``end == "low"``) or no failing rate was
    found within ``max_doublings`` (``end == "high"``); ``rate`` is that rate (factor). Callers
    restate it in their own terms."""

    def __init__(self, end: str, rate: float) -> None:
        self.end, self.rate = end, rate
        what = "fails the capacity criterion" if end == "low" else "is the highest rate probed and still passes"
        super().__init__(f"no capacity bracket: rate {rate:g} {what}")


def search_capacity(ok: Callable[[float], bool], search: RateSearch, low: float, high: float | None = None
                    ) -> tuple[float, float]:
    """The one capacity search (module docstring): bracket, then bisect.

    Args:
        ok: ``rate -> accepted``; called once per probe, in search order (it runs the simulation).
        search: :class:`RateSearch`.
        low: the bracket's lower end, or the start of ``"doubling"`` (> 0 there).
        high: the bracket's upper end (``"given"``, ``"checked"``); unused by ``"doubling"``.

    Returns:
        ``(lo, hi)``: the final bracket; ``lo`` is the capacity (0 when a doubling search's start
        fails without a fallback), ``hi`` the lowest failing rate probed (``lo == hi`` when a
        checked ``high`` passed).

    Raises:
        CapacityBracketError: see :class:`RateSearch`.
    """
    if search.bracket == "given":
        lo, hi = low, high
    elif search.bracket == "checked":
        if not ok(low):
            raise CapacityBracketError("low", low)
        if ok(high):
            return high, high
        lo, hi = low, high
    else:
        lo, hi = _double(ok, search, low)
    n = 0
    while (search.num_steps is None or n < search.num_steps) and (
            search.rel_tol is None or (lo > 0 and hi / lo - 1.0 > search.rel_tol)):
        mid = math.sqrt(lo * hi) if search.midpoint == "geometric" else 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
        n += 1
    return lo, hi


def _double(ok: Callable[[float], bool], search: RateSearch, start: float) -> tuple[float, float]:
    """The ``"doubling"`` bracket of :func:`search_capacity`."""
    if not ok(start):
        if search.fallback_divisor is None:
            return 0.0, start
        lo = start / search.fallback_divisor
        if not ok(lo):
            raise CapacityBracketError("low", lo)
        return lo, start
    lo = start
    n = 0
    while search.max_doublings is None or n < search.max_doublings:
        if not ok(2.0 * lo):
            return lo, 2.0 * lo
        lo *= 2.0
        n += 1
    raise CapacityBracketError("high", lo)


# ------------------------------------------------------------------------------------------
# sustainable-slo: a policy's sustainable rate (baselines.capacity)

def thirds_growth(arrival_s: np.ndarray, ttft_s: np.ndarray, isolated_ttft_s: np.ndarray | None = None) -> float:
    """Mean TTFT slowdown (TTFT / isolated TTFT; plain TTFT if ``isolated_ttft_s`` is None) of
    the last third of arrivals over that of the first third (thirds of the span from the first
    to the last arrival); NaN if a third is empty. Shapes (n,); seconds."""
    t = np.asarray(arrival_s, float)
    y = np.asarray(ttft_s, float)
    if isolated_ttft_s is not None:
        y = y / np.asarray(isolated_ttft_s, float)
    if t.size < 3:
        return math.nan
    t0, t1 = float(t.min()), float(t.max())
    span = t1 - t0
    first = y[(t < t0 + span / 3.0) & np.isfinite(y)]  # unservable prompts (NaN TTFT at every rate) left out
    last = y[(t >= t0 + 2.0 * span / 3.0) & np.isfinite(y)]
    if first.size == 0 or last.size == 0:
        return math.nan
    return float(np.mean(last) / np.mean(first))


def isolated_ttft_s(config: SimConfig, calibration: Calibration, prompt_tokens: np.ndarray) -> np.ndarray:
    """TTFT of uncached prompts alone on one GPU [s], shape like ``prompt_tokens``: ``E_1(L, 0)``
    + KV hand-off (L x KV bytes per token / hand-off bandwidth) + first decode step — the base of
    the scaled TTFT SLO (``envs.sim.config.SLOConfig``)."""
    cm = calibration.cost_model()
    L = np.asarray(prompt_tokens, float)
    lat = config.latency
    return (cm.d + (cm.a + cm.c) * L + cm.alpha * L * (L + 1) * 0.5
            + L * calibration.kv_bytes_per_token / lat.kv_handoff_bandwidth_bytes_per_s + lat.first_decode_step_s)


@dataclass(frozen=True)
class CapacityDefinition:
    """``sustainable-slo``: the sustainable rate of a policy on a workload window
    (``baselines.capacity``, whose module docstring states the definition in full; version
    ``baselines.capacity.DEFINITION_VERSION``).

    Criterion (:meth:`verdict`): the window, rate-scaled and run to completion, is sustainable
    when (1) the backlog drains: :func:`thirds_growth` of the TTFT slowdown (TTFT over
    :func:`isolated_ttft_s`) is at most ``drain_ratio``, and (2) the SLOs hold: token-weighted
    SLO attainment is at least ``min_slo_attainment``. Search (:attr:`search`): doubling from
    the light load (at most ``max_bracket_steps`` doublings; a failing light load gives 0), then
    geometric bisection of the rate factor until the bracket's width is at most ``rel_tol`` of
    its lower end.

    Args:
        drain_ratio: the last third's mean TTFT slowdown may be at most this multiple of the
            first third's; > 1; 1.2.
        min_slo_attainment: token-weighted SLO attainment at least this, in [0, 1]; 0.9 (the
            paper's highest load keeps a high attainment: its SLO gains are +0.9 to +13.3 pp).
        rel_tol: stop when the bracket's width is at most this share of its lower end; in
            (0, 1); 0.01.
        max_bracket_steps: doublings from the light load before giving up; 24.
        light_load_requests: the search starts from the window scaled to about this many
            requests (factor ``min(1, light_load_requests / native requests)``, doubled until
            the window holds that many); >= 10; 100 (e.g. 0.1 x the native rate of a 300 s
            window of the conversation trace, ~0.03 of its capacity).

    Raises:
        ValueError: naming the field, on an out-of-range value.
    """

    drain_ratio: float = 1.2
    min_slo_attainment: float = 0.9
    rel_tol: float = 0.01
    max_bracket_steps: int = 24
    light_load_requests: int = 100

    name = "sustainable-slo"

    def __post_init__(self) -> None:
        if not (self.drain_ratio > 1.0 and math.isfinite(self.drain_ratio)):
            raise ValueError(f"capacity.drain_ratio must be a finite number > 1, got {self.drain_ratio}")
        if not 0.0 <= self.min_slo_attainment <= 1.0:
            raise ValueError(f"capacity.min_slo_attainment must be in [0, 1], got {self.min_slo_attainment}")
        if not 0.0 < self.rel_tol < 1.0:
            raise ValueError(f"capacity.rel_tol must be in (0, 1), got {self.rel_tol}")
        if not (isinstance(self.max_bracket_steps, int) and self.max_bracket_steps >= 1):
            raise ValueError(f"capacity.max_bracket_steps must be an integer >= 1, got {self.max_bracket_steps}")
        if not (isinstance(self.light_load_requests, int) and self.light_load_requests >= 10):
            raise ValueError(f"capacity.light_load_requests must be an integer >= 10, got {self.light_load_requests!r}")

    @property
    def search(self) -> RateSearch:
        return RateSearch("doubling", "geometric", rel_tol=self.rel_tol, max_doublings=self.max_bracket_steps)

    def verdict(self, result, config: SimConfig, calibration: Calibration,
                summary: dict | None = None) -> tuple[bool, float, float]:
        """Whether one finished run (a ``SimResult``) is sustainable (class docstring).

        Returns:
            ``(sustainable, growth, slo_attainment_token_weighted)``; growth is NaN (and the run
            not sustainable) when a third of the arrival span has no finished request.
        """
        s = summary if summary is not None else summarize(result)
        rec = result.records
        growth = thirds_growth(rec["arrival_s"], rec["ttft_s"],
                               isolated_ttft_s(config, calibration, rec["num_prompt_tokens"]))
        slo = float(s["slo_attainment_token_weighted"])
        return bool(growth <= self.drain_ratio and slo >= self.min_slo_attainment), float(growth), slo


# ------------------------------------------------------------------------------------------
# profiled-slo-per-degree: the controller's capacity profile (envs.planning.capacity)

@dataclass(frozen=True)
class ProfiledSLODefinition:
    """``profiled-slo-per-degree``: the capacity of a homogeneous pool of degree-C workers on a
    reference length mix under the TTFT SLO (paper §6 "Capacity Profiling and Initialization";
    ``envs.planning.capacity.CapacityTable`` runs the profiles, whose docstring states the
    workload and the pool).

    Criterion (:meth:`accepts`): a rate passes when its token-weighted SLO attainment is at
    least ``target_attainment`` x the zero-load attainment (a run at ``zero_load_fraction`` of
    the batching throughput bound); when that is 0 (a fixed SLO below the isolated prefill), when
    its mean TTFT is at most ``ttft_fallback_ratio`` x the zero-load mean. Search
    (:attr:`search`): arithmetic bisection of ``[0, bound]`` for ``num_bisection_steps`` steps,
    neither end probed.

    Args:
        target_attainment: in (0, 1]; 0.9 (``ProfileConfig.target_attainment``).
        num_bisection_steps: >= 1; 7 (``ProfileConfig.num_bisection_steps``).
        zero_load_fraction: the zero-load run's rate as a share of the bound; 1e-3.
        ttft_fallback_ratio: the mean-TTFT criterion's multiple of the zero-load mean; 2.

    Raises:
        ValueError: naming the field, on an out-of-range value.
    """

    target_attainment: float = 0.9
    num_bisection_steps: int = 7
    zero_load_fraction: float = 1e-3
    ttft_fallback_ratio: float = 2.0

    name = "profiled-slo-per-degree"

    def __post_init__(self) -> None:
        if not 0.0 < self.target_attainment <= 1.0:
            raise ValueError(f"profile.target_attainment must be in (0, 1], got {self.target_attainment}")
        if not (isinstance(self.num_bisection_steps, int) and self.num_bisection_steps >= 1):
            raise ValueError(f"profile.num_bisection_steps must be an integer >= 1, got {self.num_bisection_steps!r}")
        if not 0.0 < self.zero_load_fraction < 1.0:
            raise ValueError(f"profile.zero_load_fraction must be in (0, 1), got {self.zero_load_fraction}")
        if not 1.0 <= self.ttft_fallback_ratio < math.inf:
            raise ValueError(f"profile.ttft_fallback_ratio must be a finite number >= 1, got {self.ttft_fallback_ratio}")

    @property
    def search(self) -> RateSearch:
        return RateSearch("given", "arithmetic", num_steps=self.num_bisection_steps)

    def accepts(self, attainment: float, mean_ttft_s: float, zero_load_attainment: float,
                zero_load_mean_ttft_s: float) -> bool:
        """Whether a profile run passes (class docstring); attainments in [0, 1], TTFTs [s]."""
        if zero_load_attainment > 0.0:
            return attainment >= self.target_attainment * zero_load_attainment
        return mean_ttft_s <= self.ttft_fallback_ratio * zero_load_mean_ttft_s


# ------------------------------------------------------------------------------------------
# protocol-queueing-delay: the routing protocol's load reference (policies.routing.protocol)

@dataclass(frozen=True)
class ProtocolQueueingDefinition:
    """``protocol-queueing-delay``: the capacity of a workload on a pool under the routing
    protocol's reference router (DESIGN.md "Loads relative to capacity": the highest rate at
    which a long window's backlog drains; ``policies.routing.protocol.capacity_rps``).

    Criterion (:meth:`verdict`): with the whole workload time-scaled to the rate, the requests
    arriving in the last quarter of the arrival span (``arrival >= 0.75 x last arrival``) wait on
    average at most ``max_queueing_delay_s`` before their prefill starts (an unstarted request
    waits forever). Search (:attr:`search`): the low end must pass, a passing high end is the
    capacity; else geometric bisection for ``num_iterations`` steps.

    Args:
        max_queueing_delay_s: >= 0 [s]; 5.
        num_iterations: >= 0; 7.

    Raises:
        ValueError: naming the field, on an out-of-range value.
    """

    max_queueing_delay_s: float = 5.0
    num_iterations: int = 7

    name = "protocol-queueing-delay"

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_queueing_delay_s < math.inf:
            raise ValueError(f"max_queueing_delay_s must be a finite number >= 0, got {self.max_queueing_delay_s}")
        if not (isinstance(self.num_iterations, int) and self.num_iterations >= 0):
            raise ValueError(f"num_iterations must be an integer >= 0, got {self.num_iterations!r}")

    @property
    def search(self) -> RateSearch:
        return RateSearch("checked", "geometric", num_steps=self.num_iterations)

    def verdict(self, result) -> tuple[bool, float]:
        """``(passes, last-quarter mean queueing delay [s])`` of one finished run."""
        r = result.records
        t_end = float(np.max(r["arrival_s"]))
        last = r["arrival_s"] >= 0.75 * t_end
        wait = r["start_s"][last] - r["arrival_s"][last]
        wait = np.where(np.isnan(wait), np.inf, wait)
        delay = float(wait.mean())
        return delay <= self.max_queueing_delay_s, delay


# ------------------------------------------------------------------------------------------
# fault-drain-time: the fault experiment's load reference (experiments.faults)

@dataclass(frozen=True)
class FaultDrainDefinition:
    """``fault-drain-time``: the capacity of the fault experiment's reference policy on its trace
    window (``experiments.faults.estimate_capacity_rps``, spec keys ``capacity_*``).

    Criterion (:meth:`verdict`): the backlog drains: every request finishes, the last at most
    ``capacity_drain_s`` after the last arrival. Search (:attr:`search`): arithmetic bisection of
    the spec's ``capacity_search_rps`` bracket for ``capacity_iterations`` steps, neither end
    probed.

    Args:
        capacity_drain_s: > 0 [s]; 30 (``FaultExperimentSpec.capacity_drain_s``).
        capacity_iterations: >= 1; 7 (``FaultExperimentSpec.capacity_iterations``).

    Raises:
        ValueError: naming the field, on an out-of-range value.
    """

    capacity_drain_s: float = 30.0
    capacity_iterations: int = 7

    name = "fault-drain-time"

    def __post_init__(self) -> None:
        if not 0.0 < self.capacity_drain_s < math.inf:
            raise ValueError(f"capacity_drain_s must be a finite number > 0, got {self.capacity_drain_s}")
        if not (isinstance(self.capacity_iterations, int) and self.capacity_iterations >= 1):
            raise ValueError(f"capacity_iterations must be an integer >= 1, got {self.capacity_iterations!r}")

    @property
    def search(self) -> RateSearch:
        return RateSearch("given", "arithmetic", num_steps=self.capacity_iterations)

    def verdict(self, result, last_arrival_s: float) -> tuple[bool, float]:
        """``(passes, drain time [s])`` of one finished run whose last request arrived at
        ``last_arrival_s`` [s]; the drain time is inf when a request never finished."""
        finish = result.records["finish_s"]
        drain = (float(np.nanmax(finish)) - last_arrival_s) if np.isfinite(finish).all() else math.inf
        return drain <= self.capacity_drain_s, drain


# ------------------------------------------------------------------------------------------
# kv-tiers-queueing-delay: the KV-tier study's load reference (experiments.kv_tiers)

def tail_queueing_drains(result, queue_delay_bound_s: float) -> bool:
    """Every request finished and the mean queueing delay of the last quarter of requests (by
    record order) is at most ``queue_delay_bound_s`` [s] (the backlog does not grow)."""
    r = result.records
    if not len(r["finish_s"]) or np.isnan(r["finish_s"]).any():
        return False
    tail = slice(3 * len(r["arrival_s"]) // 4, None)
    return bool(float(np.mean(r["start_s"][tail] - r["arrival_s"][tail])) <= queue_delay_bound_s)


@dataclass(frozen=True)
class KVTiersQueueingDefinition:
    """``kv-tiers-queueing-delay``: the capacity of the KV-tier study's reference policy, tiers
    off, on its trace window (``experiments.kv_tiers.estimate_capacity_rps``).

    Criterion (:meth:`verdict`, :func:`tail_queueing_drains`): every request finishes and the
    mean queueing delay of the last quarter of the window's requests is at most
    ``queue_delay_bound_s``. Search (:attr:`search`): doubling from the start rate without limit
    (a failing start falls back to ``start / 64``, which must pass), then arithmetic bisection
    for ``iterations`` steps.

    Args:
        queue_delay_bound_s: >= 0 [s]; 1 (a growing backlog makes it grow with the window).
        iterations: >= 0; 6.

    Raises:
        ValueError: naming the field, on an out-of-range value.
    """

    queue_delay_bound_s: float = 1.0
    iterations: int = 6

    name = "kv-tiers-queueing-delay"

    def __post_init__(self) -> None:
        if not 0.0 <= self.queue_delay_bound_s < math.inf:
            raise ValueError(f"queue_delay_bound_s must be a finite number >= 0, got {self.queue_delay_bound_s}")
        if not (isinstance(self.iterations, int) and self.iterations >= 0):
            raise ValueError(f"iterations must be an integer >= 0, got {self.iterations!r}")

    @property
    def search(self) -> RateSearch:
        return RateSearch("doubling", "arithmetic", num_steps=self.iterations, fallback_divisor=64.0)

    def verdict(self, result) -> bool:
        """Whether one finished run passes (class docstring)."""
        return tail_queueing_drains(result, self.queue_delay_bound_s)


#: Every capacity definition of cpgym by name, at its default thresholds (module docstring).
CAPACITY_DEFINITIONS = {d.name: d for d in (CapacityDefinition(), ProfiledSLODefinition(), ProtocolQueueingDefinition(),
                                            FaultDrainDefinition(), KVTiersQueueingDefinition())}
