"""The paper §9 end-to-end experiment as a library function: a policy suite on one workload at
several request rates, :func:`run_compare` (``cpgym compare`` is a thin wrapper;
``experiments/paper/end-to-end.yaml`` runs the paper's workloads, rates and policies as a spec;
its header lists the equivalent ``cpgym compare`` commands, tested to plan the same runs).

* Rates: ``rates_rps`` (time-scale the workload to these mean rates [requests/s]) or
  ``rate_scales`` (multiply its native rate); neither = the native rate. The arrival window of
  the source is applied after rate scaling.
* Seeds: each seed sets the run seed and offsets the generator / arrival-spreading seed
  (``source.seed + seed``); metrics are averaged over seeds in ``summary``.
* The strongest baseline at a rate is the non-Vertumnus policy (name not starting with
  ``vertumnus``) with the lowest mean TTFT; % change = ``(vertumnus - baseline) / baseline``
  (P90 against the same baseline); SLO change in percentage points.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from baselines.capacity import saturated
from baselines.registry import POLICIES, SUITES, PolicySpec
from baselines.runner import run_policy
from baselines.vertumnus import VertumnusParams, VertumnusRouter
from envs.metrics import summarize
from envs.metrics.table import metric_names
from envs.sim.options import split_name_list
from experiments.common import parse_list
from policies.common.policy_args import check_distinct

#: The metrics an end-to-end run aggregates (names of :mod:`envs.metrics.table`).
METRICS = metric_names("mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted",
                       "slo_attainment_requests", "prefix_hit_rate", "utilization", "mean_queueing_delay_s", "gpu_time_s",
                       "num_unfinished", "num_requests", "wall_time_s")
VERTUMNUS = "vertumnus"
CHANGE_KEYS = ("mean_ttft_change_pct", "p90_ttft_change_pct", "slo_change_pp")

@dataclass(frozen=True)
class CompareResult:
    """Outcome of :func:`run_compare`.

    Args:
        rows: tidy DataFrame, one row per (policy, rate, seed): ``envs.metrics.summarize``
            metrics plus ``policy, rate_rps, rate_scale, seed, workload, native_rate_rps, rate_point``
            (index of the requested rate point, the same for every seed).
        summary: DataFrame averaged over seeds, one row per (requested rate point, policy) in
            suite order, with ``num_seeds`` (the seeds in the row); without ``--rates`` its
            ``rate_rps`` is the measured rate averaged over the seeds.
        changes: :func:`strongest_baseline_changes` of ``summary``.
        sweep: :func:`sweep_table` of the Vertumnus variants (``None`` without variants).
        workload_name: name of the (seed-0) base workload.
    """

    rows: Any
    summary: Any
    changes: list
    sweep: Any
    workload_name: str


def _grid(text: str | None, flag: str, default: float, lowest: float) -> list[float]:
    """The values of ``flag`` (``[default]`` without it): finite, >= ``lowest``, distinct.

    Raises:
        ValueError: naming ``flag`` (VertumnusParams' own error named its field, e.g. ``lambda_``).
    """
    import math

    if text is None:
        return [default]
    values = parse_list(text, flag)
    if not all(math.isfinite(v) and v >= lowest for v in values):
        raise ValueError(f"{flag} values must be finite numbers >= {lowest:g} (paper §5), got {text!r}")
    check_distinct(values, flag, text, "distinct values (each is one sweep variant)")
    return values


def vertumnus_variants(beta_text: str | None, lambda_text: str | None) -> list[tuple[str, float, float]]:
    """``(name, beta, lambda)`` of the sweep grid of ``--beta`` / ``--lambda`` (empty if neither):
    the Vertumnus router alone with those parameters, ``vertumnus-router[beta=B,lambda=L]``.

    Raises:
        ValueError: naming the flag, on a malformed list, a repeated value or a value outside the
            paper's range (beta >= 1, lambda >= 0).
    """
    if beta_text is None and lambda_text is None:
        return []
    d = VertumnusParams()
    out = []
    for b in _grid(beta_text, "--beta", d.beta, 1.0):
        for lam in _grid(lambda_text, "--lambda", d.lambda_, 0.0):
            VertumnusParams(beta=b, lambda_=lam)  # validates
            # the router alone (VertumnusRouter), named so: `vertumnus` is the full system
            out.append((f"vertumnus-router[beta={b:g},lambda={lam:g}]", b, lam))
    return out


def _policy(policy):
    """A registry name, or ``(name, beta, lambda)`` of a sweep variant -> a policy for run_policy
    (variants are built inside the worker process: PolicySpec factories do not pickle)."""
    if isinstance(policy, str):
        return policy

    name, beta, lam = policy
    return PolicySpec(name, lambda: VertumnusRouter(VertumnusParams(beta=beta, lambda_=lam), name),
                      f"Vertumnus with beta={beta:g}, lambda={lam:g} (sweep)", "paper §5; cpgym compare --beta/--lambda")


def resolve_suite(text: str, flag: str = "--suite") -> list[str]:
    """Policy names of a suite expression (``paper``, ``all``, or a comma list of suites/policies)
    given with ``flag`` (named in errors).

    Raises:
        ValueError: naming an unknown suite or policy, or an empty item.
    """
    names: list[str] = []
    for item in split_name_list(text, flag, allow_duplicates=True):  # suites overlap: each policy runs once
        if item == "all":
            add = list(POLICIES)
        elif item in SUITES:
            add = list(SUITES[item])
        elif item in POLICIES:
            add = [item]
        else:
            import difflib

            close = difflib.get_close_matches(item, ["all", *SUITES, *POLICIES], n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
            raise ValueError(f"unknown suite or policy {item!r}; {hint}suites: all, {', '.join(SUITES)}; "
                             f"policies: {', '.join(POLICIES)}")
        names += [n for n in add if n not in names]
    if not names:
        raise ValueError(f"{flag} selects no policy")
    return names


def _run_task(task: tuple) -> dict:
    """Runs one (policy, workload, config) in a worker process and returns its summary row."""
    policy, workload, config, meta = task
    result = run_policy(_policy(policy), workload, config)
    row = summarize(result)
    # without --loads / --label-overload nothing else marks a rate whose TTFTs measure the backlog
    row["saturated"] = saturated(result, row)[0]
    row.update(meta)
    return row


def strongest_baseline_changes(summary, vertumnus: str | None = None):
    """Per rate: the strongest non-Vertumnus baseline (lowest mean TTFT) and Vertumnus's change.

    Args:
        summary: DataFrame with ``policy, rate_rps, mean_ttft_s, p90_ttft_s,
            slo_attainment_token_weighted`` (one row per policy and rate).
        vertumnus: the policy compared; default ``vertumnus`` (the full system) when the summary
            has it, else ``vertumnus-router`` (the router alone), else none.

    Returns:
        list of dicts ``rate_rps, vertumnus (the policy compared), baseline,
        mean_ttft_change_pct, p90_ttft_change_pct, slo_change_pp`` (empty if no Vertumnus policy
        or no baseline is present).
    """
    if vertumnus is None:
        present = set(summary["policy"])
        vertumnus = next((p for p in (VERTUMNUS, "vertumnus-router") if p in present), None)
        if vertumnus is None:
            return []
    out = []
    for rate, g in summary.groupby("rate_rps", sort=True):
        v = g[g["policy"] == vertumnus]
        b = g[~g["policy"].str.startswith("vertumnus")].dropna(subset=["mean_ttft_s"])
        if v.empty or b.empty:
            continue
        best = b.loc[b["mean_ttft_s"].idxmin()]
        v = v.iloc[0]
        out.append({
            "rate_rps": float(rate), "vertumnus": vertumnus, "baseline": best["policy"],
            "mean_ttft_change_pct": 100.0 * (v["mean_ttft_s"] - best["mean_ttft_s"]) / best["mean_ttft_s"],
            "p90_ttft_change_pct": 100.0 * (v["p90_ttft_s"] - best["p90_ttft_s"]) / best["p90_ttft_s"],
            "slo_change_pp": 100.0 * (v["slo_attainment_token_weighted"] - best["slo_attainment_token_weighted"]),
        })
    return out


def sweep_table(summary, variants: list[str]):
    """Per sweep variant: mean/P90 TTFT % and SLO pp vs the strongest baseline at each rate, and
    their means over the rates (tidy DataFrame, one row per variant and rate plus ``rate_rps`` NaN
    for the mean)."""
    import pandas as pd

    rows = []
    base = summary[~summary["policy"].str.startswith("vertumnus")]
    for v in variants:
        ch = strongest_baseline_changes(pd.concat([base, summary[summary["policy"] == v].assign(policy=VERTUMNUS)]),
                                        VERTUMNUS)
        for c in ch:
            rows.append({"variant": v, **c})
        if ch:
            rows.append({"variant": v, "rate_rps": float("nan"), "baseline": "mean over rates",
                         **{k: sum(c[k] for c in ch) / len(ch) for k in CHANGE_KEYS}})
    return pd.DataFrame(rows)


def _points(source, rates_rps, rate_scales):
    if rates_rps:
        return [replace(source, target_rps=r, rate_scale=None) for r in rates_rps]
    if rate_scales:
        return [replace(source, target_rps=None, rate_scale=s) for s in rate_scales]
    return [replace(source, target_rps=None, rate_scale=None)]


def compare_plan(source, base_config, policies: list, rates_rps=None, rate_scales=None, seeds=(0,)) -> list[tuple]:
    """The runs of :func:`run_compare` without running them: ``(WorkloadSource, SimConfig,
    policy)`` per seed, rate point and policy, in run order (nothing is loaded)."""
    plan = []
    for seed in seeds:
        src = source.with_seed(source.seed + seed)
        config = replace(base_config, seed=seed)
        for point in _points(src, rates_rps, rate_scales):
            plan.extend((point, config, p) for p in policies)
    return plan


def compare_tasks(source, base_config, policies: list, rates_rps=None, rate_scales=None, seeds=(0,)) -> tuple[list, str]:
    """``(tasks, workload name)``: one ``(policy, workload, config, meta)`` per entry of
    :func:`compare_plan`; each seed's workload is loaded once and transformed per rate point.

    Raises:
        ValueError: when the base workload is empty, or on bad rates (from the transforms).
    """
    tasks, wl_name = [], ""
    loaded: dict[int, Any] = {}
    built: dict[Any, Any] = {}
    # the requested (nominal) rate point of a run: its index in _points, the same for every seed
    nominal = {(p.target_rps, p.rate_scale): i for i, p in enumerate(_points(source, rates_rps, rate_scales))}
    for point, config, policy in compare_plan(source, base_config, policies, rates_rps, rate_scales, seeds):
        if point.seed not in loaded:
            loaded[point.seed] = base = point.load()
            if base.num_requests == 0:
                raise ValueError(f"workload {base.name!r} has no requests")
            wl_name = wl_name or base.name
        base = loaded[point.seed]
        if point not in built:
            built[point] = point.transform(base)
        wl = built[point]
        rate = point.target_rps if point.target_rps is not None else wl.mean_rate_rps
        meta = {"rate_rps": float(rate), "rate_scale": point.rate_scale, "seed": config.seed, "workload": wl.name,
                "native_rate_rps": base.mean_rate_rps, "rate_point": nominal[(point.target_rps, point.rate_scale)]}
        tasks.append((policy, wl, config, meta))
    return tasks, wl_name


def run_compare(source, base_config, policies: list, rates_rps=None, rate_scales=None, seeds=(0,), jobs: int = 1,
                on_row: Callable[[list], None] | None = None) -> CompareResult:
    """Runs every policy at every rate and seed.

    Args:
        source: :class:`~envs.workloads.WorkloadSource` (its rate fields are replaced per point;
            its window is applied after scaling).
        base_config: :class:`~envs.sim.SimConfig`; its seed is replaced by each seed.
        policies: registry names and/or ``(name, beta, lambda)`` Vertumnus variants
            (:func:`vertumnus_variants`), in table order.
        rates_rps / rate_scales: the rate points (at most one of them).
        seeds: run seeds (>= 0).
        jobs: processes (1 = in this process).
        on_row: called with the list of finished rows after each run (e.g. to save them).

    Raises:
        ValueError: on both rate lists, ``jobs`` < 1, no seed, or a negative seed.
    """
    from concurrent.futures import ProcessPoolExecutor

    import pandas as pd

    if rates_rps and rate_scales:
        raise ValueError("give rates_rps or rate_scales, not both")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError(f"seeds must be integers >= 0, got {list(seeds)}")
    tasks, wl_name = compare_tasks(source, base_config, policies, rates_rps, rate_scales, seeds)
    rows: list[dict] = []

    def keep(row: dict) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(rows)

    if jobs == 1:
        for t in tasks:
            keep(_run_task(t))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for row in pool.map(_run_task, tasks):
                keep(row)
    df = pd.DataFrame(rows)
    names = [p if isinstance(p, str) else p[0] for p in policies]
    order = {n: i for i, n in enumerate(names)}
    # one row per requested rate point and policy, averaged over seeds: each seed redraws the workload,
    # so without --rates the measured rate differs per seed (rate_rps = its mean over the seeds)
    agg = {"rate_rps": "mean", **{k: "mean" for k in METRICS if k in df}, "seed": "nunique"}
    if "saturated" in df:  # saturated in any seed
        agg["saturated"] = "max"
    summary = (df.groupby(["rate_point", "policy"], sort=False).agg(agg).reset_index()
               .rename(columns={"seed": "num_seeds"}).drop(columns="rate_point"))
    summary["_o"] = summary["policy"].map(order)
    summary = summary.sort_values(["rate_rps", "_o"]).drop(columns="_o").reset_index(drop=True)
    variants = [p[0] for p in policies if not isinstance(p, str)]
    sweep = sweep_table(summary, variants) if variants else None
    return CompareResult(rows=df, summary=summary, changes=strongest_baseline_changes(summary), sweep=sweep,
                         workload_name=wl_name)
