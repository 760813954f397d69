"""``cpgym sweep`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.sweep`)."""

from __future__ import annotations

import argparse

from envs.workloads import WORKLOAD_NAMES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC",
                   help="experiment spec file (.yaml/.yml/.toml); its workload.name is one of "
                        f"{', '.join(sorted(WORKLOAD_NAMES))} (or workload.trace: a trace file), its policies those of "
                        "cpgym simulate --list-policies")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local process pool (default) or Ray (a local instance unless --ray-address)")
    p.add_argument("--jobs", type=int, default=None, help="cells in parallel (default: CPU count)")
    p.add_argument("--out", metavar="DIR", help="output folder (default runs/sweeps/<spec name>); re-running resumes")
    p.add_argument("--wandb", choices=("offline", "online", "disabled"), default="offline",
                   help="wandb logging per cell, grouped by sweep (default offline: files under OUT/wandb, no network)")
    p.add_argument("--wandb-project", default="cpgym", help="wandb project (default cpgym)")
    p.add_argument("--ray-address", metavar="ADDR", help="existing Ray cluster (OUT must be on a shared file system)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the spec, list the cells and which are finished, run nothing")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress on stderr: a bar on a terminal, a line every 10 s otherwise (default on)")
    p.add_argument("--quiet", action="store_true", help="no progress output (same as --no-progress)")
