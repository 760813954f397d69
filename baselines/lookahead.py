"""Look-ahead TTFT prediction of pool compositions: the predictor behind the controller's
``"target"`` decision (:mod:`baselines.controller.target_rule`).

"Look-ahead README" below is ``results/dynamic-phases/README.md``, section "Look-ahead defaults:
the measurements behind them": the measured numbers behind the defaults and design choices here.

:class:`LookaheadPredictor` scores each candidate composition of the pool by a short simulation of
the *real* simulator (the run's engine, latency, SLO and calibration settings; the mixed pool of the
candidate with the Vertumnus router, which sends short prompts to low-degree and long prompts to
high-degree workers) fed a constant-rate Poisson stream at the forecast rate. Two stream sources
(``LookaheadConfig.source``):

* ``"requests"`` (default): resampled from the observed requests of the current mix regime (their
  true prompt lengths and their *shared* prefix blocks, so the look-ahead pool gets the prefix hits
  and the router's cache affinity of the run; :meth:`LookaheadPredictor.resampled_stream`);
  with ``replay_sample`` (``ControllerConfig.target_replay_sample``) each stream is preceded by the
  sample itself replayed as observed and not scored (:meth:`LookaheadPredictor.after_replay`), so
  the candidate pool meets the scored requests with the prefix caches and queues that the observed
  traffic builds, not idle and cold: on a multi-turn trace a resampled later turn then finds its
  session's earlier turn cached, as in the run;
* ``"histogram"``: the capacity profiler's machinery (:class:`envs.planning.capacity.CapacityTable`):
  the smoothed class histogram, prompts drawn class by share, length log-uniform inside the class,
  prefix hits as shorter uncached prompts, seeded by the mix itself. The class histogram loses
  the hit structure and the tail, and ranked the wrong pools first near a ramp's peak
  (look-ahead README).

* **Transition** (``"requests"`` source, opt-in): with a :class:`TransitionPlan`
  (``ControllerConfig.target_transition``) each stream starts on the pool's current composition
  and moves to the candidate through the simulator's own split/merge protocol when its scored part
  begins, so a candidate's score includes the cost of moving to it and staying put costs nothing.
* **Common random numbers**: every candidate of one (mix, rate) gets the same prompts and arrival
  times, so differences between candidates are differences of the compositions, not of the draws.
* **Buckets and memo**: the rate is rounded to a geometric grid (``rate_bucket_ratio``) and the
  sample is identified by a key (the controller: the regime's first request and the sample size,
  which grows in powers of two; histogram source: the capacity table's reference mix), so one
  regime at one rate level is simulated once; predictions are memoised per (sample, rate bucket,
  candidates) in the predictor (owned by one controller).
* **Score**: mean TTFT [s] of the stream's requests (the quantity the experiment compares).
* **Overload clip** (``"requests"`` source): a forecast rate above ``overload_rate_factor`` times
  the candidates' throughput bound (:meth:`LookaheadPredictor.rate_cap_rps`: a rate that no
  candidate can serve, from the GPU time each request of the sample needs at the least) is
  simulated at that multiple, the *cap*, and the score is carried to the forecast rate along the
  backlog's growth. Why: a stream has ``rate x duration_s`` requests, and a candidate that cannot
  keep up queues nearly all of them, so without the clip the look-ahead's cost per window grew
  with the rate (in deep overload it took most of a run's time: look-ahead README).
  At the cap every candidate is overloaded (at least ``overload_rate_factor`` times its bound),
  its queue grows at ``rate - mu_c`` (``mu_c`` its throughput) and a request arriving ``t`` after
  the stream's start waits about ``(rate / mu_c - 1) t`` longer than at no backlog; so the mean
  TTFT grows with the rate by ``t_mean / mu_c`` per req/s (the *backlog slope*, measured in the
  capped simulation: the scored requests' mean arrival time and the pool's throughput, the pool
  being busy throughout), and the score at a forecast ``rate`` above the cap is the capped
  simulation's mean TTFT plus ``(rate - cap) x slope`` (rates bucketed). Everything a candidate
  does differently below saturation — routing, prefix hits, head-of-line blocking, the cold start
  — is in the simulated part; only the extra backlog is extrapolated, linearly, as a fluid queue
  grows. The capped simulation alone would overstate the differences between candidates (at the
  cap the non-backlog part is a larger share of the TTFT); the extrapolated scores stay within
  about the spread between the look-ahead's own streams of the simulated ones, so decisions above
  the cap can differ from the unclipped look-ahead's only where candidates are within the noise
  (accuracy measured on the conversation trace and on the 16-GPU pool of
  ``tests/reconfig/test_lookahead_overload.py``: look-ahead README). Cost: the streams hold at most
  ``overload_rate_factor x bound x span`` requests, and every forecast above the cap shares one
  simulated bucket, so the windows of a sustained overload reuse the memo. Below the cap nothing
  changes (the same rates, streams and scores).

Why a simulation and not a closed form: a per-degree capacity sum ranks compositions only by how
much load they carry (it is linear in the worker counts, so an extreme — all CP-2 or all CP-4 — always
wins), while the measured best composition of a short-heavy mix is a mixed pool at every load (the
router's length split), see ``results/dynamic-phases/README.md``. The ranking accuracy of this
predictor against full constant-rate runs was measured once (``results/README.md``, research log).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from envs.planning.capacity import CapacityTable
from envs.planning.composition import degree_counts
from envs.planning.operations import operations_towards, projected_degree_counts
from envs.sim.cost_model import Calibration
from envs.sim.events import EventPriority
from envs.sim.reconfig import ReconfigConfig, get_reconfigurator
from envs.sim.request import Request, Workload
from envs.sim.simulator import Simulator

__all__ = ["LookaheadConfig", "LookaheadPredictor", "TransitionPlan", "screened_scores"]


@dataclass(frozen=True)
class LookaheadConfig:
    """Settings of :class:`LookaheadPredictor`.

    Args:
        duration_s: simulated span of arrivals per prediction [s]; 60 (three 20 s windows, the
            capacity profiler's span: long enough to build the queue of a rate near capacity).
        min_requests: at least this many requests per prediction (low rates); 150.
        rate_bucket_ratio: rates are rounded to the geometric grid ``ratio^k`` [req/s] before
            simulating (and as the memo key), > 1; 1.1 (a 10 % step: a 20 -> 60 req/s ramp is 12
            buckets).
        source: ``"requests"`` (resample the regime's observed requests) or ``"histogram"`` (the
            capacity profiler's class-histogram prompts); module docstring.
        max_sample_requests: ``"requests"``: at most this many observed requests (the regime's
            first ones, a power of two) are resampled; 1024 (about one short-heavy window, or a
            long-heavy phase: enough long prompts either way, look-ahead README).
        num_replications: ``"requests"``: independent resampled streams per prediction (each
            shared by every candidate), whose mean TTFTs are averaged; 3 (near a mix's capacity one
            60 s stream's ranking is noisy; three cut the regret against full runs: look-ahead README).
        screen_margin: ``"requests"``: successive screening (:meth:`LookaheadPredictor.score_from_requests`):
            before each stream after the first, a candidate whose mean predicted TTFT so far exceeds
            the best one's by more than this share is dropped (it keeps its score from the streams
            it ran), >= 0 (``inf``: every candidate on every stream); 0.2. Why: most candidates
            are far from the best (CP-2-heavy pools at moderate load, all-CP-4 near capacity), and
            their extra streams only refine a score no decision uses; 0.2 saves about a third of
            the simulations and almost never changes a decision, smaller margins save little more
            and change several (look-ahead README).
        warmup_s: the score (mean TTFT) counts only the requests arriving at or after this time
            of the stream [s], in [0, duration_s); 0.
        stationary_duration_s: ``"requests"``: span of a stream [s] when the caller marks the load
            stationary (the controller: no significant rate trend,
            ``ControllerConfig.target_trend_min_t``), >= ``duration_s``; 60 (= ``duration_s``:
            the same streams, and memo entries, as a trending load). Longer streams resolve
            steady loads better but cost more: a stream starts from an idle pool with cold caches,
            and at a steady load near the knee of all-CP-4 the differences between compositions
            come from queueing excursions that a 60 s stream rarely has. 120 (with
            ``stationary_warmup_s`` 20) is the setting to use where steady-load accuracy matters
            more than speed (its gain and cost: look-ahead README).
        stationary_warmup_s: with ``stationary_duration_s``, the score counts only the requests
            arriving after this [s], in [0, stationary_duration_s); 0 (20 with 120 s streams gave
            the same decisions as 0: look-ahead README).
        overload_rate_factor: ``"requests"``: a forecast rate above this multiple of the
            candidates' throughput bound (:meth:`LookaheadPredictor.rate_cap_rps`) is simulated at
            that multiple and its score extrapolated along the backlog's growth (module docstring,
            "Overload clip"), > 1 (``inf``: never clip); 2.0: every candidate's queue grows at
            least at half the simulated rate, so the backlog dominates its TTFT and the
            extrapolation's fluid approximation holds. The bound is a hard one (no candidate
            serves more), so a rate that some candidate can serve is never clipped (on the
            conversation trace it lies just under the measured capacity: look-ahead README).
        seed: seeds the prompts and arrivals (with the mix) and the look-ahead simulations.

    Raises:
        ValueError: naming the field, on an out-of-range value.
    """

    duration_s: float = 60.0
    min_requests: int = 150
    rate_bucket_ratio: float = 1.1
    source: str = "requests"
    max_sample_requests: int = 1024
    num_replications: int = 3
    screen_margin: float = 0.2
    warmup_s: float = 0.0
    stationary_duration_s: float = 60.0
    stationary_warmup_s: float = 0.0
    overload_rate_factor: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ValueError(f"lookahead.duration_s must be a finite number > 0, got {self.duration_s!r}")
        if not (isinstance(self.min_requests, int) and self.min_requests >= 10):
            raise ValueError(f"lookahead.min_requests must be an integer >= 10, got {self.min_requests!r}")
        if not (self.rate_bucket_ratio > 1 and math.isfinite(self.rate_bucket_ratio)):
            raise ValueError(f"lookahead.rate_bucket_ratio must be a finite number > 1, got {self.rate_bucket_ratio!r}")
        if self.source not in ("requests", "histogram"):
            raise ValueError(f"lookahead.source must be 'requests' or 'histogram', got {self.source!r}")
        if not (isinstance(self.max_sample_requests, int) and self.max_sample_requests >= 1):
            raise ValueError(f"lookahead.max_sample_requests must be an integer >= 1, got {self.max_sample_requests!r}")
        if not (isinstance(self.num_replications, int) and self.num_replications >= 1):
            raise ValueError(f"lookahead.num_replications must be an integer >= 1, got {self.num_replications!r}")
        if not (self.screen_margin >= 0):
            raise ValueError(f"lookahead.screen_margin must be a number >= 0 (inf: no screening), got {self.screen_margin!r}")
        if not (0 <= self.warmup_s < self.duration_s):
            raise ValueError(f"lookahead.warmup_s must be in [0, duration_s = {self.duration_s}), got {self.warmup_s!r}")
        if not (self.stationary_duration_s >= self.duration_s and math.isfinite(self.stationary_duration_s)):
            raise ValueError(f"lookahead.stationary_duration_s must be finite and >= duration_s = {self.duration_s}, "
                             f"got {self.stationary_duration_s!r}")
        if not (0 <= self.stationary_warmup_s < self.stationary_duration_s):
            raise ValueError(f"lookahead.stationary_warmup_s must be in [0, stationary_duration_s = "
                             f"{self.stationary_duration_s}), got {self.stationary_warmup_s!r}")
        if not (isinstance(self.overload_rate_factor, (int, float)) and not isinstance(self.overload_rate_factor, bool)
                and self.overload_rate_factor > 1):
            raise ValueError(f"lookahead.overload_rate_factor must be a number > 1 (inf: never clip), "
                             f"got {self.overload_rate_factor!r}")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ValueError(f"lookahead.seed must be an integer >= 0, got {self.seed!r}")

    def span(self, stationary: bool = False) -> tuple[float, float]:
        """``(duration_s, warmup_s)`` of a ``"requests"`` stream: the stationary pair when
        ``stationary``."""
        return (self.stationary_duration_s, self.stationary_warmup_s) if stationary else (self.duration_s, self.warmup_s)

    def bucket_rate(self, rate_rps: float) -> float:
        """``rate_rps`` rounded to the nearest point of the geometric grid ``ratio^k`` [req/s]."""
        if not (rate_rps > 0 and math.isfinite(rate_rps)):
            raise ValueError(f"look-ahead rate must be a finite number > 0, got {rate_rps!r}")
        k = round(math.log(rate_rps) / math.log(self.rate_bucket_ratio))
        return float(self.rate_bucket_ratio ** k)


@dataclass(frozen=True)
class TransitionPlan:
    """How a look-ahead stream reaches its candidate composition: from the pool's current
    composition, through the simulator's own split/merge protocol, as the controller would move
    (``ControllerConfig.target_transition``).

    Without a plan every look-ahead stream runs on the candidate composition from its first
    request: a move looks free, though in the run it drains the workers taking part (their queued
    and running prefills finish first), takes them out of service for the switch and confirmation
    (1.1-5.1 s per operation, paper §9) and leaves the new workers' prefix caches empty. With a
    plan the stream starts on ``from_composition`` and, when its scored part begins, the
    controller's own move starts: every ``decision_window_s`` the operations of
    :func:`~envs.planning.operations.operations_towards` (at most ``max_gpus_per_window`` GPUs and
    ``max_ops_per_window`` operations per window, ranked as in the paper) run through the
    simulator's :class:`~envs.sim.reconfig.Reconfigurator` with ``reconfig``, so the scored
    requests pay the drain, the switch and the lost caches, and staying put costs nothing.

    Not modelled (the stream may reach a candidate the run cannot, or sooner): a counts-form
    ``from_composition`` is laid out afresh (largest degree first, :mod:`envs.sim.pool`), not as the
    run's workers stand, so sibling pairs, and with three or more degrees which merges are
    possible, can differ (an explicit ``cp<C>@<first_gpu>`` text keeps the placement); the
    controller's dwell-time lockout (``ControllerConfig.min_dwell_s``) is not applied; operations
    still in flight at the decision are counted as committed, their remaining cost unscored.

    Args:
        from_composition: the pool's composition when the decision is taken (counts form); the
            controller passes its projected composition (in-flight operations committed).
        reconfig: the run's reconfiguration timing (``ControllerConfig.reconfig``).
        decision_window_s: seconds between two planning steps (``ControllerConfig.decision_window_s``), > 0.
        max_gpus_per_window: GPU budget of one planning step (the controller's
            ``max_gpu_share_per_window`` x pool GPUs), > 0.
        max_ops_per_window: operations per planning step (``ControllerConfig.max_ops_per_window``), >= 1.

    Raises:
        ValueError: naming the field, on a value of the wrong type or out of range (a
            ``from_composition`` the run's pool rejects: :meth:`check_pool`, called by
            :meth:`LookaheadPredictor.score_from_requests`).
    """

    from_composition: str
    reconfig: ReconfigConfig
    decision_window_s: float
    max_gpus_per_window: float
    max_ops_per_window: int

    def __post_init__(self) -> None:
        def number(x) -> bool:
            return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))

        if not (isinstance(self.from_composition, str) and self.from_composition):
            raise ValueError(f"transition.from_composition must be a composition text, got {self.from_composition!r}")
        if not isinstance(self.reconfig, ReconfigConfig):
            raise ValueError(f"transition.reconfig must be a ReconfigConfig, got {self.reconfig!r}")
        if not (number(self.decision_window_s) and self.decision_window_s > 0 and math.isfinite(self.decision_window_s)):
            raise ValueError(f"transition.decision_window_s must be a finite number > 0, got {self.decision_window_s!r}")
        if not (number(self.max_gpus_per_window) and self.max_gpus_per_window > 0):
            raise ValueError(f"transition.max_gpus_per_window must be > 0, got {self.max_gpus_per_window!r}")
        if not (isinstance(self.max_ops_per_window, (int, np.integer)) and not isinstance(self.max_ops_per_window, bool)
                and self.max_ops_per_window >= 1):
            raise ValueError(f"transition.max_ops_per_window must be an integer >= 1, got {self.max_ops_per_window!r}")

    def check_pool(self, pool) -> None:
        """Raises ValueError naming ``transition.from_composition`` unless ``pool`` (a
        :class:`~envs.sim.PoolConfig`: its GPUs, nodes and supported degrees) accepts it."""
        try:
            degree_counts(self.from_composition, pool)
        except ValueError as exc:
            raise ValueError(f"transition.from_composition {self.from_composition!r} does not fit the run's pool "
                             f"({pool.num_gpus} GPUs, degrees {list(pool.supported_degrees)}): {exc}") from None

    def memo_key(self) -> tuple:
        """Everything of the plan that changes a look-ahead result, for the predictor's memo keys
        (:attr:`LookaheadPredictor.stream_memo`): ``("transition", switch_s, confirm_s_per_rank,
        drain_sync_s, decision_window_s, max_gpus_per_window, max_ops_per_window, "from",
        from_composition)``."""
        r = self.reconfig
        return ("transition", float(r.switch_s), float(r.confirm_s_per_rank), float(r.drain_sync_s),
                float(self.decision_window_s), float(self.max_gpus_per_window), int(self.max_ops_per_window),
                "from", self.from_composition)


def screened_scores(compositions: list[str], rates: list[float], value, num_streams: int, margin: float,
                    keep: tuple[str, ...] = ()) -> dict[str, float]:
    """Successive screening of candidates over replicated streams (a pure function of ``value``).

    Every composition gets stream 0 at every rate; before each further stream ``r <
    num_streams``, the compositions whose score so far exceeds the best score so far by more than
    ``margin`` (relative) stop, except those in ``keep``. A composition's score is the mean over
    ``rates`` of the mean of its streams at that rate, so with ``margin = inf`` it is the full
    evaluation (every composition on every stream).

    Args:
        compositions: candidates.
        rates: rates to average over, items ``value`` accepts (duplicates weigh twice).
        value: ``(composition, rate, stream) -> predicted mean TTFT [s]``; called only for the
            (composition, rate, stream) triples the screening needs.
        num_streams: streams per rate, >= 1.
        margin: relative screening margin, >= 0.
        keep: compositions never screened out.

    Returns:
        ``{composition: score}`` in the order of ``compositions``.
    """
    def score(c: str, n: int) -> float:
        return float(np.mean([np.mean([value(c, rate, rep) for rep in range(n)]) for rate in rates]))

    live = list(dict.fromkeys(compositions))
    scores = {c: score(c, 1) for c in live}
    for rep in range(1, num_streams):
        best = min(scores[c] for c in live)
        live = [c for c in live if c in keep or not scores[c] > best * (1.0 + margin)]
        for c in live:
            scores[c] = score(c, rep + 1)
    return {c: scores[c] for c in compositions}


class LookaheadPredictor:
    """Predicted mean TTFT of candidate compositions (module docstring).

    Args:
        table: the controller's capacity table (its run settings, calibration, class edges and
            reference mixes).
        make_router: ``() -> Router`` for the look-ahead runs (the run's router kind; the
            controller passes a default :class:`~baselines.vertumnus.VertumnusRouter`).
        config: :class:`LookaheadConfig`.

    Attributes:
        num_simulations: look-ahead simulations run (memo misses x candidates).
        num_clipped_rates: forecast rates of :meth:`score_from_requests` calls simulated at
            :meth:`rate_cap_rps` instead (module docstring, "Overload clip").
        backlog_slopes: ``{stream_memo key: {composition: backlog slope [s per req/s]}}`` of
            every ``"requests"`` simulation (:meth:`_simulate_stream`); a score at a clipped rate
            is the memo's mean TTFT at the cap plus ``(rate - cap) x slope``.
        score_calls: ``(compositions, bucketed rates, key, keep, (duration_s, warmup_s))`` of every
            :meth:`score_from_requests` call (with the per-stream memo, enough to replay the
            screening offline); the rates are the
            simulated ones (the memo's), a clipped rate its cap's bucket.
        stream_memo: ``{(key, rate bucket, stream, (duration_s, warmup_s[, "replay"][, *transition])):
            {composition: predicted mean TTFT [s]}}`` of the ``"requests"`` source (``"replay"``:
            streams after the sample's replay; ``transition``: :meth:`TransitionPlan.memo_key`).
    """

    def __init__(self, table: CapacityTable, make_router, config: LookaheadConfig | None = None) -> None:
        self.table = table
        self.make_router = make_router
        self.config = config or LookaheadConfig()
        self._memo: dict[tuple, dict[str, float]] = {}  # histogram source: (mix, rate, candidates) -> predictions
        self.stream_memo: dict[tuple, dict[str, float]] = {}  # (key, rate, stream, span) -> {composition: TTFT}
        self.num_simulations = 0
        self.score_calls: list[tuple] = []  # (compositions, rates, key, keep, span) per score_from_requests call
        self.num_clipped_rates = 0  # forecast rates of score_from_requests calls above rate_cap_rps
        self.backlog_slopes: dict[tuple, dict[str, float]] = {}  # stream_memo key -> {composition: d TTFT / d rate}
        self._uncached_moments: dict[tuple, tuple[float, float]] = {}  # sample key -> (E[R], E[R (R + 1) / 2])
        self._coefficients: tuple[float, float, float] | None = None  # (a, c, alpha): least over the pool's calibrations

    def stream(self, shares: np.ndarray, rate_rps: float) -> Workload:
        """The constant-rate Poisson stream of one prediction: ``max(min_requests, rate x
        duration_s)`` uncached prompts drawn from the class histogram ``shares`` (shape
        ``(num_classes,)``), seeded by ``config.seed``, the histogram and the rate (a pure
        function of them: common random numbers for every candidate)."""
        cfg = self.config
        shares = np.asarray(shares, float)
        n = max(cfg.min_requests, math.ceil(rate_rps * cfg.duration_s))
        entropy = [cfg.seed, int(round(rate_rps * 1e6)), *np.round(shares * 1e9).astype(np.int64).tolist()]
        rng = np.random.default_rng(np.random.SeedSequence(entropy))
        lengths = self.table._sample(shares, rng, n)
        arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, n))
        cal = self.table.calibration
        lengths = np.minimum(lengths, cal.max_prompt_tokens)
        bs = max(512, int(lengths.max()))  # one KV block per prompt: uncached (hits are in the lengths)
        reqs = tuple(Request(i, float(t), int(x), 1, (i,))
                     for i, (t, x) in enumerate(zip(arrivals.tolist(), lengths.tolist())))
        return Workload("lookahead", reqs, kv_block_size_tokens=bs)

    def resampled_stream(self, sample: list[Request], kv_block_size_tokens: int, rate_rps: float, key: tuple,
                         duration_s: float | None = None) -> Workload:
        """The constant-rate Poisson stream of one prediction drawn (with replacement, seeded by
        ``config.seed`` and ``key``) from observed requests ``sample``: their prompt lengths and
        their *shared* prefix blocks (a block hash seen in at least two distinct requests of the
        sample, e.g. a system prompt, keeps its hash, so the look-ahead pool hits it as the run's
        pool does); every other block gets a fresh hash per drawn request (a drawn body never hits
        the copy it was drawn from). ``duration_s``: the span [s] (default ``config.duration_s``).

        Common random numbers across rates too: the draws depend on ``config.seed`` and ``key``
        only (one generator for the picks, one for unit-mean exponential gaps, both consumed one
        value per request), so the stream at a higher rate is the same requests in the same order
        with every gap divided by the rate, and a longer stream extends a shorter one. With
        independent draws per rate, neighbouring rate buckets of a heavy-tailed mix ranked the
        candidates in opposite ways and the target flapped every window
        (look-ahead README)."""
        cfg = self.config
        n = max(cfg.min_requests, math.ceil(rate_rps * (cfg.duration_s if duration_s is None else duration_s)))
        counts: dict[int, int] = {}
        for r in sample:
            for h in set(r.block_hashes):
                counts[h] = counts.get(h, 0) + 1
        pick_seq, gap_seq = np.random.SeedSequence([cfg.seed, *[int(x) for x in key]]).spawn(2)
        pick = np.minimum((np.random.default_rng(pick_seq).random(n) * len(sample)).astype(np.int64), len(sample) - 1)
        arrivals = np.cumsum(np.random.default_rng(gap_seq).standard_exponential(n)) / rate_rps
        fresh = -1
        reqs = []
        for i, (j, t) in enumerate(zip(pick.tolist(), arrivals.tolist())):
            r = sample[j]
            hashes = []
            for h in r.block_hashes:
                if counts[h] >= 2:
                    hashes.append(h)
                else:
                    hashes.append(fresh)
                    fresh -= 1
            L, nb = self._capped(r, kv_block_size_tokens)
            reqs.append(Request(i, float(t), L, 1, tuple(hashes[:nb])))
        return Workload("lookahead", tuple(reqs), kv_block_size_tokens=kv_block_size_tokens)

    def _capped(self, request: Request, kv_block_size_tokens: int) -> tuple[int, int]:
        """``(prompt tokens, KV blocks)`` of ``request`` in a look-ahead stream: the prompt capped at
        the model context (``Calibration.max_prompt_tokens``), and its number of blocks."""
        L = min(request.num_prompt_tokens, self.table.calibration.max_prompt_tokens)
        return int(L), -(-L // kv_block_size_tokens)

    def rate_cap_rps(self, compositions: list[str], sample: list[Request], kv_block_size_tokens: int, key: tuple,
                     transition: TransitionPlan | None = None) -> float:
        """The highest rate [req/s] a ``"requests"`` stream is simulated at: ``overload_rate_factor``
        times the largest throughput bound of ``compositions`` (and ``transition.from_composition``,
        where a transitioning stream starts) for streams resampled from ``sample`` (``inf`` with
        ``overload_rate_factor = inf``). ``key`` identifies the sample (as in
        :meth:`score_from_requests`; its moments are memoised).

        The bound of a composition is a rate it cannot serve, under any router: its ``G`` GPUs
        give ``G`` GPU-seconds per second, and a request of ``R`` uncached and ``P`` cached tokens
        on a degree-``C`` worker occupies ``C`` GPUs for at least its marginal step time
        ``f_C (a R + b P + (c R + alpha (R P + R (R + 1) / 2)) / C)`` (the step's fixed ``d`` is
        shared by the batch; ``f_C`` the run's prediction bias of degree ``C``, a straggler only
        slows a step), i.e. at least ``f (C_min a R + c R + alpha R (R + 1) / 2)`` GPU-seconds with
        ``C_min`` the composition's smallest degree, ``f`` its least bias factor and ``a, c,
        alpha`` the least over the pool's calibrations. ``R`` is at least the prompt (capped at the
        model context) less its leading blocks shared in the sample: only those can hit in a
        look-ahead stream (:meth:`resampled_stream` gives every other block a fresh hash), and
        the bound takes them all as hits. So the bound is ``G / (f (C_min a E[R] + c E[R] + alpha
        E[R (R + 1) / 2]))`` over the sample.
        """
        factor = self.config.overload_rate_factor
        if not math.isfinite(factor):
            return math.inf
        key = tuple(int(x) for x in key)
        moments = self._uncached_moments.get(key)
        if moments is None:
            moments = self._uncached_moments[key] = self._uncached_token_moments(sample, kv_block_size_tokens)
        m1, m2 = moments
        a, c, alpha = self._least_coefficients()
        pool = self.table.config.pool
        pe = self.table.config.prediction_error
        bound = 0.0
        comps = list(compositions) + ([transition.from_composition] if transition is not None else [])
        for comp in comps:
            counts = {d: n for d, n in degree_counts(comp, pool).items() if n}
            gpus = sum(d * n for d, n in counts.items())
            c_min = min(counts)
            f = min(pe.factor_for(d) for d in counts)
            gpu_s = f * (c_min * a * m1 + c * m1 + alpha * m2)
            bound = max(bound, gpus / gpu_s if gpu_s > 0 else math.inf)
        return factor * bound

    def _uncached_token_moments(self, sample: list[Request], kv_block_size_tokens: int) -> tuple[float, float]:
        """``(E[R], E[R (R + 1) / 2])`` over ``sample`` of the fewest uncached tokens ``R`` a
        resampled copy of a request can have: its capped prompt less its leading shared blocks
        (:meth:`rate_cap_rps`), at least one token (the simulator recomputes the last one)."""
        counts: dict[int, int] = {}
        for r in sample:
            for h in set(r.block_hashes):
                counts[h] = counts.get(h, 0) + 1
        rs = np.empty(len(sample))
        for i, r in enumerate(sample):
            L, nb = self._capped(r, kv_block_size_tokens)
            lead = 0
            for h in r.block_hashes[:nb]:
                if counts[h] < 2:
                    break
                lead += 1
            rs[i] = L - min(L - 1, lead * kv_block_size_tokens)
        return float(rs.mean()), float((rs * (rs + 1.0) * 0.5).mean())

    def _least_coefficients(self) -> tuple[float, float, float]:
        """``(a, c, alpha)`` of the cost model, each the least over the table's calibration and
        the run's node calibrations (a heterogeneous pool: ``SimConfig.node_calibration_paths``)."""
        if self._coefficients is None:
            cals = [self.table.calibration] + [Calibration.load(p) for p in self.table.config.node_calibration_paths if p]
            cms = [cal.cost_model() for cal in cals]
            self._coefficients = (min(cm.a for cm in cms), min(cm.c for cm in cms), min(cm.alpha for cm in cms))
        return self._coefficients

    def after_replay(self, sample: list[Request], kv_block_size_tokens: int, stream: Workload) -> tuple[Workload, float]:
        """``stream`` preceded by ``sample`` itself: the observed requests replayed in arrival
        order at their observed gaps (first arrival at 0 s; prompts capped at the model context as
        in :meth:`resampled_stream`, every block hash kept), then ``stream`` shifted to start just
        after the last of them. Returns ``(workload, scored_from_s)``: the caller scores only the
        requests arriving at or after ``scored_from_s`` [s] (the shifted stream). So the candidate
        pool starts the scored stream with the prefix caches and queues that the observed traffic
        builds on it, not idle and cold (``ControllerConfig.target_replay_sample``)."""
        t0 = sample[0].arrival_time_s
        reqs = []
        for i, r in enumerate(sample):
            L, nb = self._capped(r, kv_block_size_tokens)
            reqs.append(Request(i, r.arrival_time_s - t0, L, 1, r.block_hashes[:nb]))
        # strictly after the last replayed arrival, so the score's arrival filter splits the two parts
        scored_from_s = math.nextafter(sample[-1].arrival_time_s - t0, math.inf)
        for r in stream.requests:
            reqs.append(Request(len(reqs), r.arrival_time_s + scored_from_s, r.num_prompt_tokens, 1, r.block_hashes))
        return Workload("lookahead", tuple(reqs), kv_block_size_tokens=kv_block_size_tokens), scored_from_s

    def predict_from_requests(self, compositions: list[str], sample: list[Request], kv_block_size_tokens: int,
                              rate_rps: float, key: tuple, keep: tuple[str, ...] = (),
                              stationary: bool = False, replay_sample: bool = False) -> dict[str, float]:
        """Predicted mean TTFT [s] of each composition at ``rate_rps`` for a stream resampled from
        the observed requests ``sample`` (:meth:`resampled_stream`): :meth:`score_from_requests`
        at the single rate ``rate_rps``."""
        return self.score_from_requests(compositions, sample, kv_block_size_tokens, [rate_rps], key, keep, stationary,
                                        replay_sample)

    def score_from_requests(self, compositions: list[str], sample: list[Request], kv_block_size_tokens: int,
                            rates_rps: list[float], key: tuple, keep: tuple[str, ...] = (),
                            stationary: bool = False, replay_sample: bool = False,
                            transition: TransitionPlan | None = None) -> dict[str, float]:
        """Score [s] of each composition: the mean over ``rates_rps`` of its predicted mean TTFT at
        that rate for streams resampled from the observed requests ``sample``
        (:meth:`resampled_stream`), evaluated by successive screening (class docstring). A rate
        above :meth:`rate_cap_rps` is simulated at that cap and its score carried to the rate
        along the backlog's growth (module docstring, "Overload clip").

        Every composition runs on stream 0 at every rate; before each further stream ``r`` (up to
        ``num_replications``) the compositions whose score so far exceeds the best score so far by
        more than ``screen_margin`` (relative) are dropped, except those in ``keep`` (the
        controller's current target: its predicted gain is always measured on all streams). A
        composition's score is the mean over the streams it ran. Per-stream results are memoised
        per (``key``, rate bucket, stream, composition): ``key`` (integers) must identify the sample
        (the controller passes the sample's first request index and size); later calls reuse them
        and extend only what they need.

        Args:
            compositions: candidate compositions (counts form).
            sample: observed requests to resample, at least one.
            kv_block_size_tokens: the run's KV block size [tokens].
            rates_rps: arrival rates [req/s], each > 0 (clipped at :meth:`rate_cap_rps`, then
                bucketed; duplicates weigh twice).
            key: integers identifying ``sample``.
            keep: compositions evaluated on every stream regardless of the screening.
            stationary: the load is stationary: streams span ``stationary_duration_s`` and are
                scored after ``stationary_warmup_s`` (:meth:`LookaheadConfig.span`).
            replay_sample: each stream is preceded by ``sample`` replayed as observed, not scored
                (:meth:`after_replay`; memoised apart from the streams without it).
            transition: the stream starts on ``transition.from_composition`` and moves to each
                candidate when its scored part begins (after the replay and the warm-up,
                :class:`TransitionPlan`; memoised per plan, :meth:`TransitionPlan.memo_key`);
                ``None``: each candidate from the start.

        Returns:
            ``{composition: score [s]}`` (``inf`` for a composition that finishes no request).

        Raises:
            ValueError: on a non-positive rate, no rate, an empty sample or a composition the pool
                rejects (``transition.from_composition`` named, before any simulation).
        """
        if not sample:
            raise ValueError("a look-ahead sample needs at least one request")
        if not rates_rps:
            raise ValueError("a look-ahead score needs at least one rate")
        cfg = self.config
        for r in rates_rps:
            cfg.bucket_rate(r)  # validates every rate before the cap is computed
        key = tuple(int(x) for x in key)
        if transition is not None:
            transition.check_pool(self.table.config.pool)
        cap = self.rate_cap_rps(compositions, sample, kv_block_size_tokens, key, transition)
        self.num_clipped_rates += sum(r > cap for r in rates_rps)
        # (forecast bucket, simulated bucket) per rate: the same below the cap
        rates = [(cfg.bucket_rate(r), cfg.bucket_rate(min(r, cap))) for r in rates_rps]
        span = cfg.span(stationary)
        memo_span = span + ("replay",) if replay_sample else span
        if transition is not None:
            memo_span = memo_span + transition.memo_key()
        self.score_calls.append((tuple(compositions), tuple(sim for _, sim in rates), key, tuple(keep), memo_span))
        streams: dict[tuple[float, int], Workload] = {}  # generated once per call, on first use

        def value(c: str, rate: tuple[float, float], rep: int) -> float:
            forecast, simulated = rate
            memo_key = (key, simulated, rep, memo_span)
            memo = self.stream_memo.setdefault(memo_key, {})
            if c not in memo:
                got = streams.get((simulated, rep))
                if got is None:
                    wl = self.resampled_stream(sample, kv_block_size_tokens, simulated, key + ((rep,) if rep else ()),
                                               span[0])
                    got = streams[(simulated, rep)] = (self.after_replay(sample, kv_block_size_tokens, wl)
                                                       if replay_sample else (wl, 0.0))
                memo[c], self.backlog_slopes.setdefault(memo_key, {})[c] = self._simulate_stream(
                    c, got[0], got[1], got[1] + span[1], transition)
            if forecast == simulated:
                return memo[c]
            return memo[c] + (forecast - simulated) * self.backlog_slopes[memo_key][c]  # clipped: backlog growth

        return screened_scores(compositions, rates, value, cfg.num_replications, cfg.screen_margin, keep)

    def predict(self, compositions: list[str], shares: np.ndarray, rate_rps: float) -> dict[str, float]:
        """Predicted mean TTFT [s] of each composition at ``rate_rps`` for the mix ``shares``.

        The mix is replaced by its reference mix in the capacity table (assigned, not observed)
        and the rate by its bucket; the result is memoised per (reference mix, rate bucket).

        Args:
            compositions: candidate compositions of the run's pool (counts form, e.g. ``cp4x6,cp2x8``).
            shares: shape ``(num_classes,)``, request shares of the length classes, sum 1.
            rate_rps: arrival rate [requests/s], > 0.

        Returns:
            ``{composition: mean TTFT [s]}`` (``inf`` for a composition that finishes no request).

        Raises:
            ValueError: on a non-positive rate or a composition the pool rejects.
        """
        rate = self.config.bucket_rate(rate_rps)
        ref = self.table.references[self.table._reference(np.asarray(shares, float))].shares
        key = (ref.tobytes(), rate, tuple(compositions))
        got = self._memo.get(key)
        if got is None:
            wl = self.stream(ref, rate)
            got = self._memo[key] = {c: self._simulate(c, wl) for c in compositions}
        return dict(got)

    def _simulate(self, composition: str, workload: Workload, warmup_s: float | None = None,
                  transition: TransitionPlan | None = None, transition_at_s: float = 0.0) -> float:
        """Mean TTFT [s] of ``workload``'s requests arriving at or after ``warmup_s`` [s] (default
        ``config.warmup_s``) on ``composition`` (``inf`` if none finishes); with ``transition`` the
        pool starts on ``transition.from_composition`` and the move to ``composition`` starts at
        ``transition_at_s`` [s] (:meth:`_schedule_transition`). Raises ValueError on a composition
        the pool rejects."""
        return _mean_ttft_s(self._run(composition, workload, transition, transition_at_s),
                            self.config.warmup_s if warmup_s is None else warmup_s)

    def _run(self, composition: str, workload: Workload, transition: TransitionPlan | None,
             transition_at_s: float) -> dict:
        """The records of one look-ahead simulation (:meth:`_simulate`)."""
        base = self.table.config
        start = composition if transition is None else transition.from_composition
        cfg = replace(base, pool=replace(base.pool, composition=start), horizon_s=None, record_events=False,
                      seed=self.config.seed)
        self.num_simulations += 1
        sim = Simulator(workload, cfg, self.table.calibration)
        if transition is not None:
            self._schedule_transition(sim, degree_counts(composition, cfg.pool), transition, transition_at_s)
        return sim.run(self.make_router()).records

    def _simulate_stream(self, composition: str, workload: Workload, stream_start_s: float, warmup_s: float,
                         transition: TransitionPlan | None = None) -> tuple[float, float]:
        """``(mean TTFT [s], backlog slope [s per req/s])`` of a ``"requests"`` stream starting at
        ``stream_start_s`` (after a replay, else 0) and scored from ``warmup_s``
        (:meth:`_simulate`; a transition starts at ``warmup_s``). The backlog slope is the
        derivative of the mean TTFT in the stream's rate when the pool cannot keep up (module
        docstring, "Overload clip"): the scored requests' mean arrival time since the stream
        start over the pool's throughput, the requests finishing from the stream start to the
        last finish per second (the pool is busy throughout when overloaded); ``inf`` when
        nothing finishes."""
        rec = self._run(composition, workload, transition, warmup_s)
        mean = _mean_ttft_s(rec, warmup_s)
        arr, fin, ttft = rec["arrival_s"], rec["finish_s"], rec["ttft_s"]
        done = np.isfinite(fin)
        t_end = float(fin[done].max()) if done.any() else -math.inf
        served = int((fin[done] >= stream_start_s).sum())
        scored = (arr >= warmup_s) & np.isfinite(ttft)
        if t_end <= stream_start_s or not served or not scored.any():
            return mean, math.inf
        throughput = served / (t_end - stream_start_s)
        return mean, float((arr[scored] - stream_start_s).mean()) / throughput

    @staticmethod
    def _schedule_transition(sim: Simulator, target: dict[int, int], plan: TransitionPlan, at_s: float) -> None:
        """Schedules the planning steps of ``plan`` towards ``target`` on ``sim``: the first at
        ``at_s`` [s], then every ``plan.decision_window_s`` until the projected composition is ``target``,
        nothing eligible helps and no operation is still uncommitted (an operation past its switch
        but not yet confirmed holds SWITCHING workers that are not eligible yet, as in the run's
        next window), or the next step would come after the workload's last arrival."""
        target = {d: n for d, n in target.items() if n}
        if projected_degree_counts(sim) == target:
            return
        recon = get_reconfigurator(sim, plan.reconfig)
        reqs = sim.workload.requests
        last_arrival_s = reqs[-1].arrival_time_s if reqs else 0.0

        def step(_payload) -> None:
            ops = operations_towards(sim, target, plan.max_gpus_per_window)[:plan.max_ops_per_window]
            for op in ops:
                recon.apply(op)
            done = projected_degree_counts(sim) == target
            if not done and (ops or recon.uncommitted()) and sim.env.now + plan.decision_window_s <= last_arrival_s:
                sim.schedule(plan.decision_window_s, EventPriority.CONTROL, step)

        sim.schedule(at_s, EventPriority.CONTROL, step)


def _mean_ttft_s(records: dict, warmup_s: float) -> float:
    """Mean TTFT [s] of the finished requests of a simulation's ``records`` arriving at or after
    ``warmup_s`` [s]; ``inf`` if none finished."""
    ttft = records["ttft_s"]
    if warmup_s > 0:
        ttft = ttft[records["arrival_s"] >= warmup_s]
    ttft = ttft[np.isfinite(ttft)]
    return float(ttft.mean()) if ttft.size else math.inf
