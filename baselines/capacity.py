"""Sustainable rate (capacity) of a policy on a workload and pool, found by bisection over the
arrival rate and cached on disk; the library behind ``cpgym capacity`` and the load fractions of
``cpgym compare --loads`` and ``cpgym reproduce``. The criterion and the search are the
``sustainable-slo`` definition of ``envs.planning.capacity_definitions`` (the one module that
defines every capacity of cpgym: :class:`CapacityDefinition`, :func:`search_capacity`); this
module runs its probes with a registered policy (``baselines.runner.run_policy``) and caches them.

Definition (version :data:`DEFINITION_VERSION`): the arrival window of
``arrival_window_length_s`` seconds of the workload, rate-scaled by a factor ``x`` (arrival times
divided by ``x``: a trace is scaled, then cut to ``[0, arrival_window_length_s)``; a synthetic
workload is generated for ``arrival_window_length_s * x`` seconds and then scaled, so every rate
has a full window), is simulated to completion (no horizon: every request
finishes). Its requests are split into thirds by arrival time (first third: arrivals in the
first third of the span from the first to the last arrival; last third likewise). The rate —
the scaled window's mean arrival rate ``(n - 1) / (last - first arrival)`` [requests/s] — is
**sustainable** when both hold:

1. **the backlog drains**: ``growth <= drain_ratio`` (1.2), where ``growth`` is the mean TTFT
   *slowdown* of the last third over that of the first third; a request's slowdown is its TTFT
   over its isolated TTFT (uncached prompt alone on one GPU: ``E_1(L, 0)`` + KV hand-off + first
   decode step, the base of the scaled SLO). Dividing by the isolated TTFT removes the window's
   own mix difference between its thirds (a third holding longer prompts has longer TTFTs at
   any load; a ratio of raw mean TTFTs swings by +-50 % between thirds of a light-load window of
   the conversation trace), so ``growth`` stays near 1 until a queue builds up, and grows with
   the window length when the backlog does not drain.
2. **the SLOs hold**: token-weighted SLO attainment ``>= min_slo_attainment`` (0.9; the paper's
   highest load keeps a high attainment: its SLO gains are +0.9 to +13.3 pp).

The **capacity** is the highest sustainable rate: the factor is bracketed by doubling from the
light load (so no probe is deeper than twice the capacity), then bisected (in ``log x``) until the bracket's width is at most
``rel_tol`` (1 %) of its lower end; the reported capacity is the bracket's lower end (a
sustainable rate). Sustainability is assumed monotone in the rate (more load never drains
faster).

Results are cached as JSON under ``cache_dir`` keyed by a SHA-256 digest of everything that
determines them: the definition (version and thresholds), the workload (its contents, or its
name, seed and parameters), the window, the simulator settings (pool, engine, SLO, seed, ...),
the calibration's contents, the policy (name and parameters) and a fingerprint of the
simulator/policy source code (``envs/``, ``baselines/``), so a cached value is never stale.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from baselines.registry import get_policy
from baselines.runner import run_policy
from envs import workloads
from envs.metrics import summarize
from envs.planning.capacity import CapacityCache
from envs.planning.capacity_definitions import (
    CapacityBracketError,
    CapacityDefinition,
    search_capacity,
    thirds_growth,
)
from envs.sim import Calibration, SimConfig, Workload

#: Bump when the definition of a sustainable rate changes (invalidates every cached result).
DEFINITION_VERSION = 2


@dataclass(frozen=True)
class RatedWorkload:
    """A workload at any rate over a fixed window (module docstring): a trace (``base``) or a
    synthetic generator (``name``, ``seed``, ``params``).

    Args:
        arrival_window_length_s: length of the arrival window ``[start_s, start_s + length)`` [s], > 0.
        base: a loaded workload (a trace); its arrivals are scaled, then cut to the window.
        name, seed, params: a named synthetic workload (``envs.workloads.get_workload``),
            generated for ``arrival_window_length_s * x`` seconds at factor ``x``, then scaled.
        start_s: the window's start in the scaled workload [s]; 0.
        min_rate_scale: the lowest factor the search probes (its light-load start is at least
            this); 0 = no floor. For a workload whose structure thins out with the rate (e.g.
            sessions started ``x`` times as often, so a light load holds a handful of sessions and
            the thirds' slowdowns differ by their sessions' cache hits, not by a backlog).

    Raises:
        ValueError: if neither or both of ``base`` and ``name`` are given, or on a bad window.
    """

    arrival_window_length_s: float
    base: Workload | None = None
    name: str | None = None
    seed: int = 0
    params: dict = field(default_factory=dict)
    start_s: float = 0.0
    min_rate_scale: float = 0.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_rate_scale < math.inf):
            raise ValueError(f"min_rate_scale must be a finite number >= 0, got {self.min_rate_scale}")
        if (self.base is None) == (self.name is None):
            raise ValueError("a rated workload needs exactly one of a trace (base) or a synthetic workload name")
        if not (self.arrival_window_length_s > 0 and math.isfinite(self.arrival_window_length_s)):
            raise ValueError(f"arrival_window_length_s must be a finite number > 0, got {self.arrival_window_length_s}")
        if not (self.start_s >= 0 and math.isfinite(self.start_s)):
            raise ValueError(f"start_s must be a finite number >= 0, got {self.start_s}")

    @property
    def label(self) -> str:
        return self.base.name if self.base is not None else self.name

    def at_scale(self, rate_scale: float) -> Workload:
        """The window with arrivals scaled by ``rate_scale`` (> 0)."""
        end = self.start_s + self.arrival_window_length_s
        if self.base is not None:
            return workloads.window(workloads.scale_rate(self.base, rate_scale), self.start_s, end)
        wl = workloads.get_workload(self.name, seed=self.seed, **{**self.params, "duration_s": end * rate_scale})
        return workloads.window(workloads.scale_rate(wl, rate_scale), self.start_s, end)

    def native_rate_rps(self) -> float:
        """Mean arrival rate of the unscaled window [requests/s]."""
        return self.at_scale(1.0).mean_rate_rps

    def at_rate(self, rate_rps: float) -> Workload:
        """The window scaled so that its mean rate is about ``rate_rps`` (the factor is
        ``rate_rps / native rate``; a trace window's realised rate can differ slightly because
        the window's content changes with the factor)."""
        return self.at_scale(rate_rps / self.native_rate_rps())

    def fingerprint(self) -> dict:
        """What identifies this workload in the cache key."""
        floor = {"min_rate_scale": self.min_rate_scale} if self.min_rate_scale else {}  # old keys stay valid
        # "window_s": the length's name when the cache keys were defined; kept so that cached capacities stay valid
        if self.base is None:
            return {"name": self.name, "seed": self.seed, "params": self.params,
                    "window_s": self.arrival_window_length_s, "start_s": self.start_s, **floor}
        return {"trace": workload_digest(self.base), "window_s": self.arrival_window_length_s, "start_s": self.start_s,
                **floor}


def workload_digest(workload: Workload) -> str:
    """SHA-256 of a workload's contents (arrivals, lengths, outputs, block hashes, block size)."""
    h = hashlib.sha256()
    h.update(f"{workload.kv_block_size_tokens}|{workload.num_requests}".encode())
    for r in workload.requests:
        h.update(f"{r.arrival_time_s!r},{r.num_prompt_tokens},{r.num_output_tokens};".encode())
        h.update(np.asarray(r.block_hashes, dtype=np.int64).tobytes())
    return h.hexdigest()


def code_fingerprint(packages: tuple[str, ...] = ("envs", "baselines", "baselines/capacity.py",
                                                 "baselines/runner.py")) -> str:
    """SHA-256 of the Python sources of ``packages`` (folders or files; paths and contents,
    sorted): part of every cache key, so a change to the simulator, a policy or this definition
    never reuses an old result."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in packages:
        path = root / pkg
        for p in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@dataclass
class Probe:
    """One simulated rate of the search."""

    rate_scale: float
    rate_rps: float
    growth: float
    slo_attainment_token_weighted: float
    mean_ttft_s: float
    sustainable: bool


@dataclass
class CapacityResult:
    """The sustainable rate of one policy (module docstring).

    Attributes:
        policy: policy name.
        workload: workload label.
        capacity_rps: highest sustainable rate found [requests/s] (0 if even the lowest probed
            rate was not sustainable).
        rate_scale: its factor on the native rate.
        native_rate_rps: the unscaled window's mean rate [requests/s].
        probes: every simulated rate, in search order.
        definition: the :class:`CapacityDefinition` as a dict, plus ``version``.
        cached: whether the result came from the disk cache.
    """

    policy: str
    workload: str
    capacity_rps: float
    rate_scale: float
    native_rate_rps: float
    probes: list[Probe]
    definition: dict
    cached: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["num_simulations"] = len(self.probes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> CapacityResult:
        d = {k: v for k, v in d.items() if k != "num_simulations"}
        d["probes"] = [Probe(**p) for p in d["probes"]]
        return cls(**d)


def sustainable(result, config: SimConfig, calibration: Calibration, definition: CapacityDefinition = CapacityDefinition(),
                summary: dict | None = None) -> tuple[bool, float, float]:
    """Whether one finished run is sustainable by the definition (module docstring: the backlog
    drains, :func:`thirds_growth` <= ``drain_ratio``, and token-weighted SLO attainment >=
    ``min_slo_attainment``) — the verdict of each capacity probe.

    Returns:
        ``(sustainable, growth, slo_attainment_token_weighted)``; growth is NaN (and the run not
        sustainable) when a third of the arrival span has no finished request.
    """
    return definition.verdict(result, config, calibration, summary)


def saturated(result, summary: dict | None = None,
              definition: CapacityDefinition = CapacityDefinition()) -> tuple[bool, float, float]:
    """Whether one finished run is past saturation by *both* tests of :func:`sustainable` (the
    backlog grows, ``growth > drain_ratio``, and token-weighted SLO attainment <
    ``min_slo_attainment``): the label of ``cpgym simulate``'s warning and ``cpgym compare``'s
    ``saturated`` column, which have no measured capacity. Both are required because one window of
    a non-stationary workload (sessions building up, a controller moving) can show a growing
    slowdown at a 99 % SLO attainment.

    Returns:
        ``(saturated, growth, slo_attainment_token_weighted)`` (growth NaN: not saturated).
    """
    _, growth, slo = sustainable(result, result.config, result.calibration, definition, summary=summary)
    return bool(growth > definition.drain_ratio and slo < definition.min_slo_attainment), growth, slo


def _probe_run(run: Callable[[Workload], object], rated: RatedWorkload, scale: float) -> tuple[Workload, object]:
    wl = rated.at_scale(scale)
    if wl.num_requests < 3:
        raise ValueError(f"workload {rated.label!r} has only {wl.num_requests} requests in its "
                         f"{rated.arrival_window_length_s:g} s window "
                         f"at rate factor {scale:g}; use a longer window")
    return wl, run(wl)


def find_capacity(policy: str, rated: RatedWorkload, config: SimConfig, calibration: Calibration | None = None,
                  definition: CapacityDefinition = CapacityDefinition(), cache_dir: str | Path | None = None,
                  capacity_cache=None, log: Callable[[str], None] | None = None) -> CapacityResult:
    """The sustainable rate of ``policy`` (module docstring), from the disk cache if present.

    Args:
        policy: a registered policy name.
        rated: the workload and window.
        config: simulator settings (pool, SLO, seed, ...); its horizon is ignored (runs finish).
        calibration: cost model (default: the config's).
        definition: thresholds and search settings.
        cache_dir: folder of cached results (created if missing); ``None`` = no disk cache.
        capacity_cache: a :class:`envs.planning.capacity.CapacityCache` shared by the probes'
            controllers (the full system's capacity profiles), or ``None``.
        log: optional progress callback (one line per probe).

    Returns:
        :class:`CapacityResult`.

    Raises:
        ValueError: for an unknown policy, a window with fewer than 3 requests or one whose requests all
            arrive at the same instant (no rate to scale).
    """
    from dataclasses import replace

    spec = get_policy(policy)
    if calibration is None:
        calibration = Calibration.resolve(config.calibration_path)
    config = replace(config, horizon_s=None)
    key = cache_key(policy, rated, config, calibration, definition)
    path = Path(cache_dir) / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        res = CapacityResult.from_dict(json.loads(path.read_text())["result"])
        res.cached = True
        return res
    cache = capacity_cache if capacity_cache is not None else CapacityCache()

    def run(wl: Workload):
        return run_policy(spec, wl, config, calibration, capacity_cache=cache)

    native_wl = rated.at_scale(1.0)
    native = native_wl.mean_rate_rps
    if native <= 0 and native_wl.num_requests >= 2:  # all arrivals at one instant: no rate to scale
        raise ValueError(f"workload {rated.label!r} has no defined arrival rate ({native_wl.num_requests} request(s), "
                         f"all arriving at {native_wl.requests[0].arrival_time_s:g} s); a capacity needs >= 2 "
                         "requests with distinct arrival times")
    light = max(rated.min_rate_scale, min(1.0, definition.light_load_requests / max(1, native_wl.num_requests)))
    while light < 1.0 and rated.at_scale(light).num_requests < definition.light_load_requests:
        light = min(1.0, 2.0 * light)  # session workloads: requests are not proportional to the generated span
    probes: list[Probe] = []

    def ok(scale: float) -> bool:
        wl, res = _probe_run(run, rated, scale)
        s = summarize(res)
        good, growth, _ = sustainable(res, config, calibration, definition, summary=s)
        probes.append(Probe(scale, wl.mean_rate_rps, float(growth), float(s["slo_attainment_token_weighted"]),
                            float(s["mean_ttft_s"]), good))
        if log is not None:
            log(f"  {policy}: {wl.mean_rate_rps:8.3f} req/s  growth {growth:6.3f}  "
                f"SLO {s['slo_attainment_token_weighted']:.3f}  {'sustainable' if good else 'overloaded'}")
        return good

    try:
        lo, _ = search_capacity(ok, definition.search, light)
    except CapacityBracketError as exc:
        raise ValueError(f"no overloaded rate up to {exc.rate:g}x the native rate; is the pool too large for the "
                         "workload?") from None
    rate = next((p.rate_rps for p in probes if p.rate_scale == lo), 0.0) if lo > 0 else 0.0
    result = CapacityResult(policy, rated.label, rate, lo, native, probes,
                            {"version": DEFINITION_VERSION, **asdict(definition)})
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "result": result.to_dict()}, indent=2, default=float) + "\n")
        tmp.replace(path)
    return result


def cache_key(policy: str, rated: RatedWorkload, config: SimConfig, calibration: Calibration,
              definition: CapacityDefinition) -> str:
    """SHA-256 digest of everything a capacity depends on (module docstring)."""
    spec = get_policy(policy)
    d = {"definition": {"version": DEFINITION_VERSION, **asdict(definition)}, "workload": rated.fingerprint(),
         "config": asdict(config), "calibration": calibration.to_dict(),
         "policy": {"name": policy, "params": {k: repr(v) for k, v in spec.params.items()}},
         "code": code_fingerprint()}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def capacities(policies: list[str], rated: RatedWorkload, config: SimConfig, calibration: Calibration | None = None,
               definition: CapacityDefinition = CapacityDefinition(), cache_dir: str | Path | None = None,
               log: Callable[[str], None] | None = None) -> dict[str, CapacityResult]:
    """:func:`find_capacity` for each policy (one shared profile cache)."""
    cache = CapacityCache()
    return {p: find_capacity(p, rated, config, calibration, definition, cache_dir, cache, log) for p in policies}


def static_baselines(policies: list[str]) -> list[str]:
    """The policies whose pool does not change during a run and that are not Vertumnus: the
    baselines a load fraction refers to (``cpgym compare --loads``)."""
    out = []
    for p in policies:
        spec = get_policy(p)
        if p.startswith("vertumnus") or spec.choose_pool is not None:
            continue
        out.append(p)
    return out


def rates_for_loads(loads: list[float], caps: dict[str, CapacityResult],
                    baselines: list[str]) -> tuple[list[float], str, float]:
    """Absolute rates [requests/s] for load fractions of the strongest static baseline's
    capacity. Returns ``(rates, strongest baseline, its capacity)``.

    Raises:
        ValueError: if no baseline has a positive capacity, or a load is not in (0, 2].
    """
    for x in loads:
        if not 0.0 < x <= 2.0:
            raise ValueError(f"--loads values must be fractions of capacity in (0, 2], got {x}")
    cands = [(caps[b].capacity_rps, b) for b in baselines if b in caps]
    if not cands or max(cands)[0] <= 0:
        raise ValueError(f"no static baseline with a positive capacity among {baselines}")
    cap, best = max(cands)
    return [x * cap for x in loads], best, cap


def is_overloaded(rate_rps: float, capacity_rps: float | None) -> bool:
    """True if ``rate_rps`` exceeds a known capacity (the "overloaded" label of tables and plots)."""
    return capacity_rps is not None and math.isfinite(capacity_rps) and rate_rps > capacity_rps * (1.0 + 1e-9)


__all__ = ["DEFINITION_VERSION", "CapacityDefinition", "RatedWorkload", "CapacityResult", "Probe", "find_capacity",
           "capacities", "static_baselines", "saturated", "sustainable", "rates_for_loads", "is_overloaded",
           "thirds_growth", "cache_key",
           "workload_digest", "code_fingerprint"]
