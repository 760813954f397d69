"""``cpgym faults`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.faults`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC",
                   help="fault experiment spec (YAML), e.g. experiments/specs/faults/conversation.yaml")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output folder (default runs/faults/<spec name>; the shipped results/faults was made with "
                        "--out results/faults)")
