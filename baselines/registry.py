"""Named policies: a router plus, optionally, the pool composition and the controllers it needs.

``POLICIES`` maps a policy name (as used by ``cpgym simulate --policy``) to a
:class:`PolicySpec`. A plain name->spec dict: add an entry to add a policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from baselines.controller import ControllerConfig, ReconfigController
from baselines.industry import (
    DynamoKVRouter,
    DynamoParams,
    LlmdParams,
    LlmdRouter,
    MooncakeTTFTRouter,
    SGLangCacheAwareRouter,
    SGLangParams,
    StaticThresholdRouter,
    TensorParallelCostForm,
    VllmDPParams,
    VllmDPRouter,
    homogeneous_composition,
)
from baselines.lookahead import LookaheadConfig
from baselines.simple import PrefixAffinityRouter, RandomRouter, RoundRobinRouter
from baselines.vertumnus import VertumnusParams, VertumnusRouter
from envs.planning.composition import PROFILED, given_initial_pool, workload_initial_pool
from envs.sim.cost_model import Calibration
from envs.sim.pool import PoolConfig
from envs.sim.router import LeastWorkRouter, Router
from envs.sim.tier_config import TierConfig


@dataclass(frozen=True)
class PolicySpec:
    """A named policy.

    Args:
        name: registry key.
        make_router: builds a fresh router for one run.
        description: one line for ``--help`` and tables.
        source: where its rule and defaults come from.
        composition: pool composition it requires (e.g. a homogeneous pool): a composition
            string, a callable ``f(pool: PoolConfig) -> str`` (follows the run's pool size, e.g.
            :func:`baselines.industry.homogeneous_composition`), or ``None`` to use the run's
            configured pool.
        make_attachments: builds objects attached to the simulator for the run (cluster
            controller, global cache manager); each has ``attach(sim)``.
        calibration_transform: ``f(Calibration) -> Calibration`` giving the policy's workers a
            different cost form (e.g. TP-4 for ``vllm-tp4``); the TTFT SLOs stay those of the
            run's untransformed calibration, so every policy is judged against the same SLOs.
        params: the policy's tunable parameters and their defaults (``{"beta": 3.0, ...}``),
            sweepable as ``<policy>.<param>`` in experiment specs; empty if it has none.
        build_with: ``f(**params) -> PolicySpec`` used by :meth:`with_params`.
        kv_tiers: KV tiers the system brings (its pull path, ``envs/sim/tiers.py``), used when
            the run configures none; ``None`` = the run's tiers (default: off).
        choose_pool: ``f(pool, history, config, calibration, capacity_cache) -> (PoolConfig,
            info)`` choosing the run's starting pool from the demand history
            (:class:`envs.planning.capacity.DemandHistory`; the full Vertumnus
            system's initial composition from the capacity profile,
            :func:`envs.planning.composition.workload_initial_pool`); applied after ``composition``.
        check_pool: ``f(pool)`` raising ``ValueError`` when the policy's settings cannot run on
            ``pool`` (e.g. a controller's ``target_degrees`` the pool does not support); called by
            ``baselines.runner.policy_pool`` before any run.
    """

    name: str
    make_router: Callable[[], Router]
    description: str
    source: str
    composition: str | Callable[[PoolConfig], str] | None = None
    make_attachments: Callable[[], list] = field(default=lambda: [])
    calibration_transform: Callable[[Calibration], Calibration] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    build_with: Callable[..., PolicySpec] | None = None
    kv_tiers: TierConfig | None = None
    choose_pool: Callable[..., tuple[PoolConfig, dict]] | None = None
    check_pool: Callable[[PoolConfig], Any] | None = None

    def with_params(self, **overrides: Any) -> PolicySpec:
        """The same policy with some parameters changed (same name, so runs group by policy).

        Raises:
            ValueError: for a parameter the policy does not declare, or an invalid value.
        """
        unknown = sorted(set(overrides) - set(self.params))
        if unknown:
            raise ValueError(f"policy {self.name!r} has no parameter(s) {unknown}; "
                             f"its parameters: {sorted(self.params) or 'none'}")
        if not overrides:
            return self
        return self.build_with(**{**self.params, **overrides})

    def resolve_composition(self, pool: PoolConfig) -> str | None:
        """The composition string for ``pool`` (``None``: keep the run's composition)."""
        return self.composition(pool) if callable(self.composition) else self.composition


def _named(factory: Callable[[], Router], name: str) -> Callable[[], Router]:
    """Router factory whose routers carry the registry name (results are labelled by it)."""

    def make() -> Router:
        router = factory()
        router.name = name
        return router

    return make


def vertumnus_spec(name: str, description: str, source: str, base: VertumnusParams = VertumnusParams(),
                   composition: str | Callable[[PoolConfig], str] | None = None) -> PolicySpec:
    """A Vertumnus-router policy whose ``beta`` and ``lambda`` are sweepable parameters."""

    def build(beta: float, **kw: Any) -> PolicySpec:
        return vertumnus_spec(name, description, source, replace(base, beta=float(beta), lambda_=float(kw["lambda"])),
                              composition)

    return PolicySpec(name, lambda: VertumnusRouter(base, name), description, source, composition=composition,
                      params={"beta": base.beta, "lambda": base.lambda_}, build_with=build)


def router_params_spec(name: str, router_cls: Callable[[Any], Router], params: Any, description: str, source: str,
                       **spec_fields: Any) -> PolicySpec:
    """A policy whose router is ``router_cls(params)`` with ``params`` a frozen parameter dataclass
    (e.g. :class:`~baselines.industry.SGLangParams`): each of its numeric fields (``None``-valued
    ones excluded) is a policy parameter of the same name, with the dataclass default as its
    default; :meth:`PolicySpec.with_params` validates through the dataclass's ``__post_init__``.
    ``spec_fields``: further :class:`PolicySpec` fields (composition, calibration_transform, kv_tiers)."""
    keys = [f.name for f in fields(params) if isinstance(getattr(params, f.name), (int, float))
            and not isinstance(getattr(params, f.name), bool)]

    def build(**kw: Any) -> PolicySpec:
        return router_params_spec(name, router_cls, replace(params, **{k: kw[k] for k in keys}), description, source,
                                  **spec_fields)

    return PolicySpec(name, _named(lambda: router_cls(params), name), description, source,
                      params={k: getattr(params, k) for k in keys}, build_with=build, **spec_fields)


def adaptive_spec(router_params: VertumnusParams = VertumnusParams(), controller: ControllerConfig = ControllerConfig(),
                  name: str = "vertumnus-adaptive", initial_pool: bool = False,
                  initial_composition: str = PROFILED) -> PolicySpec:
    """The Vertumnus router plus the split/merge controller; ``beta``, ``lambda``, every
    :class:`~baselines.controller.ControllerConfig` field but ``lookahead``, and every
    :class:`~baselines.lookahead.LookaheadConfig` field as ``lookahead.<field>`` (e.g.
    ``vertumnus-adaptive.lookahead.duration_s`` in a sweep spec) are parameters.

    ``vertumnus-adaptive`` starts from the run's pool; with ``initial_pool`` the starting pool is
    chosen from the capacity profile (:func:`envs.planning.composition.workload_initial_pool`), the
    full system's start (see :func:`full_system_spec`), and ``initial_composition`` is a parameter
    too: ``"profile"`` (default, that §6 rule) or a composition such as ``cp4x7+cp2x6``
    (:func:`envs.planning.composition.given_initial_pool`; ``tuned:vertumnus`` starts from the
    task's best fixed composition chosen on its training episodes, ``benchmark.tuning``)."""
    controller_fields = [f.name for f in fields(ControllerConfig) if f.name != "lookahead"]
    lookahead_fields = [f.name for f in fields(LookaheadConfig)]

    def build(**kw: Any) -> PolicySpec:
        rp = replace(router_params, beta=float(kw.pop("beta")), lambda_=float(kw.pop("lambda")))
        la = replace(controller.lookahead, **{f: kw[f"lookahead.{f}"] for f in lookahead_fields})
        return adaptive_spec(rp, replace(controller, lookahead=la, **{k: kw[k] for k in controller_fields}), name,
                             initial_pool, kw.get("initial_composition", initial_composition))

    if not isinstance(initial_composition, str) or not initial_composition.strip():
        raise ValueError(f"initial_composition: expected {PROFILED!r} or a composition such as 'cp4x7+cp2x6', "
                         f"got {initial_composition!r}")

    def choose_pool(pool, history, config, calibration, cache):
        if initial_composition != PROFILED:
            return given_initial_pool(pool, initial_composition)
        return workload_initial_pool(pool, history, config, calibration, cache, profile=controller.profile)

    def check_pool(pool):
        if initial_pool and initial_composition != PROFILED:
            pool = given_initial_pool(pool, initial_composition)[0]
        return controller.menu_pool(pool)

    where = ("the run's pool" if not initial_pool else "initial composition from the capacity profile"
             if initial_composition == PROFILED else f"initial composition {initial_composition}")
    return PolicySpec(name, lambda: VertumnusRouter(router_params, name),
                      f"Vertumnus router + split/merge controller (20 s windows) on {where}",
                      "paper §5-§6; baselines/controller/",
                      make_attachments=lambda: [ReconfigController(controller)],
                      params={"beta": router_params.beta, "lambda": router_params.lambda_,
                              **{k: getattr(controller, k) for k in controller_fields},
                              **{f"lookahead.{f}": getattr(controller.lookahead, f) for f in lookahead_fields},
                              **({"initial_composition": initial_composition} if initial_pool else {})},
                      build_with=build, choose_pool=choose_pool if initial_pool else None, check_pool=check_pool)


def full_system_spec(controller: ControllerConfig = ControllerConfig(), name: str = "vertumnus",
                     description: str | None = None, cache_backlog_bound: bool = False) -> PolicySpec:
    """A full Vertumnus system (§5-§7): the Vertumnus router, the initial composition chosen from
    the capacity profile among the deployment's CP degrees (those of the run's configured
    composition), the split/merge controller ``controller`` and the global prefix-cache manager.
    Its parameters are those of ``vertumnus-adaptive``, the manager's ``cache_<field>`` ones and
    ``initial_composition`` (``"profile"``, the §6 rule, or a given composition such as
    ``cp4x7+cp2x6``: :func:`adaptive_spec`).

    * ``vertumnus`` (the default ``controller``): the paper's system. Its controller
      (``decision="analytic"``, :mod:`baselines.controller.analytic_rule`) is the paper's §6 rule
      (profiled capacity, thresholds sustained for ``k_windows`` windows, the long-request
      trigger at stable load, operations ranked by drain then reconciliation traffic, the
      drain/epoch protocol of ``envs.sim.reconfig``) whose proposals start only when an M/G/c
      estimate predicts a gain, net of drain and switch cost, at both ends of the measured rate's
      noise band (the do-no-harm gate; the paper does not say how a sustained condition becomes
      a number of operations).
    * ``vertumnus-paper-rule``: the same without the gate (``decision="paper-rule"``): every
      sustained condition starts operations until the capacity gap closes.
    * ``vertumnus-lookahead``: cpgym's look-ahead controller (``decision="target"``,
      :mod:`baselines.controller.target_rule`), which simulates 11 candidate pools per window;
      ``results/vertumnus/README.md`` has its measured effect.

    ``vertumnus`` alone sets ``cache_backlog_bound`` (issue #40, do no harm under overload): its
    cache manager replicates only to destinations with at most one scan interval of outstanding
    work (:class:`~baselines.cache_manager.CacheManagerConfig` ``backlog_bound``); the other two
    keep the manager they were measured with.

    Args:
        description: the registry line; default the generic full-system line naming the decision.
        cache_backlog_bound: the cache manager's ``backlog_bound``.
    """
    base = adaptive_spec(controller=controller, name=name, initial_pool=True)
    spec = with_global_cache(base, name=name, backlog_bound=cache_backlog_bound)
    return replace(spec, description=description or (
        f"full system: Vertumnus router + initial composition from the capacity profile "
        f"+ split/merge controller ({controller.decision} decision) + global prefix-cache manager"),
                   source="paper §5-§7; baselines/registry.py full_system_spec")


POLICIES: dict[str, PolicySpec] = {
    "round-robin": PolicySpec("round-robin", RoundRobinRouter, "cycle over workers in pool order", "classic load balancer"),
    "random": PolicySpec("random", RandomRouter, "uniformly random eligible worker (seeded)", "classic load balancer"),
    "least-work": PolicySpec("least-work", LeastWorkRouter, "least predicted outstanding work q_w",
                             "paper §5 queue proxy; least-outstanding-work balancing"),
    "prefix-affinity": PolicySpec("prefix-affinity", PrefixAffinityRouter, "longest ready prefix hit, ties to less work",
                                  "cache-affinity routing (e.g. SGLang/llm-d prefix scorers, without load balance)"),
    # --- issue #3: Vertumnus (paper §5) and its ablations, on the run's (heterogeneous) pool
    "vertumnus-router": vertumnus_spec("vertumnus-router", "ablation: the Vertumnus router alone on the run's pool, "
                                       "J = q + beta*s + lambda*(C*s - Cmin*E_Cmin), beta=3, lambda=1",
                                       "paper §5; defaults: baselines/vertumnus.py"),
    "vertumnus-lambda0": PolicySpec("vertumnus-lambda0",
                                    lambda: VertumnusRouter(VertumnusParams(lambda_=0.0), "vertumnus-lambda0"),
                                    "ablation: Vertumnus without the GPU-time term (lambda=0)", "paper §5 ablation"),
    "vertumnus-beta1": PolicySpec("vertumnus-beta1", lambda: VertumnusRouter(VertumnusParams(beta=1.0), "vertumnus-beta1"),
                                  "ablation: Vertumnus with beta=1 (J = predicted TTFT q + s plus the GPU-time term)",
                                  "paper §5 ablation (beta lower bound)"),
    "vertumnus-no-reservation": PolicySpec("vertumnus-no-reservation",
                                           lambda: VertumnusRouter(VertumnusParams(reservation=False),
                                                                   "vertumnus-no-reservation"),
                                           "ablation: Vertumnus seeing q_w as of each worker's last step boundary "
                                           "(no reservation)", "paper §5 ablation"),
    "vertumnus-length-only": PolicySpec("vertumnus-length-only",
                                        lambda: VertumnusRouter(VertumnusParams(length_only=True), "vertumnus-length-only"),
                                        "ablation: CP degree by prompt length only (cache/load blind), least q_w within it",
                                        "paper §1/§5 length-only routing"),
    # --- paper §9 baselines
    "homogeneous-cp2": PolicySpec("homogeneous-cp2", lambda: VertumnusRouter(VertumnusParams(beta=1.0), "homogeneous-cp2"),
                                  "all CP-2 workers (cp2x20 at 40 GPUs); least work + prefix (q + s)",
                                  "paper §9 homogeneous baseline",
                                  composition=homogeneous_composition(2)),
    "homogeneous-cp4": PolicySpec("homogeneous-cp4", lambda: VertumnusRouter(VertumnusParams(beta=1.0), "homogeneous-cp4"),
                                  "all CP-4 workers (cp4x10 at 40 GPUs); least work + prefix (q + s)",
                                  "paper §9 homogeneous baseline",
                                  composition=homogeneous_composition(4)),
    "static-threshold": PolicySpec("static-threshold", _named(StaticThresholdRouter, "static-threshold"),
                                   "run's heterogeneous pool; long prompts (>= profiled threshold) to the largest degree, "
                                   "else smallest; least work within", "paper §9 static-threshold baseline"),
    # industry routers: their parameter dataclasses' numeric fields are policy parameters
    # (router_params_spec; tuning ranges: benchmark/tuning.py TUNABLE)
    "vllm-tp4": router_params_spec("vllm-tp4", VllmDPRouter, VllmDPParams(),
                                   "homogeneous TP-4 workers (TP cost form), vLLM DP balancer 4*waiting+running",
                                   "paper §9 vLLM baseline; vllm DPLBAsyncMPClient; TP form: baselines/industry/vllm.py",
                                   composition=homogeneous_composition(4), calibration_transform=TensorParallelCostForm()),
    "sglang-cache-aware": router_params_spec("sglang-cache-aware", SGLangCacheAwareRouter, SGLangParams(),
                                             "CP-4 workers, SGLang router cache_aware (approx tree, threshold 0.3, "
                                             "balance 64/1.5)",
                                             "paper §9 SGLang baseline; sgl-router cache_aware.rs CLI defaults",
                                             composition=homogeneous_composition(4)),
    # --- industry routers on the run's pool
    "llm-d": router_params_spec("llm-d", LlmdRouter, LlmdParams(),
                                "weighted scorers prefix 3 + queue 2 + KV-utilisation 2, max score",
                                "llm-d inference-scheduling chart defaults; gateway-api-inference-extension scorers"),
    "dynamo-kv": router_params_spec("dynamo-kv", DynamoKVRouter, DynamoParams(),
                                    "min overlap-weight*prefill blocks + active blocks",
                                    "ai-dynamo KV router cost, weight 1, temperature 0"),
    "mooncake-ttft": PolicySpec("mooncake-ttft", _named(MooncakeTTFTRouter, "mooncake-ttft"),
                                "min predicted TTFT = q_w + E_C(R,P) with local hit",
                                "Mooncake (FAST'25) conductor"),
    "vertumnus-adaptive": adaptive_spec(),
}

# --- Vertumnus router + global prefix-cache manager (paper §7; the cache ablation), and the full system
from baselines.cache_manager import CACHE_MANAGER_SETTINGS, with_global_cache  # noqa: E402

POLICIES["vertumnus-global-cache"] = with_global_cache(POLICIES["vertumnus-router"], name="vertumnus-global-cache")
POLICIES["vertumnus-global-cache-20s"] = with_global_cache(
    POLICIES["vertumnus-router"],
    replace(CACHE_MANAGER_SETTINGS["paper-20s"], beta=POLICIES["vertumnus-router"].params["beta"],
            lambda_=POLICIES["vertumnus-router"].params["lambda"]),
    "vertumnus-global-cache-20s")

# --- KV pull paths (envs/sim/tiers.py, baselines/tiered.py): the systems with their own KV tiers.
# Mooncake pools host DRAM per node and a distributed store (Mooncake Store); Dynamo's KV block
# manager offloads to host memory (G2). Used when the run has no --kv-tiers of its own.
POLICIES["mooncake-ttft-pull"] = replace(
    POLICIES["mooncake-ttft"], name="mooncake-ttft-pull", make_router=_named(MooncakeTTFTRouter, "mooncake-ttft-pull"),
    description="Mooncake min predicted TTFT counting the KV pull from host DRAM / the Mooncake store",
    source="Mooncake (FAST'25) conductor + Mooncake Store; envs/sim/tiers.py",
    kv_tiers=TierConfig(levels=("hbm", "dram", "store")))
POLICIES["dynamo-kv-pull"] = router_params_spec(
    "dynamo-kv-pull", DynamoKVRouter, DynamoParams(),
    "Dynamo KV-overlap cost over HBM + host-memory tiers (KV block manager offload)",
    "ai-dynamo KV router + KVBM host tier; envs/sim/tiers.py", kv_tiers=TierConfig(levels=("hbm", "dram")))
POLICIES = {"vertumnus": full_system_spec(description="the paper's system: Vertumnus router + initial composition from "
                                                      "the capacity profile + §6 split/merge rule gated by a predicted "
                                                      "net gain (analytic decision) + global prefix-cache manager "
                                                      "replicating only to destinations backlogged less than one scan",
                                  cache_backlog_bound=True),
            "vertumnus-paper-rule": full_system_spec(ControllerConfig(decision="paper-rule"), "vertumnus-paper-rule"),
            "vertumnus-lookahead": full_system_spec(
                ControllerConfig(decision="target"), "vertumnus-lookahead",
                "cpgym variant: vertumnus with a look-ahead controller (11 candidate pools simulated per 20 s window) "
                "instead of the gated §6 rule; measured effect: results/vertumnus/README.md"),
            **POLICIES}

# Named suites of ``cpgym compare``: ``paper`` = Vertumnus + the paper's §9 baselines.
SUITES: dict[str, tuple[str, ...]] = {
    "paper": ("vertumnus", "homogeneous-cp2", "homogeneous-cp4", "static-threshold", "vllm-tp4", "sglang-cache-aware"),
    "industry": ("vertumnus", "sglang-cache-aware", "llm-d", "dynamo-kv", "mooncake-ttft", "least-work", "prefix-affinity"),
    "pull": ("vertumnus", "dynamo-kv", "dynamo-kv-pull", "mooncake-ttft", "mooncake-ttft-pull"),
    "ablations": ("vertumnus", "vertumnus-paper-rule", "vertumnus-lookahead",
                  "vertumnus-router", "vertumnus-adaptive", "vertumnus-global-cache",
                  "vertumnus-lambda0", "vertumnus-beta1", "vertumnus-no-reservation", "vertumnus-length-only"),
}


def get_policy(name: str) -> PolicySpec:
    """Looks up a policy by name.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    try:
        return POLICIES[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(POLICIES), n=3, cutoff=0.6)  # as cpgym evaluate's
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise ValueError(f"unknown policy {name!r}; {hint}known policies: {', '.join(POLICIES)}") from None
