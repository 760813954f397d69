"""``cpgym capacity``: the sustainable rate per policy on one workload and pool — the highest
rate at which a long window's backlog still drains and the SLOs hold (definition and search:
:mod:`baselines.capacity`), cached on disk.

* Workload: ``--trace PATH`` or ``--workload NAME`` (default ``mixed-default``; ``--workload-param``
  overrides its generator, except ``duration_s``: the window sets the span); the window is
  ``--arrival-window-s START END`` (default 0 600) of the rate-scaled workload.
* ``--policy``: comma-separated policies or suites (default ``paper``: Vertumnus and the §9
  baselines).
* ``--drain-ratio``, ``--min-slo-attainment``, ``--rel-tol``: the definition's thresholds.
* ``--cache-dir DIR`` (default ``.cpgym-cache/capacity``), ``--no-cache``.
* With ``--trace``, each row also gives ``arrival_span_s`` (table: ``span s``): the first to last
  arrival of the window at the capacity's rate factor — shorter than the window when the trace
  is; a trace spanning less than half the window at its native rate gets a warning on stderr.
"""

from __future__ import annotations

import argparse
import sys

from baselines.capacity import CapacityDefinition, RatedWorkload, capacities
from envs import workloads
from envs.sim.options import check_out_dir
from envs.workloads import DEFAULT_WORKLOAD, WORKLOADS
from experiments.common import (
    check_workload_flags,
    dumps_json,
    parse_workload_params,
    sim_config_from_args,
)
from experiments.flags.capacity import DEFAULT_CACHE_DIR, add_arguments, add_capacity_arguments  # noqa: F401  (re-exported)
from experiments.paper_experiments.end_to_end import resolve_suite


def check_capacity_flags_unused(args: argparse.Namespace, why: str) -> None:
    """For a command that measures no capacity in this run (``why`` says so): a capacity flag
    given away from its default would have no effect, so it is an error naming the flag."""
    d = CapacityDefinition()
    defaults = {"drain_ratio": d.drain_ratio, "min_slo_attainment": d.min_slo_attainment, "rel_tol": d.rel_tol,
                "cache_dir": DEFAULT_CACHE_DIR, "no_cache": False}
    for dest, default in defaults.items():
        if getattr(args, dest, default) != default:
            flag = "--" + dest.replace("_", "-")
            raise ValueError(f"{flag} has no effect here: {why}")


def definition_from_args(args: argparse.Namespace):
    """The :class:`baselines.capacity.CapacityDefinition` of ``--drain-ratio``,
    ``--min-slo-attainment`` and ``--rel-tol``.

    Raises:
        ValueError: naming the flag (not the dataclass field) on an out-of-range value.
    """
    try:
        return CapacityDefinition(drain_ratio=args.drain_ratio, min_slo_attainment=args.min_slo_attainment,
                                  rel_tol=args.rel_tol)
    except ValueError as e:
        msg = str(e)
        for field in ("drain_ratio", "min_slo_attainment", "rel_tol"):
            msg = msg.replace(f"capacity.{field} ", "--" + field.replace("_", "-") + " ")
        raise ValueError(msg) from None


def cache_dir_from_args(args: argparse.Namespace) -> str | None:
    """``--cache-dir`` (``None`` with ``--no-cache``), checked before any bisection runs.

    Raises:
        ValueError: naming ``--cache-dir`` if it is a file or cannot be created, or if it is given
            with ``--no-cache`` (which uses no cache folder).
    """
    if args.no_cache:
        if args.cache_dir != DEFAULT_CACHE_DIR:
            raise ValueError(f"--cache-dir {args.cache_dir} is not used with --no-cache; give one of them")
        return None
    check_out_dir(args.cache_dir, "--cache-dir")
    return args.cache_dir


def rated_from_args(args: argparse.Namespace, default_window=(0.0, 600.0), duration_param: bool = False):
    """A :class:`baselines.capacity.RatedWorkload` from the shared workload arguments
    (``--target-rps`` / ``--rate-scale`` are refused: the rate is what is searched or set).
    ``--workload-param`` overrides reach the named workload's generator, as in every other
    command (they were dropped: the capacity was measured on the unmodified workload), except
    ``duration_s``: the window sets the generated span, so it is refused unless
    ``duration_param`` (``compare --loads``, whose runs use it) says to leave it to the runs."""
    if getattr(args, "target_rps", None) is not None or getattr(args, "rate_scale", None) is not None:
        raise ValueError("--target-rps / --rate-scale do not apply here: rates are set as load fractions or searched")
    check_workload_flags(args)  # --workload-seed named as typed (was 'seed must be ... or a numpy.random.SeedSequence')
    start, end = args.arrival_window_s or default_window
    if not 0 <= start < end:
        raise ValueError(f"--arrival-window-s START END needs 0 <= START < END, got {start:g} {end:g}")
    params = dict(parse_workload_params(getattr(args, "workload_param", None) or []))
    if params and args.trace:
        raise ValueError("--workload-param overrides a named workload's generator; it does not apply to a trace")
    if "duration_s" in params and not duration_param:
        raise ValueError("--workload-param duration_s does not apply here: the capacity window (--arrival-window-s START END, "
                         f"default {default_window[0]:g} {default_window[1]:g}) sets the generated span")
    params.pop("duration_s", None)
    if args.trace:
        base = workloads.load_trace(args.trace, skip_invalid=args.skip_invalid, spread_seed=args.workload_seed)
        return RatedWorkload(arrival_window_length_s=end - start, base=base, start_s=start)
    name = args.workload or DEFAULT_WORKLOAD
    check_windowable(name)
    if params:  # an unknown or bad parameter fails here, before any probe
        workloads.get_workload(name, seed=args.workload_seed, **{**params, "duration_s": 1.0})
    return RatedWorkload(arrival_window_length_s=end - start, name=name, seed=args.workload_seed, params=params, start_s=start)


def check_windowable(name: str) -> None:
    """Raises ValueError unless the named workload can be generated for a window's span (a
    ``duration_s`` parameter): ``phases`` is sized by its phases, and its capacity search failed
    with "unknown parameter(s) ['duration_s']", a parameter the user never gave."""
    import inspect

    make = WORKLOADS.get(name)
    if make is not None and "duration_s" not in inspect.signature(make.generator).parameters:
        raise ValueError(f"workload {name!r} has no steady rate to measure a capacity of: its span is set by its phases "
                         "(num_phases x phase_duration_s), not by a window; cpgym dynamic measures each phase mix's "
                         "capacity (--short-load, --long-load)")


def run(args: argparse.Namespace) -> int:
    policies = resolve_suite(args.policy, "--policy")
    if args.horizon_s is not None:  # baselines.capacity runs every probe to completion
        raise ValueError("--horizon-s does not apply to cpgym capacity: every probe runs until its requests finish")
    config = sim_config_from_args(args)
    definition = definition_from_args(args)  # a bad threshold fails before the trace is read
    rated = rated_from_args(args)
    trace = rated.base is not None
    if trace:
        warn_short_trace(rated)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    caps = capacities(policies, rated, config, definition=definition,
                      cache_dir=cache_dir_from_args(args), log=log)
    rows = [{"policy": p, "workload": r.workload, "capacity_rps": r.capacity_rps, "native_rate_rps": r.native_rate_rps,
             "rate_scale": r.rate_scale, "num_simulations": len(r.probes), "cached": r.cached, "definition": r.definition}
            for p, r in caps.items()]
    if trace:  # a trace may not fill the window: the span its arrivals cover at the capacity's rate factor
        for row in rows:
            row["arrival_span_s"] = rated.at_scale(row["rate_scale"]).duration_s if row["rate_scale"] > 0 else None
    if args.format == "json":
        print(dumps_json(rows))
        return 0
    start = rated.start_s
    if trace:
        end = start + rated.arrival_window_length_s
        print(f"sustainable rate on {rated.label} (window {start:g}-{end:g} s of the rate-scaled trace; "
              f"span = first to last arrival at the capacity rate), pool {config.pool.num_gpus} GPUs")
    else:
        print(f"sustainable rate on {rated.label} ({rated.arrival_window_length_s:g} s window), "
              f"pool {config.pool.num_gpus} GPUs")
    span_head = f" {'span s':>8s}" if trace else ""
    print(f"{'policy':26s} {'capacity req/s':>15s} {'x native':>9s}{span_head} {'sims':>5s}")
    for r in rows:
        cached = "  (cached)" if r["cached"] else ""
        span = "" if not trace else f" {'-':>8s}" if r["arrival_span_s"] is None else f" {r['arrival_span_s']:8.1f}"
        print(f"{r['policy']:26s} {r['capacity_rps']:15.3f} {r['rate_scale']:9.3f}{span} {r['num_simulations']:5d}{cached}")
    return 0


def warn_short_trace(rated, file=None) -> bool:
    """One warning line on stderr (or ``file``) if a trace's arrivals in the window span less than
    half of it at the native rate (every probe then measures that shorter span, shortened further
    by each rate factor above 1). Returns whether it warned."""
    span = rated.at_scale(1.0).duration_s
    if span >= 0.5 * rated.arrival_window_length_s:
        return False
    print(f"warning: the trace {rated.label!r} spans only {span:.3g} s at its native rate, much shorter than the "
          f"{rated.arrival_window_length_s:g} s window (--arrival-window-s); capacities are measured over the span it has "
          "(span column, arrival_span_s)",
          file=file or sys.stderr, flush=True)
    return True
