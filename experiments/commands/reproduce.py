"""``cpgym reproduce``: the paper's evaluation (§9) re-run in cpgym — per experiment, workload
and metric, the paper's figure beside cpgym's with a 95 % CI over seeds. Definitions:
:mod:`experiments.reproduce`.

* ``--experiments``: comma-separated subset of ``end-to-end`` (loads relative to the strongest
  static baseline's capacity; plots of mean / P90 TTFT and SLO attainment vs load), ``dynamic``
  (adaptive Vertumnus vs fixed compositions on the phases workload), ``reconfiguration``
  (drain + switch + confirm of the same dynamic runs' operations) and ``cache`` (global
  prefix-cache manager vs local caches only on tool-agent at the highest load, a fraction of the
  measured capacity with local caches); default all four.
* ``--quick``: a reduced run sized for 2 cores: end-to-end 3 seeds, 300 s windows, loads
  0.5,0.85,0.95, 3 % capacity tolerance; dynamic / reconfiguration 3 seeds with the full
  ``cpgym dynamic`` defaults (4 x 150 s phases, every fixed composition: 87-141 s per seed on 2
  cores with the default look-ahead decision, so nothing is cut); cache 3 held-out seeds with 300 s
  of sessions (the manager sweep's length) instead of 600 s. Explicit ``--seeds`` / ``--loads`` /
  ``--arrival-window-length-s`` / ``--cache-seeds`` win.
* ``--format json``: one JSON array of rows ``{experiment, workload, model, metric,
  paper_value, cpgym_value, ci_low, ci_high, load_fraction, strongest_baseline}``.
* ``--out DIR`` (default ``runs/reproduce``): ``rows.json``, ``KIND-runs.csv`` (every run),
  ``KIND-capacities.csv`` (end-to-end, cache), ``end-to-end.png``, ``provenance.json`` (written
  first and after each experiment: its ``experiments``, the ``finished`` ones and the ``files``
  this run wrote, so an interrupted run's folder says what is its own). ``KIND-runs.csv`` and
  ``KIND-capacities.csv`` are rewritten after each finished task (a capacity search, a seed's
  runs), so a run stopped midway (an error, Ctrl-C) keeps the runs and capacities it finished,
  in the complete run's format; ``rows.json`` and the plot aggregate finished experiments only
  (an experiment missing from ``finished`` whose files are listed stopped midway).
* ``--models LABEL=CALIBRATION[@COMPOSITION];...``: models to run (default: the default calibration).
"""

from __future__ import annotations

import argparse
import sys

from baselines.capacity import CapacityDefinition
from envs.provenance import write_provenance
from envs.sim.options import check_out_dir, split_name_list
from envs.workloads import DEFAULT_TRACE_FILE, default_traces_dir
from experiments.commands.capacity import cache_dir_from_args, definition_from_args
from experiments.common import (
    dumps_json,
    parse_list,
    parse_workload_params,
    sim_config_from_args,
    write_rows_csv,
)
from experiments.flags.reproduce import ALL_EXPERIMENTS, FULL, QUICK, add_arguments  # noqa: F401  (re-exported)
from experiments.reproduce import (
    EXPERIMENTS,
    ReproduceConfig,
    WorkloadCase,
    plot_end_to_end,
    rows_as_dicts,
    run_experiments,
)


def config_from_args(args: argparse.Namespace, kinds: list[str] | None = None):
    """The :class:`experiments.reproduce.ReproduceConfig` of the command line, for the
    experiments ``kinds`` (default all).

    Raises:
        ValueError: on an unknown workload, a malformed list or model entry, or a ``--traces-dir``
            that is missing, not a folder, or lacks a trace the chosen experiments replay.
    """
    from pathlib import Path

    preset = QUICK if args.quick else FULL
    # an empty --seeds / --loads is an error (parse_list), not the preset
    seeds = tuple(parse_list(preset["seeds"] if args.seeds is None else args.seeds, "--seeds", int))
    loads = tuple(parse_list(preset["loads"] if args.loads is None else args.loads, "--loads", positive=True))
    window_length_s = args.arrival_window_length_s if args.arrival_window_length_s is not None \
        else preset["arrival_window_length_s"]
    if args.quick and args.rel_tol == CapacityDefinition().rel_tol:  # the default tolerance: the quick one
        args.rel_tol = QUICK["rel_tol"]
    traces = Path(args.traces_dir) if args.traces_dir else default_traces_dir()
    known = {"leval-like": WorkloadCase("leval-like", name="leval-like"),
             "tool-agent": WorkloadCase("tool-agent", name="tool-agent"),
             "production": WorkloadCase("production", trace=str(traces / DEFAULT_TRACE_FILE))}
    cases = []
    for w in split_name_list(args.workloads, "--workloads"):
        if w not in known:
            raise ValueError(f"--workloads: unknown workload {w!r}; known: {', '.join(known)}")
        cases.append(known[w])
    needs = {Path(c.trace).name for c in cases if c.trace} if "end-to-end" in (kinds or ALL_EXPERIMENTS.split(",")) else set()
    check_traces_dir(args.traces_dir, traces, needs)
    if args.models is not None:
        models = []
        for item in (x.strip() for x in args.models.split(";")):
            if not item:
                raise ValueError(f"--models: an empty entry in {args.models!r} (doubled, leading or trailing ';'); "
                                 f"expected LABEL=CALIBRATION_FILE[@COMPOSITION];...")
            label, sep, rest = (x.strip() for x in item.partition("="))
            path, at, comp = (x.strip() for x in rest.partition("@"))
            if not sep or not label or not path or (at and not comp):
                raise ValueError(f"--models entries must be LABEL=CALIBRATION_FILE[@COMPOSITION], got {item!r}")
            models.append((label, path, comp or None))
    else:
        models = [("default", args.calibration, None)]
    return ReproduceConfig(workloads=tuple(cases), models=tuple(models), seeds=seeds, loads=loads,
                           arrival_window_length_s=window_length_s,
                           sim=sim_config_from_args(args), capacity_definition=definition_from_args(args),
                           cache_dir=cache_dir_from_args(args),
                           cache_seeds=tuple(parse_list(args.cache_seeds, "--cache-seeds", int)),
                           cache_duration_s=preset["cache_duration_s"] if args.cache_duration_s is None
                           else args.cache_duration_s,
                           dynamic_params=parse_workload_params(args.dynamic_param, "--dynamic-param"))


def check_traces_dir(given: str | None, traces, needs: set[str]) -> None:
    """``--traces-dir`` (``given``; ``traces`` the folder used, the default when not given) before
    any run: a given folder must exist and be a folder, and the folder used must hold the trace
    files ``needs`` (those the chosen experiments replay).

    Raises:
        ValueError: naming ``--traces-dir`` (or the default folder) and what was expected.
    """
    what = f"--traces-dir {given}" if given is not None else f"the default traces folder {traces} (--traces-dir)"
    if given is not None and not traces.exists():
        raise ValueError(f"{what} does not exist; expected a folder holding {DEFAULT_TRACE_FILE}")
    if given is not None and not traces.is_dir():
        raise ValueError(f"{what} is not a folder; expected a folder holding {DEFAULT_TRACE_FILE}")
    missing = sorted(n for n in needs if not (traces / n).is_file())
    if missing:
        raise ValueError(f"{what} has no {', '.join(missing)}; the end-to-end experiment's production workload replays "
                         "it (or leave production out of --workloads)")


def _print_table(rows) -> None:
    def f(x, fmt="{:+.1f}"):
        return "—" if x is None or x != x else fmt.format(x)

    wm = max([14] + [len(r.metric) for r in rows])
    print(f"{'experiment':15s} {'workload':12s} {'model':15s} {'metric':{wm}s} {'paper':>7s} {'cpgym':>8s} {'95% CI':>18s} "
          f"{'load':>5s}  strongest baseline")
    for r in rows:
        # no interval (—) for one seed or a zero-width one (every seed gave the same change), as cpgym report
        ci = "—" if r.ci_low is None or r.ci_low != r.ci_low or r.ci_low == r.ci_high else f"[{f(r.ci_low)}, {f(r.ci_high)}]"
        print(f"{r.experiment:15s} {r.workload:12s} {r.model:15s} {r.metric:{wm}s} "
              f"{f(r.paper_value):>7s} {f(r.cpgym_value):>8s} "
              f"{ci:>18s} {f(r.load_fraction, '{:.2f}'):>5s}  {r.strongest_baseline or '—'}")


def _write_runs(out, kind: str, res, final: bool) -> list[str]:
    """Writes ``KIND-runs.csv`` (a finished experiment's, even without runs; a partial one's once it
    has a run) and ``KIND-capacities.csv`` (when there are capacities) of ``res`` under ``out``,
    each atomically; returns the names written."""
    written = []
    if final or res.runs:
        write_rows_csv(out / f"{kind}-runs.csv", res.runs)
        written.append(f"{kind}-runs.csv")
    if res.capacities:
        write_rows_csv(out / f"{kind}-capacities.csv", res.capacities)
        written.append(f"{kind}-capacities.csv")
    return written


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    kinds = split_name_list(args.experiments, "--experiments")
    for k in kinds:
        if k not in EXPERIMENTS:
            raise ValueError(f"--experiments: unknown kind {k!r}; known: {', '.join(EXPERIMENTS)}")
    if not kinds:
        raise ValueError(f"--experiments: name at least one of {', '.join(EXPERIMENTS)}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    check_out_dir(args.out)
    cfg = config_from_args(args, kinds)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, finished, files = [], [], []

    def record() -> None:
        # written first and after each experiment: an interrupted run's folder says which experiments
        # and files are this run's (a reused --out may still hold an earlier run's other files)
        write_provenance(out, argv=getattr(args, "argv", None), experiments=list(kinds), finished=list(finished),
                         files=sorted(set(files)))

    def partial(k: str, res) -> None:
        # after each finished task of an experiment: its runs and capacities so far, so an experiment
        # stopped midway keeps them (listed in files; the experiment is not in finished)
        new = [f for f in _write_runs(out, k, res, final=False) if f not in files]
        if new:
            files.extend(new)
            record()

    record()
    for k, res in run_experiments(kinds, cfg, log, args.jobs, on_partial=partial):
        rows += res.rows
        files.extend(f for f in _write_runs(out, k, res, final=True) if f not in files)
        if k == "end-to-end" and res.runs:
            plot_end_to_end(res.runs, out / "end-to-end.png")
            files.append("end-to-end.png")
        (out / "rows.json").write_text(dumps_json(rows_as_dicts(rows)) + "\n")  # after each experiment
        files.append("rows.json")
        finished.append(k)
        record()
    if args.format == "json":
        print(dumps_json(rows_as_dicts(rows)))
    else:
        _print_table(rows)
        print(f"\nwritten under {out}/ ({', '.join(sorted(f.name for f in out.iterdir() if f.is_file()))})")
    return 0
