"""Evaluation of learned and heuristic routing policies on held-out episode windows and seeds.

Every (policy, window, seed) is one episode. Heuristics run through
``experiments.runner.run_policy`` (equal to running them through the environment, tested);
learned checkpoints run through :class:`envs.routing_env.PrefillRoutingEnv` with masked,
deterministic actions. Each episode gives the metrics of ``envs.metrics.summarize``; the
table reports their mean over episodes with a 95% confidence interval (Student t over the
per-episode values; episodes = held-out windows x seeds).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from experiments.config_args import option as _opt
from experiments.config_args import split_name_list

METRICS = ("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "num_unfinished")

# two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30 (standard table); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_ci95(values) -> tuple[float, float]:
    """``(mean, half-width of the 95% CI)`` of the mean (Student t; NaN half-width for n < 2).

    The one Student-t interval of cpgym (reports, evaluate tables, paired deltas, scripts). Values
    that are all equal give exactly that value and a half-width of exactly 0 (the float mean and
    standard deviation gave e.g. 6.8e-16, printed as ``1.528 [1.528, 1.528]``); so do values apart
    by float rounding only (16 ulps of the largest: e.g. one ratio computed two ways)."""
    x = np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    if n < 2:
        return float(x.mean()), math.nan
    spread = float(x.max() - x.min())
    if spread <= 16 * np.finfo(float).eps * float(np.abs(x).max()):  # equal, or apart by float rounding only
        return (float(x[0]) if spread == 0 else float(x.mean())), 0.0
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(n))


def ci_text(value: float, half_width: float, fmt: str = "{:.3f}") -> str:
    """``value ± half_width`` in ``fmt``; the value alone when there is no interval (one episode,
    NaN) or it has zero width (every episode gave the same value); ``-`` for a NaN value."""
    if value != value:
        return "-"
    s = fmt.format(value)
    return s if half_width != half_width or half_width == 0 else s + " ± " + fmt.replace("+", "").format(half_width)


def is_checkpoint(name: str) -> bool:
    """Whether a ``--policy`` value names a checkpoint (``"shipped"``, a ``.zip`` or a folder)."""
    from pathlib import Path

    from policies.checkpoint import SHIPPED_CHECKPOINTS

    return name in SHIPPED_CHECKPOINTS or name.endswith(".zip") or Path(name).expanduser().is_dir()


def check_checkpoint_kind(policy: str, kind: str) -> None:
    """Raises ValueError (one line) when ``policy`` is a checkpoint whose ``train_config.json``
    ``kind`` is not ``kind`` (e.g. a routing checkpoint evaluated with ``--kind reconfig``), before
    the model is loaded; heuristics and checkpoints without a recorded kind pass.

    Raises:
        ValueError: naming the checkpoint, its kind and the kind asked for.
        FileNotFoundError: for a checkpoint path that does not exist.
    """
    if policy in ("none", "-") or not is_checkpoint(policy):
        return
    from policies.checkpoint import resolve_checkpoint

    _, meta = resolve_checkpoint(policy)
    trained = meta.get("kind")
    if trained is not None and trained != kind:
        raise ValueError(f"--policy {policy} is a {trained} checkpoint (train_config.json kind {trained!r}), not a {kind} "
                         f"one; evaluate it with --kind {trained} (or --kind auto)")


def check_policy_argument(name: str) -> None:
    """Validates a policy given on the command line: a registered heuristic, ``"shipped"``, or an
    existing checkpoint folder / ``.zip``.

    Raises:
        FileNotFoundError: naming the path, for a checkpoint path that does not exist (a value
            holding a path separator or ending in ``.zip``) or a folder without ``model.zip``.
        ValueError: naming the path, for an existing file that is not a ``.zip``; for an unknown
            name: suggests the closest names (``difflib``) and names the
            accepted forms (``shipped``, checkpoint paths, the registered policies).
    """
    import difflib

    from baselines.registry import POLICIES
    from policies.checkpoint import looks_like_path, resolve_checkpoint

    if name in POLICIES:
        return
    if is_checkpoint(name) or looks_like_path(name):
        resolve_checkpoint(name)
        if not is_checkpoint(name):  # an existing file that is neither a folder nor a .zip
            raise ValueError(f"{name}: not a checkpoint; expected a checkpoint folder holding model.zip, "
                             "a model .zip file, or 'shipped'")
        return
    from policies.checkpoint import SHIPPED_CHECKPOINTS

    close = difflib.get_close_matches(name, [*SHIPPED_CHECKPOINTS, *POLICIES], n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise ValueError(f"unknown policy {name!r}; {hint}expected 'shipped' (the shipped routing checkpoint), 'shipped-residual' "
                     f"(the residual PPO routing checkpoint), 'shipped-reconfig' "
                     f"(the shipped reconfiguration checkpoint), a checkpoint folder or .zip path "
                     f"(e.g. policies/checkpoints/routing_conversation), "
                     f"or a registered policy: {', '.join(POLICIES)}")


def check_distinct(values, flag: str, text=None, expected: str = "distinct values (each is one episode)") -> None:
    """Seeds and window indices name episodes (or repetitions): a repeated one would count the same
    run twice (a narrower, fake confidence interval).

    Raises:
        ValueError: ``FLAG lists X twice: TEXT; expected EXPECTED`` (``TEXT``: ``text``, or the
            values joined by commas).
    """
    seen = set()
    for v in values:
        if v in seen:
            shown = text if text is not None else ",".join(map(str, values))
            raise ValueError(f"{flag} lists {v!r} twice: {shown!r}; expected {expected}")
        seen.add(v)


def evaluate(policies: list[str], source, sim_config, seeds: list[int], part: str = "eval",
             window_indices: list[int] | None = None, log=None, on_row=None) -> list[dict]:
    """Runs every policy on every selected window of every seed.

    Args:
        policies: registered heuristic names and/or checkpoint paths (``"shipped"``).
        source: :class:`policies.train.EpisodeSource`.
        sim_config: base :class:`~envs.sim.SimConfig`; its seed is replaced by each seed.
        seeds: workload seeds (trace arrival spreading / generator) and simulator seeds.
        part: ``"eval"`` (held-out windows), ``"train"`` or ``"all"``.
        window_indices: positions inside the part (default: all of them).
        on_row: optional ``callable(rows)`` called with the rows so far after each episode (e.g. to
            save them: a run stopped midway keeps its finished episodes).

    Returns:
        One row per episode: ``policy, seed, window, window_name`` plus ``METRICS``.

    Raises:
        ValueError: on an unknown policy name (with close matches), a repeated seed or window
            index (:func:`check_distinct`) or a window index out of range.
        FileNotFoundError: for a checkpoint path that does not exist.
    """
    check_distinct(list(seeds), "seeds")
    if window_indices is not None:
        check_distinct(list(window_indices), "window_indices")
    from envs.metrics import summarize
    from envs.routing_env import PrefillRoutingEnv
    from experiments.runner import run_policy
    from policies.checkpoint import LearnedPolicy
    from policies.heuristic import run_episode

    learned = {}
    if any(is_checkpoint(p) for p in policies):
        import torch as th

        th.set_num_threads(1)  # batch-1 inference of a small net: one thread is fastest
    from policies.arm_selection import arm_policy_spec, is_arm_checkpoint
    from policies.checkpoint import checkpoint_path

    arm_specs = {}
    for p in policies:
        check_policy_argument(p)
        if is_checkpoint(p) and is_arm_checkpoint(checkpoint_path(p)):
            arm_specs[p] = arm_policy_spec(checkpoint_path(p))
        elif is_checkpoint(p):
            learned[p] = LearnedPolicy(p)
    rows = []
    for seed in seeds:
        wins = source.windows(part, seed=seed)
        idx = window_indices if window_indices is not None else list(range(len(wins)))
        for i in idx:
            if not 0 <= i < len(wins):
                raise ValueError(f"window index {i} out of range: the {part} part has {len(wins)} windows")
            wl = wins[i]
            cfg = replace(sim_config, seed=seed)
            for p in policies:
                t0 = time.perf_counter()
                if p in learned:
                    pol = learned[p]
                    env = PrefillRoutingEnv([wl], cfg)
                    res, _, _ = run_episode(env, pol, options={"window_index": 0, "sim_seed": seed})
                    res.policy = pol.name
                else:
                    res = run_policy(arm_specs.get(p, p), wl, cfg)
                s = summarize(res)
                row = {"policy": res.policy, "seed": seed, "window": i, "window_name": wl.name,
                       "num_requests": wl.num_requests, "wall_s": time.perf_counter() - t0}
                row.update({k: s[k] for k in METRICS})
                rows.append(row)
                if on_row is not None:
                    on_row(list(rows))
                if log:
                    log(f"{row['policy']:28s} seed {seed} window {i:2d}: mean TTFT {row['mean_ttft_s']:.3f} s, "
                        f"SLO tok {row['slo_attainment_token_weighted']:.3f}")
    return rows


def aggregate(rows: list[dict], reference: str | None = None) -> list[dict]:
    """Per policy (first-seen order): ``num_episodes`` and, per metric, the mean and
    ``<metric>_ci95`` (half-width). With ``reference`` (a policy label), also the paired
    difference of mean TTFT against it over the same (seed, window) episodes:
    ``delta_mean_ttft_s`` and ``delta_mean_ttft_s_ci95`` [s] (negative = faster), and
    ``delta_slo_attainment`` with its CI."""
    out = []
    ref = {(r["seed"], r["window"]): r for r in rows if r["policy"] == reference} if reference else {}
    for name in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == name]
        agg = {"policy": name, "num_episodes": len(rs)}
        for m in METRICS:
            mean, ci = mean_ci95([r[m] for r in rs])
            agg[m] = mean
            agg[m + "_ci95"] = ci
        if ref:
            pairs = [(r, ref[(r["seed"], r["window"])]) for r in rs if (r.get("seed"), r.get("window")) in ref]
            agg["delta_mean_ttft_s"], agg["delta_mean_ttft_s_ci95"] = mean_ci95(
                [a["mean_ttft_s"] - b["mean_ttft_s"] for a, b in pairs])
            agg["delta_slo_attainment"], agg["delta_slo_attainment_ci95"] = mean_ci95(
                [a["slo_attainment_token_weighted"] - b["slo_attainment_token_weighted"] for a, b in pairs])
        out.append(agg)
    return out


#: Heuristics a routing checkpoint is compared with by default.
DEFAULT_ROUTING_AGAINST = "least-work,prefix-affinity,round-robin"
#: Comparisons of a reconfiguration checkpoint by default on the default 40-GPU pool (all routed by
#: the Vertumnus router); on another pool :func:`default_reconfig_against`.
DEFAULT_RECONFIG_AGAINST = "vertumnus-adaptive,vertumnus-router,fixed:cp1x40,fixed:cp2x20,fixed:cp4x10,fixed:cp8x5"


def default_reconfig_against(pool) -> str:
    """The default comparisons of a reconfiguration evaluation on ``pool`` (``PoolConfig``):
    ``vertumnus-adaptive``, ``vertumnus-router`` and ``fixed:cpDxN`` of every supported degree D
    whose homogeneous composition (N = GPUs / D workers) fits the pool's nodes, except the pool's
    own start composition (``vertumnus-router`` runs it); :data:`DEFAULT_RECONFIG_AGAINST` on the
    default pool. (The fixed list named the 40-GPU pool's compositions on every pool: an 8-GPU
    pool failed on ``fixed:cp1x40`` without ``--against``.)"""
    labels = ["vertumnus-adaptive", "vertumnus-router"]
    start = tuple(pool.placements())
    for degree in pool.supported_degrees:
        if pool.num_gpus % degree:
            continue
        composition = f"cp{degree}x{pool.num_gpus // degree}"
        try:
            placements = tuple(replace(pool, composition=composition).placements())
        except ValueError:  # e.g. a CP-8 worker on nodes of 4 GPUs
            continue
        if placements != start:
            labels.append(f"fixed:{composition}")
    return ",".join(labels)



#: Default ``--seeds`` of a routing evaluation (arrival-spreading and simulator seeds of the held-out windows).
DEFAULT_ROUTING_SEEDS = (1, 2, 3)
#: Default ``--seeds`` of a reconfiguration evaluation: workload seeds held out from the shipped
#: reconfiguration checkpoints (training seeds 0-59, validation 500-509;
#: ``policies/checkpoints/reconfig_target/README.md``), the first of the documented test seeds 1000-1029.
DEFAULT_RECONFIG_SEEDS = (1000, 1001, 1002)


@dataclass(frozen=True)
class EvaluationConfig:
    """What ``cpgym evaluate`` evaluates (one flag per field, generated by
    ``experiments.config_args``); run by :func:`run_evaluation`.

    Raises:
        ValueError: naming the field, on no seed, a negative or repeated seed, an unknown kind, a
            window length <= 0 or ``eval_every`` < 2.
    """

    policy: str = _opt(None, "checkpoint folder / model.zip, 'shipped' (the shipped routing checkpoint), 'shipped-residual' "
                             "(the residual PPO routing checkpoint), 'shipped-reconfig' "
                             "(the shipped reconfiguration checkpoint), or a policy name (routing only; with --kind "
                             "reconfig 'none' runs only the --against policies)",
                       metavar="CHECKPOINT|NAME", required=True)
    against: str | None = _opt(None, f"comma-separated policies to compare with (none: {DEFAULT_ROUTING_AGAINST}; "
                                     f"reconfig: vertumnus-adaptive, vertumnus-router and fixed:cpDxN of each supported "
                                     f"degree D that fills the pool, the start composition left out; default pool: "
                                     f"{DEFAULT_RECONFIG_AGAINST})", metavar="P1,P2,...")
    kind: str = _opt("auto", "routing or reconfiguration checkpoint (auto: the checkpoint's train_config.json 'kind'); "
                             "reconfig: whole-workload episodes per seed", choices=("auto", "routing", "reconfig"))
    trace: str | None = _opt(None, "episode trace file (none: the checkpoint's training source)", metavar="PATH")
    workload: str | None = _opt(None, "named synthetic workload (none: the checkpoint's training source)", metavar="NAME")
    target_rps: float | None = _opt(None, "time-scale arrivals to this mean rate [requests/s] (none: the checkpoint's)")
    episode_window_s: float | None = _opt(None, "routing: episode window length [s] (none: the checkpoint's, else 60)")
    eval_every: int | None = _opt(None, "routing: every N-th window is held out (none: the checkpoint's, else 4)")
    windows: str = _opt("eval", "routing: the held-out part (eval), the training part, all, or indices into the held-out part",
                        metavar="eval|train|all|I,J,...")
    seeds: tuple[int, ...] | None = _opt(None, "workload and simulator seeds (none: routing 1,2,3; reconfig 1000,1001,1002, "
                                              "held out from the shipped reconfiguration checkpoints' training seeds "
                                              "0-59 and validation seeds 500-509)")
    reference: str | None = _opt(None, "policy for the paired delta columns (none: routing: vertumnus-router or "
                                       "vertumnus if evaluated, else the first compared policy; "
                                       "reconfig: vertumnus-adaptive if evaluated, else no deltas)", metavar="LABEL")
    loads: tuple[float, ...] = _opt((), "protocol evaluation (policies.protocol) at these fractions of capacity, "
                                        "e.g. 0.7,0.9: test windows, warm start, paired per-window CIs", metavar="F,F")
    protocol: bool = _opt(False, "protocol evaluation at --target-rps (implied by --loads)")
    warmup_s: float = _opt(30.0, "protocol: warm-up trace before each window [s]")
    max_windows: int | None = _opt(None, "protocol: at most N windows per cell, evenly spread over the part "
                                         "(policies.protocol.spread_subset; default all)", metavar="N")
    tuned: str | None = _opt(None, "protocol: vertumnus-tuned parameters per cell from `cpgym tune vertumnus` "
                                   "(none: tuned on each cell's training windows); reconfig: the controller settings "
                                   "of vertumnus-adaptive-tuned from `python -m policies.tune_controller`", metavar="JSON")

    def __post_init__(self) -> None:
        if not self.policy:
            raise ValueError("evaluate: policy is required")
        if self.trace is not None and self.workload is not None:
            raise ValueError("evaluate: give trace or workload, not both")
        if self.seeds is not None:
            object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
            if not self.seeds or min(self.seeds) < 0 or len(set(self.seeds)) != len(self.seeds):
                # a repeated seed is the same episodes again, not another sample (a zero-width interval)
                raise ValueError(f"evaluate: seeds must be distinct integers >= 0, got {list(self.seeds)}")
        if self.kind not in ("auto", "routing", "reconfig"):
            raise ValueError(f"evaluate: kind must be auto, routing or reconfig, got {self.kind!r}")
        if self.episode_window_s is not None and not self.episode_window_s > 0:
            raise ValueError(f"evaluate: episode_window_s must be > 0, got {self.episode_window_s}")
        if self.eval_every is not None and self.eval_every < 2:
            raise ValueError(f"evaluate: eval_every must be >= 2, got {self.eval_every}")
        object.__setattr__(self, "loads", tuple(float(x) for x in self.loads))
        if self.max_windows is not None and self.max_windows < 1:
            raise ValueError(f"evaluate: max_windows must be >= 1, got {self.max_windows}")
        if not self.warmup_s >= 0:
            raise ValueError(f"evaluate: warmup_s must be >= 0, got {self.warmup_s}")
        self._check_mode_fields()

    def _first_set(self, names: tuple[str, ...]) -> tuple[str, str, Any] | None:
        """``(field, flag, value shown)`` of the first of ``names`` set away from its default, else ``None``."""
        defaults = {f.name: f.default for f in fields(self)}
        for name in names:
            value = getattr(self, name)
            if value != defaults[name]:
                shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
                return name, "--" + name.replace("_", "-"), shown
        return None

    def _check_mode_fields(self) -> None:
        """A field set away from its default that the chosen mode (protocol with ``loads`` /
        ``protocol``, else per-seed episodes) would ignore is an error naming its flag."""
        protocol = bool(self.loads) or self.protocol
        if self.loads and self.target_rps is not None:
            raise ValueError(f"evaluate: give loads (--loads, fractions of capacity) or target_rps (--target-rps "
                             f"{self.target_rps:g}), not both")
        # (tuned: checked by run_evaluation, which knows the kind)
        hit = self._first_set(("max_windows", "warmup_s") if not protocol else ("seeds", "eval_every"))
        if hit:
            name, flag, shown = hit
            where = "only to the protocol evaluation; add --loads or --protocol" if not protocol else \
                "only to the per-seed evaluation, not to the protocol's fixed windows (--loads / --protocol)"
            raise ValueError(f"evaluate: {name} ({flag} {shown}) applies {where}, or drop {flag}")

    def check_reconfig_fields(self) -> None:
        """Reconfiguration evaluation runs one whole-workload episode per seed: a routing-only
        field set away from its default (it would be ignored) is an error naming its flag."""
        hit = self._first_set(("episode_window_s", "eval_every", "windows"))
        if hit:
            name, flag, shown = hit
            raise ValueError(f"evaluate: {name} ({flag} {shown}) applies only to routing evaluation; "
                             f"a reconfiguration evaluation runs one whole-workload episode per seed (drop {flag})")
        from baselines.registry import POLICIES

        if self.policy in POLICIES and not is_checkpoint(self.policy):  # it was read as a checkpoint folder
            raise ValueError(f"evaluate: --policy {self.policy} is a heuristic; a reconfiguration evaluation takes a "
                             f"reconfiguration checkpoint ('shipped-reconfig' or a folder) or 'none', and compares "
                             f"heuristics with --against (e.g. --policy none --against {self.policy})")

    def with_default_seeds(self, kind: str) -> EvaluationConfig:
        """This config with :attr:`seeds` set (given seeds are kept): routing
        :data:`DEFAULT_ROUTING_SEEDS`, reconfig :data:`DEFAULT_RECONFIG_SEEDS` (a default inside a
        checkpoint's training seeds would evaluate it on training data)."""
        if self.seeds is not None:
            return self
        return replace(self, seeds=DEFAULT_RECONFIG_SEEDS if kind == "reconfig" else DEFAULT_ROUTING_SEEDS)

    def resolved_kind(self) -> str:
        """``"routing"`` or ``"reconfig"`` (``auto``: from the checkpoint's ``train_config.json``)."""
        if self.kind != "auto":
            return self.kind
        from policies.evaluate_reconfig import is_reconfig_checkpoint

        return "reconfig" if is_reconfig_checkpoint(self.policy) else "routing"

    def part_and_indices(self) -> tuple[str, list[int] | None]:
        """``(part, window indices or None)`` of :attr:`windows`.

        Raises:
            ValueError: naming ``--windows`` on a malformed index list or a repeated index.
        """
        if self.windows in ("eval", "train", "all"):
            return self.windows, None
        try:
            idx = [int(x) for x in self.windows.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--windows must be eval, train, all or comma-separated integers, got {self.windows!r}") from None
        if not idx:
            raise ValueError(f"--windows needs at least one index, got {self.windows!r}")
        check_distinct(idx, "--windows", self.windows)
        return "eval", idx


@dataclass(frozen=True)
class EvaluationResult:
    """Outcome of :func:`run_evaluation`: ``kind``; per-episode ``rows``; ``source`` (routing:
    the :class:`policies.train.EpisodeSource`; reconfig: the workload name); ``part`` (routing:
    which windows); ``seeds``."""

    kind: str
    rows: list
    source: Any
    part: str
    seeds: tuple


def routing_source(cfg: EvaluationConfig):
    """The routing episode source: the flags over the checkpoint's training source over the
    conversation trace (a checkpoint's trace path missing here is looked up by file name in the
    shared trace folder). The checkpoint's source is the whole of it: its generator parameters
    (``--workload-param``), rate (``--target-rps`` or ``--rate-scale``; ``cfg.target_rps``
    replaces either), arrival window and ``skip_invalid`` (they were dropped: the held-out windows
    came from another workload, e.g. a 40 s ``tool-agent`` training run was evaluated on the
    generator's default duration); ``--trace`` / ``--workload`` replace all of it."""
    from pathlib import Path

    from envs.workloads import default_traces_dir
    from policies.train import EpisodeSource

    base: dict = {}
    if is_checkpoint(cfg.policy):
        from policies.checkpoint import resolve_checkpoint

        _, meta = resolve_checkpoint(cfg.policy)
        base = (meta.get("train_config") or {}).get("source") or {}
    if cfg.trace or cfg.workload:
        base = {"trace": cfg.trace, "workload": cfg.workload, "target_rps": None}
    if not base:
        base = {"trace": str(default_traces_dir() / "conversation_trace.jsonl"), "workload": None}
    trace = base.get("trace")
    if trace and not cfg.trace and not Path(trace).is_file():  # a checkpoint trained on another machine
        trace = str(default_traces_dir() / Path(trace).name)
    arrival_window_s = base.get("arrival_window_s")
    return EpisodeSource(trace=trace, workload=base.get("workload"),
                         target_rps=cfg.target_rps if cfg.target_rps is not None else base.get("target_rps"),
                         rate_scale=None if cfg.target_rps is not None else base.get("rate_scale"),
                         arrival_window_s=tuple(arrival_window_s) if arrival_window_s is not None else None,
                         skip_invalid=bool(base.get("skip_invalid", False)),
                         params=tuple(tuple(kv) for kv in base.get("params") or ()),
                         window_s=cfg.episode_window_s or base.get("window_s", 60.0),
                         eval_every=cfg.eval_every or base.get("eval_every", 4))


def reconfig_workload(cfg: EvaluationConfig) -> str:
    """The named workload of a reconfiguration evaluation: the flag, else the checkpoint's (``phases``
    for a checkpoint whose ``train_config.json`` names none: the old training default), else
    :data:`policies.train_reconfig.DEFAULT_RECONFIG_WORKLOAD` (``matched-phases``).

    Raises:
        ValueError: when a trace is given, or the checkpoint was trained on one and no
            ``--workload`` is given (not supported for reconfiguration yet; such a checkpoint was
            evaluated on ``phases`` without a word).
    """
    from policies.evaluate_reconfig import checkpoint_train_config
    from policies.train_reconfig import DEFAULT_RECONFIG_WORKLOAD, LEGACY_WORKLOAD

    if cfg.trace:
        raise ValueError("--kind reconfig evaluates named workloads (--workload); traces are not supported yet")
    workload = cfg.workload
    if workload is None and cfg.policy not in ("none", "-"):
        tc = checkpoint_train_config(cfg.policy)
        if tc.get("trace"):
            raise ValueError(f"--policy {cfg.policy} was trained on the trace {tc['trace']}; --kind reconfig evaluates "
                             "named workloads only (traces are not supported yet): give --workload NAME")
        workload = tc.get("workload") or LEGACY_WORKLOAD
    return workload or DEFAULT_RECONFIG_WORKLOAD


def reconfig_workload_fields(cfg: EvaluationConfig) -> dict:
    """The :class:`envs.workloads.WorkloadSource` fields besides the name and seed of a
    reconfiguration evaluation's episodes: ``target_rps`` from the flag; without ``--workload``
    also the checkpoint's ``params`` (``--workload-param``), ``rate_scale`` (unless ``--target-rps``
    replaces the rate) and arrival window — they were dropped, so a checkpoint trained on e.g.
    ``--workload-param num_phases=2`` was evaluated on the generator's default workload."""
    from policies.evaluate_reconfig import checkpoint_train_config

    out = {"target_rps": cfg.target_rps}
    if cfg.workload is not None or cfg.policy in ("none", "-"):
        return out
    tc = checkpoint_train_config(cfg.policy)
    if cfg.target_rps is None:
        out.update(target_rps=tc.get("target_rps"), rate_scale=tc.get("rate_scale"))
    window = tc.get("arrival_window_s")
    out.update(window_s=tuple(window) if window is not None else None,
               params=tuple(tuple(kv) for kv in tc.get("params") or ()))
    return out


def run_evaluation(cfg: EvaluationConfig, sim_config, log=None, on_row=None) -> EvaluationResult:
    """Evaluates ``cfg.policy`` against ``cfg.against`` on held-out episodes.

    Routing: every selected window of every seed of :func:`routing_source` (see :func:`evaluate`).
    Reconfig: one whole-workload episode per seed (``policies.evaluate_reconfig.evaluate_reconfig``).
    ``on_row``: optional ``callable(rows)`` called with the per-episode rows so far after each
    episode (the reconfig ``best-fixed-in-hindsight`` rows come only with the result).

    Raises:
        ValueError: on an unknown policy or comparison, or a window index out of range.
    """
    kind = cfg.resolved_kind()
    cfg = cfg.with_default_seeds(kind)
    check_checkpoint_kind(cfg.policy, kind)  # before loading a model of the other kind
    if kind == "reconfig":
        from policies.evaluate_reconfig import evaluate_reconfig

        cfg.check_reconfig_fields()
        ckpt = None if cfg.policy in ("none", "-") else cfg.policy
        against = split_name_list(default_reconfig_against(sim_config.pool) if cfg.against is None else cfg.against,
                                  "--against")
        workload = reconfig_workload(cfg)
        fields_ = reconfig_workload_fields(cfg)
        rows = evaluate_reconfig(ckpt, against, workload, list(cfg.seeds), sim_config, target_rps=fields_.pop("target_rps"),
                                 log=log, tuned=cfg.tuned, workload_fields=fields_, on_row=on_row)
        return EvaluationResult(kind=kind, rows=rows, source=workload, part="all", seeds=cfg.seeds)
    if cfg.tuned is not None:  # the protocol (experiments/commands/evaluate.py) or reconfig (above) read it
        raise ValueError(f"evaluate: tuned (--tuned {cfg.tuned}) applies only to the protocol evaluation (add --loads or "
                         "--protocol) or to a reconfiguration evaluation, or drop --tuned")
    against = split_name_list(DEFAULT_ROUTING_AGAINST if cfg.against is None else cfg.against, "--against")
    policies = [cfg.policy] + [n for n in against if n != cfg.policy]
    part, idx = cfg.part_and_indices()
    source = routing_source(cfg)
    rows = evaluate(policies, source, sim_config, list(cfg.seeds), part=part, window_indices=idx, log=log,
                    on_row=on_row)
    return EvaluationResult(kind=kind, rows=rows, source=source, part=part, seeds=cfg.seeds)


#: Columns of the per-episode rows that :func:`aggregate` (routing),
#: ``policies.evaluate_reconfig.aggregate_reconfig`` (reconfig) and ``policies.protocol.cell_table``
#: (protocol: the per-window rows of ``--loads`` / ``--protocol``, one cell per workload and load) read.
ROW_COLUMNS = {"routing": ("policy", "seed", "window", *METRICS),
               "reconfig": ("policy", "seed", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted",
                            "num_operations", "num_committed_operations", "num_unfinished"),
               "protocol": ("policy", "workload", "load_fraction", "rate_rps", "window", "mean_ttft_s", "p90_ttft_s",
                            "slo_attainment_token_weighted")}
#: The episode key of each kind's rows (one row per key).
_EPISODE_KEY = {"routing": ["policy", "seed", "window"], "reconfig": ["policy", "seed"],
                "protocol": ["policy", "workload", "load_fraction", "rate_rps", "window"]}


def is_protocol_csv(columns) -> bool:
    """Whether CSV ``columns`` are those of the protocol evaluation's rows (``cpgym evaluate --loads``
    / ``--protocol --out``: a cell's ``load_fraction`` and ``rate_rps``, no ``seed``). One of the two
    is enough, so that such a CSV lacking a column (``window`` too) is named as a protocol CSV
    lacking it, not as a routing CSV lacking ``seed``."""
    return "seed" not in columns and bool({"load_fraction", "rate_rps"} & set(columns))


def _csv_kind(path: str, columns, kind: str) -> str:
    """The kind of rows of a per-episode CSV (:func:`read_episode_rows`): ``kind``, or with ``auto``
    the one its columns tell; a protocol CSV read as ``routing`` is read as ``protocol`` (a
    routing evaluation too).

    Raises:
        ValueError: a protocol CSV read as ``reconfig``.
    """
    if is_protocol_csv(columns):
        if kind == "reconfig":
            raise ValueError(f"{path}: the per-window rows of a protocol evaluation (`cpgym evaluate --loads/--protocol "
                             "--out`: columns load_fraction, rate_rps, no seed); expected the per-episode rows of a "
                             "reconfig evaluation (`cpgym evaluate --kind reconfig --out`); drop --kind reconfig")
        return "protocol"
    if kind == "auto":
        return "reconfig" if "num_operations" in columns else "routing"
    return kind


def read_episode_rows(path: str, kind: str = "auto") -> tuple[str, list[dict]]:
    """``(kind, rows)`` of a per-episode CSV written by ``cpgym evaluate --out``; ``kind`` ``auto``
    is told from the columns (``num_operations``: reconfig; ``load_fraction`` and ``rate_rps``
    without ``seed``: ``protocol``, the per-window rows of ``--loads`` / ``--protocol``, also when
    ``kind`` is ``routing``; else routing). A protocol row's empty ``load_fraction`` (an absolute
    rate) is ``None``, as the run's rows have it.

    An empty metric cell is a metric the episode did not record (``--out`` writes NaN so); a
    written ``nan`` or ``inf`` is not a value cpgym writes.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: naming the file, when it is empty, not CSV, has no rows or lacks a column of
            :data:`ROW_COLUMNS`; naming the row and field, on a value of those columns outside its
            range (:func:`_row_value_range`: a seed or window that is not an integer >= 0, a time
            that is not a finite number >= 0, a share outside [0, 1], a count that is not an
            integer >= 0) or a second row of one episode; on an empty ``policy``, a routing row in a
            reconfig CSV or a ``best-fixed-in-hindsight`` row without its ``composition``
            (:func:`_check_row_labels`).
    """
    import pandas as pd

    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])  # "nan", "NA" stay text: not numbers
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a per-episode CSV ({' '.join(str(exc).split())}); "
                         f"expected the file written by `cpgym evaluate --out`") from None
    _check_row_lengths(path)
    kind = _csv_kind(path, df.columns, kind)
    missing = [c for c in ROW_COLUMNS[kind] if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected the per-episode rows of a {kind} "
                         f"evaluation written by `cpgym evaluate --out`")
    if df.empty:
        raise ValueError(f"{path}: no rows; expected the per-episode rows written by `cpgym evaluate --out`")
    key = _EPISODE_KEY[kind]
    _check_row_labels(path, df, kind)
    for col in ROW_COLUMNS[kind][1:]:
        if col == "workload":  # a label (text: _check_row_labels)
            continue
        num = pd.to_numeric(df[col], errors="coerce")
        integer = col in ("seed", "window")
        low, high, integral, what = _row_value_range(col, integer)
        finite = num.abs() < math.inf
        in_range = finite & (num >= low) & (num <= high) & ((num % 1 == 0) if integral else True)
        required = integer or col == "rate_rps"  # else an empty cell: a metric not recorded, an absolute rate
        bad = ~in_range if required else ~in_range & df[col].notna()
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise ValueError(f"{path}, row {i + 1}, field {col!r}: got {df[col].tolist()[i]!r}; expected {what}")
        df[col] = num.astype(int) if integer else num
    dup = df.duplicated(key).to_numpy()
    if dup.any():
        i = int(dup.argmax())
        episode = ", ".join(f"{k} {df[k].iloc[i]!r}" if k in ("policy", "workload") else
                            f"{k} {int(df[k].iloc[i])}" if k in ("seed", "window") else
                            f"{k} {df[k].iloc[i]:g}" if df[k].notna().iloc[i] else f"{k} empty (an absolute rate)"
                            for k in key)
        raise ValueError(f"{path}, row {i + 1}: a second row of the episode ({episode}); expected one row per "
                         "episode (paired deltas and CIs would count it twice)")
    rows = df.to_dict("records")
    if kind == "protocol":  # an absolute rate's cell: None (NaN keys would make each row its own cell)
        for r in rows:
            r["load_fraction"] = None if r["load_fraction"] != r["load_fraction"] else r["load_fraction"]
    return kind, rows


def _check_row_lengths(path: str) -> None:
    """Every row of a per-episode CSV has as many fields as its header (``--out`` writes an empty
    cell for a metric not recorded): pandas fills a short row's last columns with NaN, read as
    metrics not recorded, and reads a row one field longer than the header as an index column,
    shifting its values one column left.

    Raises:
        ValueError: naming the file and the row (numbered as :func:`read_episode_rows` numbers them).
    """
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        lines = (fields for fields in csv.reader(f) if fields)  # blank lines: skipped, as pandas does
        try:
            header = next(lines, [])
            for i, fields in enumerate(lines, 1):
                if len(fields) != len(header):
                    raise ValueError(f"{path}, row {i}: {len(fields)} fields, the header has {len(header)}; expected one "
                                     "field per column (an empty one for a metric not recorded), as `cpgym evaluate "
                                     "--out` writes them")
        except csv.Error as exc:
            raise ValueError(f"{path}: not a per-episode CSV ({exc}); expected the file written by `cpgym evaluate "
                             "--out`") from None


def uneven_episodes(rows: list[dict], kind: str) -> str | None:
    """A one-line description of the policies of ``rows`` (from :func:`read_episode_rows`) that lack
    episodes other policies have, or ``None`` when every policy has the same episodes (a live
    ``cpgym evaluate`` run always has; a concatenated or hand-edited CSV may not).

    With uneven episodes a policy's mean columns average its own episodes while its paired
    deltas use only those it shares with the reference, so its row is not comparable column by
    column with the others.

    Args:
        rows: per-episode rows (``policy``, ``seed`` and, for ``kind="routing"``, ``window``; protocol
            rows: ``workload``, ``load_fraction``, ``rate_rps``, ``window``).
        kind: ``"routing"`` (episodes are (seed, window)), ``"reconfig"`` (episodes are seeds) or
            ``"protocol"`` (episodes are (cell, window)).
    """
    if kind == "protocol":  # (cell, window), the cell as policies.protocol.Scenario.key names it
        from policies.protocol import cell_name

        def key(r):
            return cell_name(r["workload"], r["load_fraction"], r["rate_rps"]), int(r["window"])
    else:
        key = (lambda r: (int(r["seed"]), int(r["window"]))) if kind == "routing" else (lambda r: int(r["seed"]))
    per_policy: dict[str, set] = {}
    for r in rows:
        per_policy.setdefault(r["policy"], set()).add(key(r))
    union = set().union(*per_policy.values()) if per_policy else set()
    short = {p: sorted(union - eps) for p, eps in per_policy.items() if eps != union}
    if not short:
        return None
    what = {"routing": "(seed, window) episodes", "protocol": "windows"}.get(kind, "seeds")

    def listed(missing: list) -> str:
        text = (lambda k: f"{k[0]} window {k[1]}") if kind == "protocol" else str
        return ", ".join(map(text, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")

    return ("policies were evaluated on different episodes: " + "; ".join(
        f"{p} lacks {what} {listed(m)}" for p, m in short.items())
        + " (each mean column averages that policy's own episodes; a paired delta uses only the episodes it "
          "shares with the reference)")


def _check_row_labels(path: str, df, kind: str) -> None:
    """The text columns of :func:`read_episode_rows`' rows: every ``policy`` (and a protocol row's
    ``workload``) a non-empty label (read as text: a number-like label stays a label); in a
    reconfig CSV, no routing row (a ``window`` set: the rows of two kinds of evaluation,
    concatenated, were aggregated as one), and a
    ``composition`` on every ``best-fixed-in-hindsight`` row (the table lists the winners).

    Raises:
        ValueError: naming the file, the row and the field.
    """
    for col in ("policy", "workload") if kind == "protocol" else ("policy",):
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise ValueError(f"{path}, row {int(empty.to_numpy().argmax()) + 1}, field {col!r}: empty; expected the {col} "
                             "label of the episode")
        df[col] = df[col].astype(str)
    if kind != "reconfig":
        return
    if "window" in df.columns and df["window"].notna().any():
        i = int(df["window"].notna().to_numpy().argmax())
        window = df["window"].tolist()[i]
        raise ValueError(f"{path}, row {i + 1}: a routing evaluation's row (field 'window' {window!r}) among "
                         "a reconfiguration evaluation's rows; expected the rows of one kind of evaluation")
    best = (df["policy"] == "best-fixed-in-hindsight").to_numpy()
    comp = df["composition"] if "composition" in df.columns else None
    missing = best & (comp.isna().to_numpy() if comp is not None else True)
    if missing.any():
        raise ValueError(f"{path}, row {int(missing.argmax()) + 1}, field 'composition': "
                         f"{'missing column' if comp is None else 'empty'}; expected the fixed composition that won "
                         "the seed on a best-fixed-in-hindsight row (as `cpgym evaluate --out` writes it)")


def _row_value_range(column: str, key: bool) -> tuple[float, float, bool, str]:
    """``(low, high, integer?, description)`` of a per-episode CSV column: ``seed`` / ``window``
    (``key``) and the counts ``num_*`` integers >= 0, shares (``slo_attainment_*``,
    ``prefix_hit_rate``) in [0, 1], times (``*_s``) finite numbers >= 0."""
    if key:
        return 0, math.inf, True, "an integer >= 0"
    if column == "load_fraction":
        return math.nextafter(0.0, 1.0), 2, False, "a fraction of capacity in (0, 2] (or an empty cell: an absolute rate)"
    if column == "rate_rps":
        return math.nextafter(0.0, 1.0), math.inf, False, "a rate > 0 [requests/s]"
    if column.startswith("num_"):
        return 0, math.inf, True, "a count (an integer >= 0)"
    if column.startswith("slo_attainment") or column == "prefix_hit_rate":
        return 0, 1, False, "a share in [0, 1] (or an empty cell: not recorded)"
    return 0, math.inf, False, "a finite number >= 0 (or an empty cell: not recorded)"


def choose_reference(rows: list[dict], reference: str | None) -> str | None:
    """The policy of the paired delta columns: ``reference``, else ``vertumnus-router`` or
    ``vertumnus`` if evaluated,
    else the second policy (the first compared one).

    Raises:
        ValueError: when ``reference`` is not among the evaluated policies.
    """
    labels = list(dict.fromkeys(r["policy"] for r in rows))
    vert = [v for v in ("vertumnus-router", "vertumnus") if v in labels]
    ref = reference or (vert[0] if vert else (labels[1] if len(labels) > 1 else None))
    if ref is not None and ref not in labels:
        raise ValueError(f"--reference {ref!r} is not among the evaluated policies {labels}")
    return ref
