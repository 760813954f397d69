"""The ``cpgym`` command line.

Each sub-command lives in its own module under ``experiments/commands/`` exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only maps names to modules
(imported lazily so that ``cpgym simulate`` does not import torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module, one-line help). Plain registry; add a line to add a command.
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("experiments.commands.simulate", "simulate a trace or workload under routing policies and print the comparison"),
    "bench": ("experiments.commands.bench", "measure simulator speed (requests/s, simulated/wall time, peak memory)"),
    "train": ("experiments.commands.train", "train a learned routing or reconfiguration policy (MaskablePPO)"),
    "evaluate": ("experiments.commands.evaluate", "evaluate policies on held-out windows and seeds, with 95% confidence intervals"),
    "bench-env": ("experiments.commands.bench_env", "measure Gymnasium env steps/s and per-decision policy latency"),
    "dynamic": ("experiments.commands.dynamic", "paper §9 dynamic phases: Vertumnus + split/merge controller vs every fixed composition (per-phase TTFT, reconfiguration ops, plot)"),
    "compare": ("experiments.commands.compare", "compare a policy suite at several request rates (paper-style table, % vs strongest baseline, plot)"),
    "sweep": ("experiments.commands.sweep", "run an experiment spec's cells (resumable; local process pool or Ray)"),
    "report": ("experiments.commands.report", "plots and a Markdown summary (95% CIs over seeds) of a sweep's run folder"),
    "cache-ablation": ("experiments.commands.cache_ablation", "Vertumnus with local caches only vs with the global prefix-cache manager on tool-agent at increasing rates"),
    "cache-curve": ("experiments.commands.cache_curve", "replay a trace through one LRU prefix cache of N blocks: token-weighted hit rate per N (cache sizing)"),
    "kernels": ("experiments.commands.kernels", "reference CP attention kernels: `kernels check` runs the correctness suite (CPU, gloo)"),
    "profile": ("experiments.commands.profile", "time CP prefill over an (R, P, C) grid, fit the cost model, write a calibration file"),
    "calibrate": ("experiments.commands.calibrate", "roofline calibration from a model config and a GPU datasheet; writes a calibration file"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cpgym", description="Adaptive context-parallel prefill serving: simulator, baselines, learned policies.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        escaped = help_text.replace("%", "%%")  # argparse formats help strings with %
        p = sub.add_parser(name, help=escaped, description=escaped)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:  # stdout closed early (e.g. piped into `head`): not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except (ValueError, OSError, EOFError) as exc:
        # Input errors (bad values, unreadable/missing/mistyped files and folders, corrupt
        # archives) are reported as one clear line, not a traceback (exit status 2).
        msg = str(exc)
        if isinstance(exc, OSError) and getattr(exc, "filename", None) and exc.strerror:
            msg = f"{exc.filename}: {exc.strerror}"
        print(f"cpgym {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
