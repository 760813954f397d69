"""Measurement of the controller's window (paper §6 "Runtime Reconfiguration"): arrival rate,
smoothed length mix and its regime changes, profiled capacity of the current composition, load,
rate trend and its noise. One :class:`WindowRecord` per window.

:class:`WindowMeasurement` is the measuring part of
:class:`~baselines.controller.ReconfigController` (a mixin: it reads ``self.sim``, ``self.config``,
a :class:`~baselines.controller.ControllerConfig`, and owns ``self.table`` and the window state set
by :meth:`WindowMeasurement._attach_measurement`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import asdict, dataclass

import numpy as np

from envs.planning.capacity import CapacityProfile, CapacityTable, run_history
from envs.planning.composition import composition_capacity_rps

__all__ = ["WindowRecord", "WindowMeasurement", "DISPERSION_MAX_TERMS", "DISPERSION_PRIOR_WINDOWS"]

#: ``target_trend_noise="measured"``: windows pooled into the over-dispersion estimate, and the prior weight
#: (in windows) that shrinks it towards the Poisson value 1 (so two or three windows cannot set it alone).
DISPERSION_MAX_TERMS = 30
DISPERSION_PRIOR_WINDOWS = 4.0


@dataclass
class WindowRecord:
    """What the controller measured and did in one window (``SimResult.extras
    ["controller_windows"]`` holds them as dicts, :meth:`as_dict`).

    Attributes:
        time_s: end of the window [s].
        num_arrivals: arrivals in the window.
        rate_rps: measured arrival rate [requests/s].
        mean_cached_tokens: mean prefix hit per finished request, last window [tokens].
        capacity_rps: profiled capacity of the current composition for the window's mix
            [requests/s] (NaN when the window had too few requests).
        load: ``rate_rps / capacity_rps``.
        forecast_rps: forecast rate: the rate plus its positive trend over ``trend_horizon_s``
            [requests/s].
        forecast_load: ``forecast_rps / capacity_rps``.
        long_fraction: share of arrivals with at least ``long_prompt_tokens`` tokens, in [0, 1].
        action: ``"none"``, ``"too-few-requests"``, the started operations joined by ``;``, or
            ``"<kind>-locked"`` / ``"<kind>-blocked"``.
        projected_load: load after the started operations (NaN if none started).
        regime_change: the window's mix was farther than ``mix_change_distance`` from the
            smoothed mix (a new regime: the smoothed mix restarted from it).
        target_composition: ``"target"`` decision: the target composition after this window
            (counts form; empty for the paper rule).
        best_composition: ``"target"`` decision: the candidate with the lowest predicted mean TTFT.
        predicted_gain: ``"target"`` decision: predicted mean TTFT of the previous target over
            that of the best candidate, minus 1 (0 when the target is the best).
        lookahead_rate_rps: ``"target"`` decision: the rate the look-ahead forecasts from
            [req/s] (:meth:`WindowMeasurement.lookahead_rate`).
        lookahead_slope_rps_per_s: ``"target"`` decision: the rate trend it adds per second of
            horizon [req/s per s].
        observed_ttft_s: mean TTFT of the requests whose prefill finished in the window [s] (NaN
            when none finished).
        predicted_target_ttft_s: ``"target"`` decision: the look-ahead's score of the target
            composition before this window's decision [s].
        capacity_calibration: ``"analytic"`` decision: the factor its estimate applied to the
            profiled capacities (:meth:`~baselines.controller.analytic_rule.AnalyticRule._calibrated_capacities`;
            NaN when no operation was proposed).
    """

    time_s: float
    num_arrivals: int
    rate_rps: float
    mean_cached_tokens: float
    capacity_rps: float = math.nan
    load: float = math.nan
    forecast_rps: float = math.nan
    forecast_load: float = math.nan
    long_fraction: float = math.nan
    action: str = "none"
    projected_load: float = math.nan
    regime_change: bool = False
    target_composition: str = ""
    best_composition: str = ""
    predicted_gain: float = math.nan
    lookahead_rate_rps: float = math.nan
    lookahead_slope_rps_per_s: float = math.nan
    observed_ttft_s: float = math.nan
    predicted_target_ttft_s: float = math.nan
    capacity_calibration: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)

    def __getitem__(self, key: str):  # dict-style access, as the earlier per-window dicts
        return getattr(self, key)



class WindowMeasurement:
    """Measures each window of a run for the controller (module docstring)."""

    def _attach_measurement(self, sim) -> None:
        """Window state of ``sim``'s run: the workload's arrival times and prompt lengths, the
        capacity table (``self.table``; built when none was given: the run's
        ``sim.attachments["capacity_cache"]`` or a new cache, its reference mixes seeded from the
        run's demand history, :func:`~envs.planning.capacity.run_history`: a benchmark task's
        training episodes, else the run's workload), the finished-request counters and the regime (mix and rate) history."""
        cfg = self.config
        reqs = sim.workload.requests
        self._arrivals = np.array([r.arrival_time_s for r in reqs], dtype=float)
        self._lengths = np.array([r.num_prompt_tokens for r in reqs], dtype=float)
        self._mean_cached_tokens = 0.0  # mean prefix hit per request [tokens], measured per window
        if self.table is None:
            cache = sim.attachments.get("capacity_cache")
            self.table = CapacityTable(sim.config, sim.calibration, cfg.profile, cache=cache)
            history = run_history(sim)
            if history is not None:
                # the history's reuse is also the prior hit until the first requests finish
                self._mean_cached_tokens = history.mean_cached_tokens
                self.table.seed_history(history.prompt_tokens, self._mean_cached_tokens)
        self._last_arrival_s = float(self._arrivals[-1]) if len(reqs) else 0.0
        self._hit_tokens = 0
        self._num_finished = 0
        self._ttft_sum_s = 0.0  # sum of the TTFTs of the requests finished in the window [s]
        self._shares: np.ndarray | None = None
        self._rates: list[float] = []  # window rates [req/s] since the last regime change
        self._regime_tail: list[float] = []  # the regime's last three window rates (second differences)
        self._dispersion_terms: list[float] = []  # squared second differences / their Poisson variance
        self._regime_change = False
        self._regime_start = 0  # first request of the current mix regime (look-ahead sample)
        self._windows_since_regime = math.inf  # windows since the last regime change (0: this window)

    def _on_finish(self, sim, batch, w) -> None:
        # Mean prefix hit per request of the window (from the simulator's request records).
        self._num_finished += len(batch)
        self._hit_tokens += sum(sim.num_cached_tokens(req.request_id) for req in batch)
        self._ttft_sum_s += sum(sim.ttft_s(req.request_id) for req in batch)

    # --- one window --------------------------------------------------------------------------
    def profiles(self, idx: np.ndarray, degrees=None) -> dict[int, CapacityProfile]:
        """Per-degree capacity profiles (per worker) for the smoothed length mix after adding the
        requests ``idx`` of the workload (updates the smoothed class histogram).

        Args:
            idx: indices of the window's requests in the workload.
            degrees: degrees to profile; default every supported degree of the pool.
        """
        s = self.table.shares(self._lengths[idx], self._mean_cached_tokens)
        a = self.config.mix_smoothing
        if self._shares is None or 0.5 * float(np.abs(s - self._shares).sum()) > self.config.mix_change_distance:
            self._regime_change = self._shares is not None
            self._shares = s  # a regime change (e.g. a new phase): no smoothing across it
            self._regime_start = int(idx[0]) if len(idx) else 0  # the look-ahead's sample starts here
            self._rates = []  # nor a rate trend
            self._regime_tail = []
        else:
            self._shares = (1.0 - a) * self._shares + a * s
        self.table.observe(self._shares)
        degrees = self.sim.config.pool.supported_degrees if degrees is None else degrees
        if self.config.decision == "analytic":
            return self._anchored_profiles(list(degrees))
        return {d: self.table.shares_profile(d, self._shares) for d in degrees}

    def _anchored_profiles(self, degrees: list[int]) -> dict[int, CapacityProfile]:
        """The ``"analytic"`` decision's profiles: the largest of ``degrees`` (the anchor: the
        fewest workers, so the cheapest profile) is profiled by the table (one simulated profile
        per reference mix, i.e. per mix regime); every other degree's per-worker capacity is the
        anchor's scaled by the mix's mean batching work
        (:meth:`~envs.planning.capacity.CapacityTable.mean_work_s`, the table's own rescaling
        between a mix and its reference)."""
        anchor = max(degrees)
        ref = self.table.shares_profile(anchor, self._shares)
        work = self.table.mean_work_s(anchor, self._shares)
        out = {anchor: ref}
        for d in degrees:
            if d != anchor:
                cap = ref.capacity_rps * work / self.table.mean_work_s(d, self._shares)
                out[d] = CapacityProfile(d, cap, cap * ref.mean_prompt_tokens, ref.mean_prompt_tokens,
                                         ref.zero_load_attainment, ref.reference)
        return out

    def _needed_degrees(self, counts: dict[int, int]) -> list[int]:
        """Degrees whose profile a decision can need: those present, and their halves and
        doubles that the pool supports (a split or merge target)."""
        supported = set(self.sim.config.pool.supported_degrees)
        need = set(counts)
        need |= {c // 2 for c in counts if c % 2 == 0} | {2 * c for c in counts}
        return sorted(need & supported | set(counts))

    def measure(self) -> tuple[WindowRecord, dict[int, CapacityProfile] | None]:
        """Measures the window that ends now: arrival rate, smoothed mix, capacity of the current
        composition, load, forecast load, long-request fraction. Returns the record and the
        per-degree profiles (``None`` if the window had too few arrivals)."""
        sim, cfg = self.sim, self.config
        now = sim.env.now
        i0 = bisect_left(self._arrivals, now - cfg.decision_window_s)
        i1 = bisect_left(self._arrivals, now)
        n = i1 - i0
        observed = self._ttft_sum_s / self._num_finished if self._num_finished else math.nan
        if self._num_finished:
            self._mean_cached_tokens = self._hit_tokens / self._num_finished
        self._hit_tokens = self._num_finished = 0
        self._ttft_sum_s = 0.0
        rate = n / cfg.decision_window_s
        record = WindowRecord(time_s=now, num_arrivals=n, rate_rps=rate, mean_cached_tokens=self._mean_cached_tokens,
                              observed_ttft_s=observed)
        if n < max(1, cfg.min_window_requests):
            record.action = "too-few-requests"
            return record, None
        idx = np.arange(i0, i1)
        self._regime_change = False
        counts: dict[int, int] = {}
        for w in sim.workers.values():
            counts[w.degree] = counts.get(w.degree, 0) + 1
        profiles = self.profiles(idx, self._needed_degrees(counts))
        cap = composition_capacity_rps(counts, profiles)
        self._rates = (self._rates + [rate])[-(cfg.k_windows + 1):]
        self._observe_dispersion(rate)
        forecast = rate + max(0.0, self.rate_slope()) * cfg.trend_horizon_s
        record.capacity_rps = cap
        record.forecast_rps = forecast
        record.load = rate / cap if cap > 0 else math.inf
        record.forecast_load = forecast / cap if cap > 0 else math.inf
        record.long_fraction = float((self._lengths[idx] >= cfg.long_prompt_tokens).mean())
        record.regime_change = self._regime_change
        self._windows_since_regime = 0 if self._regime_change else self._windows_since_regime + 1
        return record, profiles

    def lookahead_rate(self, rate_rps: float) -> tuple[float, float, bool]:
        """``(rate [req/s], slope [req/s per s], stationary)`` the ``"target"`` decision
        forecasts from (``target_trend_min_t``): the mean rate of the regime's recent windows (at
        most ``k_windows + 1``, at least 2), no trend and ``stationary`` when the least-squares
        slope of their rates is within ``target_trend_min_t`` standard errors of zero (each window
        rate's variance ``rate / decision_window_s``: Poisson counts, times :meth:`rate_dispersion` with
        ``target_trend_noise="measured"``); otherwise ``rate_rps`` (the last
        window's rate), the positive slope and not stationary. A stationary load gets the
        look-ahead's stationary stream span (``LookaheadConfig.stationary_duration_s``)."""
        slope = self.rate_slope()
        n = len(self._rates)
        if n < 2:
            return rate_rps, max(0.0, slope), False
        mean = float(np.mean(self._rates))
        x = np.arange(n, dtype=float) * self.config.decision_window_s
        se = math.sqrt(self.rate_dispersion() * max(mean, 0.0) / self.config.decision_window_s
                       / float(((x - x.mean()) ** 2).sum()))
        if abs(slope) <= self.config.target_trend_min_t * se:
            return mean, 0.0, True
        return rate_rps, max(0.0, slope), False

    def _observe_dispersion(self, rate_rps: float) -> None:
        # one term per window with two earlier windows in its regime: (r2 - 2 r1 + r0)^2 has variance
        # 6 sigma^2 for independent window rates of variance sigma^2 and is blind to a linear ramp
        tail = self._regime_tail = (self._regime_tail + [rate_rps])[-3:]
        mean = sum(tail) / len(tail)
        if len(tail) == 3 and mean > 0:
            d2 = tail[2] - 2.0 * tail[1] + tail[0]
            term = d2 * d2 / (6.0 * mean / self.config.decision_window_s)
            self._dispersion_terms = (self._dispersion_terms + [term])[-DISPERSION_MAX_TERMS:]

    def rate_dispersion(self) -> float:
        """Over-dispersion of the window rates against Poisson counts (``target_trend_noise``):
        ``max(1, (DISPERSION_PRIOR_WINDOWS + sum(terms)) / (DISPERSION_PRIOR_WINDOWS + len(terms)))``
        over the last ``DISPERSION_MAX_TERMS`` terms (``ControllerConfig.target_trend_noise``); 1
        with ``"poisson"``."""
        if self.config.target_trend_noise == "poisson":
            return 1.0
        return self.measured_dispersion()

    def measured_dispersion(self) -> float:
        """Over-dispersion of the window rates against Poisson counts measured in the run, whatever
        ``target_trend_noise`` says: ``max(1, (DISPERSION_PRIOR_WINDOWS + sum(terms)) /
        (DISPERSION_PRIOR_WINDOWS + len(terms)))`` (:meth:`rate_dispersion`)."""
        terms = self._dispersion_terms
        return max(1.0, (DISPERSION_PRIOR_WINDOWS + sum(terms)) / (DISPERSION_PRIOR_WINDOWS + len(terms)))

    def rate_slope(self) -> float:
        """Least-squares slope [req/s per s] of the window rates since the last regime change
        (at most ``k_windows + 1`` windows); 0 with fewer than two."""
        n = len(self._rates)
        if n < 2:
            return 0.0
        if self.config.decision == "analytic":  # closed form (np.polyfit costs ~0.1 ms a window)
            xm = 0.5 * (n - 1)
            sxx = sum((i - xm) ** 2 for i in range(n))
            return sum((i - xm) * r for i, r in enumerate(self._rates)) / sxx / self.config.decision_window_s
        x = np.arange(n, dtype=float) * self.config.decision_window_s
        return float(np.polyfit(x, np.asarray(self._rates), 1)[0])
