"""Frozen, validated configuration of one simulation run.

Every field has a unit in its name and a documented default with its rationale. A
:class:`SimConfig` plus a workload and a policy fully determine a run (with ``seed``).

The fields' ``option`` metadata (``envs/sim/options.py``) makes the simulator, pool and KV-tier
flags of the CLI (``experiments.common.add_sim_arguments``): each default is defined here once.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, field

from envs.sim.checks import is_finite_number
from envs.sim.cost_model import DEFAULT_CALIBRATION, DEFAULT_CALIBRATION_DESCRIPTION
from envs.sim.fault_config import FaultConfig, load_fault_config
from envs.sim.links import LinkConfig
from envs.sim.options import nested, option
from envs.sim.pool import PoolConfig
from envs.sim.tier_config import TierConfig


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check_int(obj, name: str, label: str, low: int) -> None:
    """Raises ValueError naming ``label`` unless the field ``name`` of ``obj`` is an integer (a
    Python or numpy one, bool excluded) ``>= low``; stores it as a Python int."""
    v = getattr(obj, name)
    _check(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= low,
           f"{label} must be an integer >= {low}, got {v!r}")
    object.__setattr__(obj, name, int(v))


def _check_type(value: object, cls: type, label: str, allow_none: bool = False) -> None:
    """Raises ValueError naming ``label`` unless ``value`` is a ``cls`` (or ``None`` if allowed)."""
    _check(isinstance(value, cls) or (allow_none and value is None),
           f"{label} must be of type {cls.__name__}{' or None' if allow_none else ''}, got {type(value).__name__} "
           f"{value!r:.60}")


@dataclass(frozen=True)
class EngineConfig:
    """Per-worker prefill engine.

    Args:
        max_batch_tokens: token budget of one engine step [new tokens]. FCFS requests join the
            step while the sum of their new tokens stays within the budget; a request larger
            than the budget runs alone (no chunked prefill). 16,384 is a common prefill budget
            (e.g. vLLM/SGLang ``max_num_batched_tokens`` / ``chunked_prefill_size`` settings for
            long-context prefill instances).
        max_batch_requests: at most this many requests per step.
    """

    max_batch_tokens: int = option(16384, "engine step token budget [new tokens]")
    max_batch_requests: int = field(default=64, metadata={"cli": False})

    def __post_init__(self) -> None:
        # integers: 1.5 and inf were accepted, a string failed inside a comparison
        _check_int(self, "max_batch_tokens", "engine.max_batch_tokens", 1)
        _check_int(self, "max_batch_requests", "engine.max_batch_requests", 1)


@dataclass(frozen=True)
class LatencyConfig:
    """TTFT terms outside the prefill pool (paper §3: TTFT includes KV transfer and first token).

    Args:
        kv_handoff_bandwidth_bytes_per_s: prefill->decode KV transfer rate [B/s]. 25 GB/s is
            the figure of the Vertumnus walk-through's hand-off example (a 200 Gbit/s RDMA NIC).
        first_decode_step_s: time of the first decode step that emits the first token [s];
            30 ms is a typical decode iteration of a 30B-class MoE model at moderate batch.
    """

    kv_handoff_bandwidth_bytes_per_s: float = option(25e9, "prefill->decode KV hand-off bandwidth [GB/s]",
                                                     flag="--kv-handoff-gbps", scale=1e9)
    first_decode_step_s: float = option(0.030, "first decode step added to TTFT [s]")

    def __post_init__(self) -> None:
        _check(is_finite_number(self.kv_handoff_bandwidth_bytes_per_s) and self.kv_handoff_bandwidth_bytes_per_s > 0,
               "latency.kv_handoff_bandwidth_bytes_per_s must be a finite number > 0, "
               f"got {self.kv_handoff_bandwidth_bytes_per_s!r}")
        _check(is_finite_number(self.first_decode_step_s) and self.first_decode_step_s >= 0,
               f"latency.first_decode_step_s must be a finite number >= 0, got {self.first_decode_step_s!r}")


@dataclass(frozen=True)
class PredictionErrorConfig:
    """Gap between the router's predicted and the simulated (actual) execution time.

    ``actual_step_s = predicted_step_s * bias * exp(N(-sigma^2/2, sigma))`` per engine step,
    so the mean multiplicative error is ``bias`` and ``noise_sigma`` sets its spread (log-normal).
    ``degree_bias`` multiplies further per CP degree, e.g. ``((4, 1.15),)`` to model CP-4
    communication that the fitted model under-predicts by 15%.
    """

    bias: float = option(1.0, "actual/predicted execution time factor", flag="--prediction-bias")
    noise_sigma: float = option(0.0, "log-normal sigma of actual/predicted per step", flag="--prediction-noise")
    degree_bias: tuple[tuple[int, float], ...] = field(default=(), metadata={"cli": False})

    def __post_init__(self) -> None:
        _check(is_finite_number(self.bias) and self.bias > 0,
               f"prediction_error.bias must be a finite number > 0, got {self.bias!r}")
        _check(is_finite_number(self.noise_sigma) and self.noise_sigma >= 0,
               f"prediction_error.noise_sigma must be a finite number >= 0, got {self.noise_sigma!r}")
        db = self.degree_bias
        # a dict ({4: 1.15}) iterated its keys and failed inside len(); a degree named twice kept the
        # last factor, a degree no pool can have (3, 4.5) was accepted and never applied
        _check(isinstance(db, (tuple, list)), f"prediction_error.degree_bias must be a tuple of (degree, factor) pairs, "
                                              f"got {type(db).__name__} {db!r:.60}")
        seen: set[int] = set()
        for item in db:
            _check(isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], numbers.Integral)
                   and not isinstance(item[0], bool) and item[0] >= 1 and not item[0] & (item[0] - 1)
                   and is_finite_number(item[1]) and item[1] > 0,
                   f"prediction_error.degree_bias entries must be (CP degree: a power of two >= 1, finite factor > 0), "
                   f"got {item!r}")
            _check(int(item[0]) not in seen, f"prediction_error.degree_bias names CP degree {item[0]} twice")
            seen.add(int(item[0]))
        object.__setattr__(self, "degree_bias", tuple((int(d), float(f)) for d, f in db))

    def factor_for(self, degree: int) -> float:
        return self.bias * dict(self.degree_bias).get(degree, 1.0)


#: Default floor of the 'scaled' SLO rule [s] (:class:`SLOConfig`; named in its ``--slo`` help).
_MIN_TTFT_SLO_S = 1.0


@dataclass(frozen=True)
class SLOConfig:
    """TTFT SLO per request.

    Two kinds:

    * ``"fixed"``: every request has the SLO ``ttft_slo_s``.
    * ``"scaled"`` (default): ``max(min_ttft_slo_s, slo_scale * T_iso(L))`` where ``T_iso(L)`` is
      the isolated TTFT of the uncached prompt on one GPU — ``E_1(L, 0)`` plus KV hand-off plus
      first decode step — with the run's predicted cost model. This is the "SLO scale"
      convention of DistServe (OSDI'24) and Splitwise-style studies: an SLO proportional to the
      request's own minimum latency, because prefill time grows super-linearly with L so one
      fixed number is either trivial for short prompts or impossible for long ones. Scale 3
      tolerates about two requests' worth of queueing at single-GPU speed (and is met easily
      by CP-2/CP-4 workers when they are not overloaded); the 1 s floor keeps short prompts
      at an interactive bound rather than a few hundred milliseconds.
    """

    # --slo SECONDS|scaled sets kind and, with SECONDS, ttft_slo_s (experiments.common.sim_config_from_args)
    kind: str = option("scaled", "TTFT SLO: a fixed number of seconds, or 'scaled': "
                                 f"max({_MIN_TTFT_SLO_S:g} s, slo-scale x isolated single-GPU TTFT)",
                       flag="--slo", metavar="SECONDS|scaled")
    ttft_slo_s: float = field(default=5.0, metadata={"cli": False})
    # unset: given with a fixed --slo it is an error (it would have no effect)
    slo_scale: float = option(3.0, "scale of the 'scaled' SLO rule, only with --slo scaled", unset=True)
    min_ttft_slo_s: float = field(default=_MIN_TTFT_SLO_S, metadata={"cli": False})

    def __post_init__(self) -> None:
        _check(self.kind in ("fixed", "scaled"), f"slo.kind must be 'fixed' or 'scaled', got {self.kind!r}")
        _check(is_finite_number(self.ttft_slo_s) and self.ttft_slo_s > 0,
               f"slo.ttft_slo_s must be a finite number > 0, got {self.ttft_slo_s!r}")
        _check(is_finite_number(self.slo_scale) and self.slo_scale > 0,
               f"slo.slo_scale must be a finite number > 0, got {self.slo_scale!r}")
        _check(is_finite_number(self.min_ttft_slo_s) and self.min_ttft_slo_s >= 0,
               f"slo.min_ttft_slo_s must be a finite number >= 0, got {self.min_ttft_slo_s!r}")


#: ``--help`` title of the KV tier flags (:attr:`SimConfig.kv_tiers`).
KV_TIERS_GROUP = "KV tiers (off unless --kv-tiers names a tier below hbm; envs/sim/tier_config.py)"


@dataclass(frozen=True)
class SimConfig:
    """Everything but the workload and the policy.

    Args:
        pool: GPUs, topology and initial composition.
        engine: per-worker batching.
        latency: TTFT terms outside the pool.
        prediction_error: actual vs predicted execution time.
        slo: TTFT SLO rule.
        links: KV-transfer link bandwidths (replication, reconciliation).
        kv_tiers: KV tiers below HBM (host DRAM per node, remote store) and the fetch path;
            off by default (``envs/sim/tier_config.py``).
        cache_capacity_scale: multiplies every worker's prefix-cache capacity (the blocks kept
            for reuse; an ablation knob: e.g. 0.5 for a smaller HBM share, >1 to emulate a
            host-memory cache tier, 0 = no prefix reuse); the KV capacity a prompt's own
            computation gets (and so the longest servable prompt) is unchanged.
        calibration_path: calibration JSON; ``None`` = the shipped default
            ``envs.sim.cost_model.DEFAULT_CALIBRATION`` (Qwen3-30B-A3B on H20-3e).
        seed: seeds every random stream of the run (execution noise, randomised policies).
        horizon_s: stop simulating at this time [s]; ``None`` runs until every request finished.
            Requests unfinished at the horizon count as SLO misses.
        record_events: keep the ``(name, time_s)`` event trace (tests, debugging).
        faults: fault model (``envs/sim/fault_config.py``); ``None`` (default) = no faults.
        node_calibration_paths: heterogeneous pool: one calibration JSON per node (``""`` = the
            run's calibration), e.g. H20 and H20-3e nodes. Each worker's cost model, KV capacity
            and prompt limit come from its node's calibration, and routers see each worker's own
            model (``Worker.cost_model``, ``PoolView.predicted_service_s``). The TTFT SLOs and
            the controller's capacity profile use the run's calibration (``calibration_path``),
            so every policy is judged against the same SLOs. Empty (default): homogeneous.
    """

    pool: PoolConfig = nested(PoolConfig)
    engine: EngineConfig = nested(EngineConfig)
    latency: LatencyConfig = nested(LatencyConfig)
    prediction_error: PredictionErrorConfig = nested(PredictionErrorConfig)
    slo: SLOConfig = nested(SLOConfig)
    links: LinkConfig = nested(LinkConfig, cli=False)
    kv_tiers: TierConfig = nested(TierConfig, group=KV_TIERS_GROUP)
    cache_capacity_scale: float = option(
        1.0, "multiply every worker's prefix-cache capacity [blocks kept for reuse by later requests]; 0 = no prefix "
             "reuse; >= 0; the KV memory a prompt's own computation gets, and so the longest servable prompt, is unchanged")
    calibration_path: str | None = option(
        None, f"calibration JSON (default: shipped {DEFAULT_CALIBRATION}, {DEFAULT_CALIBRATION_DESCRIPTION})",
        flag="--calibration", metavar="FILE")
    seed: int = option(0, "seed of the run (execution noise, randomised policies)")
    horizon_s: float | None = option(
        None, "stop at this simulated time [s], a finite number > 0; unfinished requests count as SLO misses "
              "(default: run until every request finished)")
    record_events: bool = field(default=False, metadata={"cli": False})
    faults: FaultConfig | None = option(
        None, "fault schedule (YAML/JSON: GPU/node failures, stragglers, KV link faults; envs/sim/fault_config.py); "
              "default none", metavar="FILE", parse=lambda text, flag: load_fault_config(text) if text else None)
    node_calibration_paths: tuple[str, ...] = option(
        (), "heterogeneous pool: one calibration JSON per node, comma-separated ('' = --calibration), e.g. H20 and "
            "H20-3e nodes; default: every node uses --calibration", flag="--node-calibrations", metavar="FILE,FILE,...",
        parse=lambda text, flag: tuple(p.strip() for p in text.split(",")), unset=True)

    def __post_init__(self) -> None:
        # the sub-configs by type: a dict (engine={...}) was accepted and failed mid-run
        for name, cls in (("pool", PoolConfig), ("engine", EngineConfig), ("latency", LatencyConfig),
                          ("prediction_error", PredictionErrorConfig), ("slo", SLOConfig), ("links", LinkConfig),
                          ("kv_tiers", TierConfig)):
            _check_type(getattr(self, name), cls, name)
        _check_type(self.faults, FaultConfig, "faults", allow_none=True)
        object.__setattr__(self, "node_calibration_paths", tuple(self.node_calibration_paths))
        num_nodes = -(-self.pool.num_gpus // self.pool.gpus_per_node)
        _check(not self.node_calibration_paths or len(self.node_calibration_paths) == num_nodes,
               f"node_calibration_paths needs one entry per node ({num_nodes}), got {len(self.node_calibration_paths)}")
        _check_int(self, "seed", "seed", 0)  # a numpy integer (np.int64(3)) was refused, True accepted
        _check(is_finite_number(self.cache_capacity_scale) and self.cache_capacity_scale >= 0,
               f"cache_capacity_scale must be a finite number >= 0, got {self.cache_capacity_scale}")
        _check(self.horizon_s is None or (isinstance(self.horizon_s, numbers.Real) and not isinstance(self.horizon_s, bool)
                                          and self.horizon_s > 0),
               f"horizon_s must be a number > 0 or None, got {self.horizon_s!r}")

    def to_dict(self) -> dict:
        """Nested plain dict of the config; ``kv_tiers``, ``faults`` and ``node_calibration_paths``
        are left out while they are the default (tiers off, no faults, homogeneous pool), so
        configs, cell keys and run folders of such runs stay as before."""
        d = asdict(self)
        if self.kv_tiers == TierConfig():
            del d["kv_tiers"]
        for name in ("faults", "node_calibration_paths"):
            if name in d and not d[name]:
                del d[name]
        return d
