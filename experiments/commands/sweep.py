"""``cpgym sweep SPEC``: run every cell of an experiment spec (YAML/TOML), resumably, on a local
process pool or on Ray; see :mod:`experiments.spec` for the file format and
:mod:`experiments.sweep` for the output layout.

Run seeds re-draw the workload too (spec key ``seed_workload``, default true: workload seed =
``workload.seed`` + run seed), so two seeds of one cell replay different request sets;
``--dry-run`` lists each cell's workload seed. Ctrl-C ends with one line and exit status 130;
re-running the same command resumes."""

from __future__ import annotations

import argparse

from envs.provenance import write_provenance
from envs.sim.options import check_out_dir
from experiments.flags.sweep import add_arguments  # noqa: F401  (re-exported)
from experiments.spec import load_spec
from experiments.sweep.manifest import match_finished, outdated_cells, scan_finished
from experiments.sweep.run import check_sweep_target, default_out_dir, run_sweep


def stale_cells_note(num: int, example: str, out) -> str:
    """The warning about finished cells in ``out`` that are not cells of the spec."""
    return (f"warning: {num} finished cell folder(s) in {out} are not cells of this spec (an earlier version of it, "
            f"e.g. {example}): not reused, left in place, and left out by cpgym report; use a new --out to keep "
            f"the versions apart")


def outdated_cells_note(num: int, example: str, out) -> str:
    """The warning about finished cells in ``out`` that other simulator / policy code computed."""
    return (f"warning: {num} finished cell(s) in {out} were computed by other code (envs/, baselines/ or "
            f"baselines/runner.py changed since, e.g. {example}) and are reused as they are; use a new --out "
            f"to recompute them")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    spec = load_spec(args.spec)  # every spec error is raised here, before anything runs
    out = Path(args.out) if args.out else default_out_dir(spec)
    check_out_dir(str(out))  # a file there: one line naming --out, not "PATH: File exists"
    # a refused run writes nothing: no stray folder for --jobs 0, no other sweep's provenance.json
    # overwritten; --dry-run checks the same flags
    check_sweep_target(spec, out, args.backend, args.jobs)
    if args.dry_run:
        cells = spec.resolve()
        finished, legacy = match_finished(cells, out)
        print(f"sweep {spec.name}: {spec.num_cells} cells, {sum(c.key in finished for c in cells)} finished in {out}")
        stale = sorted(d for k, d in finished.items() if k not in {c.key for c in cells})
        if stale:
            print(stale_cells_note(len(stale), stale[0], out), file=sys.stderr)
        outdated = outdated_cells(out, [c.key for c in cells] + list(legacy.values()))
        if outdated:
            print(outdated_cells_note(len(outdated), outdated[0], out), file=sys.stderr)
        for c in cells:
            mark = "done" if c.key in finished else "todo"
            print(f"  {c.key}  {mark}  {c.workload.label}  {c.policy}  seed={c.config.seed}  workload_seed={c.workload.seed}  "
                  + " ".join(f"{k}={v}" for k, v in c.axes if k not in ("policy", "seed")))
        return 0

    write_provenance(out, argv=getattr(args, "argv", None))
    try:
        outcome = run_sweep(spec, out, backend=args.backend, jobs=args.jobs, wandb_mode=args.wandb,
                            wandb_project=args.wandb_project, progress=False if args.quiet else args.progress,
                            ray_address=args.ray_address)
    except KeyboardInterrupt:  # workers are stopped and the manifest saved by run_sweep
        num_done = len(scan_finished(out))
        print(f"cpgym sweep: interrupted; {num_done} of {spec.num_cells} cells finished in {out}; "
              f"run the same command again to resume", file=sys.stderr)
        return 130
    print(f"sweep {spec.name}: {outcome.num_cells} cells; skipped {outcome.num_skipped} finished, ran {outcome.num_run} "
          f"({outcome.num_done} done, {outcome.num_failed} failed) in {outcome.wall_s:.1f} s [{args.backend}]; "
          f"results in {out}")
    for key, err in outcome.failures:
        print(f"  failed {key}: {err}")
    if outcome.stale_dirs:
        print(stale_cells_note(len(outcome.stale_dirs), outcome.stale_dirs[0], out), file=sys.stderr)
    if outcome.outdated_dirs:
        print(outdated_cells_note(len(outcome.outdated_dirs), outcome.outdated_dirs[0], out), file=sys.stderr)
    return 1 if outcome.num_failed else 0
