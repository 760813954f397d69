"""``cpgym train routing|reconfig``: train a learned policy (MaskablePPO) on episode windows of a
trace or synthetic workload; writes checkpoints, CSV logs and (offline) wandb logs.

The training flags (declared in :mod:`experiments.flags.train`) are generated from the config
dataclasses (``policies.routing.train_config.TrainConfig``, ``policies.routing.episodes.EpisodeSource``,
``policies.reconfig.train_config.ReconfigTrainConfig``) by ``envs.sim.options``; the workload and
simulator flags are the shared groups of ``experiments.flags.common``. A flag a kind does not use
is not declared for it (argparse rejects it). Without ``--out`` the run folder is
``runs/train/<run name>`` (:func:`default_out_dir`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from baselines.runner import run_name, unique_run_dir
from envs.provenance import write_provenance
from envs.sim.options import check_out_dir, config_from_args
from experiments.common import sim_config_from_args, workload_source_from_args
from experiments.flags.train import DEFAULT_RUNS_DIR, DEFAULT_SOURCES, OUT_HELP, add_arguments  # noqa: F401  (re-exported)
from policies.common.run_end import TrainingInterrupted
from policies.reconfig.train_config import ReconfigTrainConfig
from policies.routing.episodes import EpisodeSource
from policies.routing.train_arms import ArmTrainConfig, train_arms
from policies.routing.train_config import TrainConfig


def configs_from_args(args: argparse.Namespace):
    """The training config of the parsed flags: ``TrainConfig`` (routing) or
    ``ReconfigTrainConfig`` (reconfig). Raises ValueError naming the field on bad values."""
    ws = workload_source_from_args(args)  # the kind's default source (DEFAULT_SOURCES), set by add_arguments
    if args.kind == "reconfig":
        return config_from_args(ReconfigTrainConfig, args, workload=ws)
    return config_from_args(TrainConfig, args, source=config_from_args(EpisodeSource, args, workload=ws))


def default_out_dir(kind: str, cfg, when: float | None = None) -> Path:
    """The run folder of ``cpgym train KIND`` without ``--out``: ``runs/train/<run name>``, the
    CleanRL run name ``{workload}__{kind}__{seed}__{unix time}`` of
    :func:`baselines.runner.run_name` (as ``cpgym simulate --out`` names its runs), where the
    workload is the episode source's label (routing: with ``@<rate>rps`` for ``--target-rps``;
    arms: the workloads joined by ``+``) and the seed the training seed; ``-2``, ``-3``, ... if
    that folder exists (:func:`baselines.runner.unique_run_dir`)."""
    if kind == "routing":
        workload = cfg.source.label
    elif kind == "reconfig":
        workload = cfg.workload_source(cfg.seeds[0]).label
    else:
        workload = "+".join(Path(s).name.split(".")[0] for s in cfg.source_list())
    return unique_run_dir(Path(DEFAULT_RUNS_DIR) / run_name(workload, kind, cfg.seed, when))


def _resolve_out(args: argparse.Namespace, cfg) -> None:
    """Sets ``args.out`` to :func:`default_out_dir` when ``--out`` was not given, and says so."""
    if args.out is None:
        args.out = str(default_out_dir(args.kind, cfg))
        print(f"cpgym train {args.kind}: run folder {args.out} (--out not given)", flush=True)


#: Files that make a folder a checkpoint (a model, the arm-selection model, the training config).
CHECKPOINT_FILES = ("model.zip", "arm_model.json", "train_config.json", "vecnormalize.pkl")


def check_checkpoint_out(out: str | Path, overwrite: bool) -> None:
    """Refuses a ``--out`` that already holds a checkpoint (:data:`CHECKPOINT_FILES`) unless
    ``overwrite``: a second training there silently replaced the first one's model.

    Raises:
        ValueError: naming the folder, the checkpoint files found and ``--overwrite``.
    """
    d = Path(out)
    found = [n for n in CHECKPOINT_FILES if (d / n).exists()] if d.is_dir() else []
    if found and not overwrite:
        raise ValueError(f"{d} holds a checkpoint ({', '.join(found)}); choose a new or empty --out, or add "
                         "--overwrite to replace it")


def run(args: argparse.Namespace) -> int:
    if args.kind == "arms":
        return _run_arms(args)
    cfg = configs_from_args(args)
    sim_config = sim_config_from_args(args)
    _resolve_out(args, cfg)
    check_out_dir(args.out)  # the same check as `train arms` (train_arms): before anything runs or is written
    check_checkpoint_out(args.out, args.overwrite)
    if args.kind == "reconfig":
        # lazy: gymnasium (start-up of the CLI)
        # lazy: gymnasium (start-up of the CLI)
        # lazy: gymnasium (start-up of the CLI)
        from policies.reconfig.train import check_init_from, check_oracle_phase_ttft, check_target_menu

        check_target_menu(cfg, sim_config)  # these three before provenance.json is written to --out
        check_oracle_phase_ttft(cfg, sim_config)
        check_init_from(cfg)
    else:
        from policies.routing.train import check_routing_setup  # lazy: gymnasium (start-up of the CLI)

        check_routing_setup(cfg, sim_config)  # --bc-policy, --num-slots: before provenance.json is written to --out
    # the first workload is built before anything is written to --out: a missing trace file or a
    # bad --workload-param (only checked by its generator) left provenance.json behind the error
    (cfg.source.workload_source() if args.kind == "routing" else cfg.workload_source(cfg.seeds[0])).build()
    write_provenance(args.out, argv=getattr(args, "argv", None))
    if args.kind == "reconfig":
        from policies.reconfig.train import train_reconfig as train  # lazy: gymnasium (start-up of the CLI)
    else:
        from policies.routing.train import train_routing as train  # lazy: gymnasium (start-up of the CLI)

    try:
        train(cfg, args.out, sim_config=sim_config, argv=getattr(args, "argv", None), progress="off" if args.quiet else None)
    except TrainingInterrupted as exc:  # Ctrl-C: the model at that moment is saved (policies.common.run_end)
        import sys

        print(f"cpgym train {args.kind}: {exc.describe()}", file=sys.stderr)
        return 130
    return 0


def _run_arms(args: argparse.Namespace) -> int:
    import sys

    cfg = config_from_args(ArmTrainConfig, args)
    sim_config = sim_config_from_args(args)
    _resolve_out(args, cfg)
    check_checkpoint_out(args.out, args.overwrite)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    train_arms(cfg, args.out, sim_config, argv=getattr(args, "argv", None), log=log)
    write_provenance(args.out, argv=getattr(args, "argv", None))
    return 0
