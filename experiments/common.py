"""The functions turning the shared arguments of the commands that run simulations (simulate,
compare, evaluate, ...; declared in :mod:`experiments.flags.common`) into a workload and a
:class:`SimConfig`, and the commands' shared output helpers."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from envs.sim import PoolConfig, SimConfig, SLOConfig, Workload
from envs.sim.options import build_config, check_out_file, flag_defaults, split_number_list
from envs.sim.tier_config import TierConfig, parse_levels
from envs.workloads import DEFAULT_WORKLOAD, WorkloadSource
from experiments.flags.common import SIM_GROUP, add_sim_arguments, add_workload_arguments  # noqa: F401  (re-exported)

#: The ``--kv-*`` flags that configure a tier below HBM: flag dest -> the tier it needs (``None``:
#: any tier below HBM). Giving one with a value other than its default while ``--kv-tiers`` lacks
#: that tier would be silently ignored, so :func:`tier_config_from_args` rejects it.
TIER_FLAG_NEEDS: dict[str, str | None] = {
    "dram_gb_per_node": "dram", "dram_gbps_per_gpu": "dram", "kv_eviction": "dram",
    "store_gb": "store", "store_gbps_per_node": "store", "store_lookup_ms": "store",
    "kv_prefetch": None, "kv_prefetch_depth": None, "kv_layerwise": None, "kv_buffer_layers": None,
    "kv_num_layers": None, "kv_fetch_policy": None,
}


#: The numeric ``--kv-*`` flags in their own units (GB, GB/s, ms) -> the range they must lie in;
#: checked by :func:`tier_config_from_args` so that an error names the flag, not the byte field.
TIER_FLAG_RANGES: dict[str, str] = {"dram_gb_per_node": "> 0", "dram_gbps_per_gpu": "> 0", "store_gb": "> 0",
                                    "store_gbps_per_node": "> 0", "store_lookup_ms": ">= 0"}


def tier_config_from_args(args: argparse.Namespace):
    """The :class:`envs.sim.tier_config.TierConfig` of the ``--kv-*`` arguments (the default, tiers
    off, when ``--kv-tiers`` is ``hbm``).

    Raises:
        ValueError: on bad tier names, a ``--kv-*`` flag given (not at its default) for a tier
            that ``--kv-tiers`` does not enable (it would have no effect), or a capacity, bandwidth or
            latency flag out of range (naming the flag in its own units).
    """
    levels = parse_levels(getattr(args, "kv_tiers", "hbm"))
    defaults = flag_defaults(TierConfig)
    for dest, needs in TIER_FLAG_NEEDS.items():
        if not hasattr(args, dest) or getattr(args, dest) == defaults[dest]:
            continue
        if (needs is None and len(levels) == 1) or (needs is not None and needs not in levels):
            flag = "--" + dest.replace("_", "-")
            tier = "a tier below hbm (--kv-tiers hbm,dram[,store])" if needs is None else \
                f"--kv-tiers with {needs} (e.g. --kv-tiers hbm,{'dram' if needs == 'dram' else 'dram,store'})"
            raise ValueError(f"{flag} has no effect with --kv-tiers {','.join(levels)}; it needs {tier}")
    if len(levels) == 1:
        return TierConfig()
    for dest, mode_flag, mode_given in (("kv_prefetch_depth", "--kv-prefetch queue-head", args.kv_prefetch == "queue-head"),
                                        ("kv_buffer_layers", "--kv-layerwise", args.kv_layerwise),
                                        ("kv_num_layers", "--kv-layerwise", args.kv_layerwise)):
        v = getattr(args, dest)
        if v < 1:
            raise ValueError(f"--{dest.replace('_', '-')} must be an integer >= 1, got {v}")
        if v != defaults[dest] and not mode_given:  # read only in that mode: it would have no effect
            raise ValueError(f"--{dest.replace('_', '-')} has no effect without {mode_flag}")
    for dest, lowest in TIER_FLAG_RANGES.items():  # in the flags' own units (TierConfig would name bytes)
        v = getattr(args, dest)
        if v is not None and not (math.isfinite(v) and (v > 0 if lowest == "> 0" else v >= 0)):
            raise ValueError(f"--{dest.replace('_', '-')} must be a finite number {lowest}, got {v!r}")
    return build_config(TierConfig, args)


def parse_list(text: str, flag: str, kind: type = float, positive: bool = False) -> list:
    """Parses a comma-separated option value (``"10,20,40"``) into numbers of ``kind``.

    Raises:
        ValueError: naming ``flag`` when an item is not a number (an empty item included), the list is empty, or (with
            ``positive``) a value is <= 0, NaN or infinite.
    """
    try:
        vals = split_number_list(text, kind)
    except ValueError as e:
        raise ValueError(f"{flag} {e}") from None
    if positive and not all(v > 0 and math.isfinite(v) for v in vals):  # float("nan") / "inf" parse
        raise ValueError(f"{flag} values must all be finite numbers > 0, got {text!r}")
    return vals


#: The numeric pool and simulator flags (``dest``) -> the range they must lie in, in the flags' own
#: units; checked by :func:`check_sim_flags` so that an error names the flag and the value typed,
#: not the :class:`SimConfig` field (``latency.kv_handoff_bandwidth_bytes_per_s ... got -1000000000.0``).
SIM_FLAG_RANGES: dict[str, str] = {"pool_gpus": ">= 1", "gpus_per_node": ">= 1", "max_batch_tokens": ">= 1", "seed": ">= 0",
                                   "horizon_s": "> 0", "slo_scale": "> 0", "prediction_bias": "> 0",
                                   "prediction_noise": ">= 0", "cache_capacity_scale": ">= 0",
                                   "first_decode_step_s": ">= 0", "kv_handoff_gbps": "> 0"}


def check_sim_flags(args: argparse.Namespace) -> None:
    """The numeric flags of :data:`SIM_FLAG_RANGES` (those the parser has and that are given),
    ``--slo SECONDS`` and ``--node-calibrations`` (one existing file or '' per node).

    Raises:
        ValueError: naming the flag, the range (integers for integer flags, else finite numbers:
            ``inf`` is refused, ``--horizon-s`` included — leave it out to run until every request
            finished) and the value as typed.
    """
    for dest, rule in SIM_FLAG_RANGES.items():
        v = getattr(args, dest, None)
        if v is None:
            continue
        op, lowest = rule.split()
        if not (math.isfinite(v) and (v > float(lowest) if op == ">" else v >= float(lowest))):
            kind = "an integer" if isinstance(v, int) else "a finite number"
            extra = " (leave --horizon-s out to run until every request finished)" if dest == "horizon_s" else ""
            raise ValueError(f"--{dest.replace('_', '-')} must be {kind} {rule}, got {v:g}{extra}")
    if getattr(args, "slo", "scaled") != "scaled":
        try:
            seconds = float(args.slo)
        except ValueError:
            raise ValueError(f"--slo must be a number of seconds or 'scaled', got {args.slo!r}") from None
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"--slo must be a finite number of seconds > 0 or 'scaled', got {args.slo}")
    paths = _node_calibrations_from_args(args)
    if paths:
        num_nodes = -(-args.pool_gpus // args.gpus_per_node)
        if len(paths) != num_nodes:
            raise ValueError(f"--node-calibrations needs one calibration per node ('' = --calibration): {num_nodes} "
                             f"node(s) of --gpus-per-node {args.gpus_per_node} in --pool-gpus {args.pool_gpus}, "
                             f"got {len(paths)} in {args.node_calibrations!r}")
        for path in paths:
            if path and Path(path).expanduser().is_dir():
                raise ValueError(f"--node-calibrations: {path} is a folder; expected a calibration JSON file")
            if path and not Path(path).expanduser().is_file():
                raise ValueError(f"--node-calibrations: {path} does not exist; expected a calibration JSON file")


def sim_config_from_args(args: argparse.Namespace, composition: str | None = None, **overrides) -> SimConfig:
    """Builds the validated :class:`SimConfig` of the shared arguments (:func:`add_sim_arguments`:
    the flags in their own units converted to the fields, a flag left out at the field default);
    ``composition`` replaces ``--pool-composition`` (:class:`PoolConfig`'s default when neither is
    given); ``overrides`` replace whole fields of the result.

    Raises:
        ValueError: naming the flag (:func:`check_sim_flags`), or from the config's own checks.
    """
    check_sim_flags(args)
    if args.slo == "scaled":
        slo = SLOConfig(kind="scaled", **({} if args.slo_scale is None else {"slo_scale": args.slo_scale}))
    else:
        try:
            seconds = float(args.slo)
        except ValueError:
            raise ValueError(f"--slo must be a number of seconds or 'scaled', got {args.slo!r}") from None
        if args.slo_scale is not None:
            raise ValueError(f"--slo-scale applies to --slo scaled only; with a fixed --slo {args.slo} drop it")
        slo = SLOConfig(kind="fixed", ttft_slo_s=seconds)
    given = {} if composition is None else {"composition": composition}  # else --pool-composition (PoolConfig's if left out)
    try:
        pool = build_config(PoolConfig, args, exclude=("composition",) if given or not hasattr(args, "pool_composition")
                            else (), **given)
    except ValueError as exc:  # 'composition item ...' names no flag: say which one the user typed
        if given or getattr(args, "pool_composition", None) is None or not str(exc).startswith("composition"):
            raise
        raise ValueError(f"--pool-composition {args.pool_composition}: {exc}") from None
    cfg = build_config(SimConfig, args, exclude=() if hasattr(args, "seed") else ("seed",), pool=pool, slo=slo,
                       kv_tiers=tier_config_from_args(args))
    if overrides:
        from dataclasses import replace

        cfg = replace(cfg, **overrides)
    return cfg


def _node_calibrations_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    text = getattr(args, "node_calibrations", None)
    return tuple(p.strip() for p in text.split(",")) if text else ()


def check_workload_flags(args: argparse.Namespace) -> None:
    """Checks the shared workload flags a command has (``--workload-seed``, ``--arrival-window-s``,
    ``--target-rps``, ``--rate-scale``; one it lacks is skipped), so that a bad value is an error
    naming the flag the user typed, not the :class:`~envs.workloads.WorkloadSource` field
    (``workload: target_rps``) it would later fail in.

    Raises:
        ValueError: naming the flag, on a negative seed, an empty or negative window or a rate
            that is not a finite number > 0.
    """
    seed = getattr(args, "workload_seed", None)
    if seed is not None and seed < 0:
        raise ValueError(f"--workload-seed must be an integer >= 0, got {seed}")
    window = getattr(args, "arrival_window_s", None)
    if window and not (0 <= window[0] < window[1]):
        raise ValueError(f"--arrival-window-s START END needs 0 <= START < END, got {window[0]:g} {window[1]:g}")
    for flag in ("target_rps", "rate_scale"):
        v = getattr(args, flag, None)
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise ValueError(f"--{flag.replace('_', '-')} must be a finite number > 0, got {v}")


def workload_source_from_args(args: argparse.Namespace, default_workload: str | None = None,
                               default_trace: str | None = None):
    """The :class:`~envs.workloads.WorkloadSource` of the shared workload flags
    (:func:`add_workload_arguments`); with neither ``--trace`` nor ``--workload``, ``default_trace``
    if given, else the named ``default_workload`` (each defaulting to the one the parser was built
    with, i.e. the one its help names).

    Raises:
        ValueError: naming the flag, on a bad seed, rate or window.
    """
    check_workload_flags(args)
    window = args.arrival_window_s
    if default_workload is None and default_trace is None:
        default_workload = getattr(args, "_default_workload", DEFAULT_WORKLOAD)
        default_trace = getattr(args, "_default_trace", None)
    trace, name = args.trace, args.workload
    if trace is None and name is None:
        trace, name = (default_trace, None) if default_trace is not None else (None, default_workload)
    params = parse_workload_params(args.workload_param)
    if params and trace is not None:
        raise ValueError("--workload-param overrides a named workload's generator; it does not apply to a trace")
    if getattr(args, "skip_invalid", False) and trace is None:
        raise ValueError(f"--skip-invalid skips invalid trace lines; it does not apply to the named workload {name!r}")
    return WorkloadSource(name=name, trace=trace, seed=args.workload_seed, target_rps=args.target_rps, params=params,
                          rate_scale=args.rate_scale, arrival_window_s=tuple(window) if window else None,
                          skip_invalid=args.skip_invalid)


#: Generator arguments that other workload flags set: ``--workload-param`` refuses them.
RESERVED_WORKLOAD_PARAMS = {"name": "the workload is named by --workload", "seed": "the seed is --workload-seed"}


def parse_workload_params(items: list[str], flag: str = "--workload-param") -> tuple[tuple[str, object], ...]:
    """``["duration_s=120", "rising_rate=false"]`` -> ``(("duration_s", 120), ("rising_rate", False))``:
    values are read as int, float, true/false or else kept as text (the generator validates them).

    Raises:
        ValueError: naming ``flag`` on an item without ``=`` or a repeated name.
    """
    out: dict[str, object] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{flag} must be NAME=VALUE, got {item!r}")
        if name.strip() in out:
            raise ValueError(f"{flag} {name.strip()} given twice")
        if flag == "--workload-param" and name.strip() in RESERVED_WORKLOAD_PARAMS:
            raise ValueError(f"{flag} {name.strip()}: not a generator parameter here; "
                             f"{RESERVED_WORKLOAD_PARAMS[name.strip()]}")
        value: object = text
        for conv in (int, float):
            try:
                value = conv(text)
                break
            except ValueError:
                pass
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        out[name.strip()] = value
    return tuple(out.items())


def workload_from_args(args: argparse.Namespace, default_workload: str | None = None) -> Workload:
    """Builds the workload of the shared workload flags (:func:`workload_source_from_args`);
    skipped invalid trace lines are reported by the loader's :class:`~envs.workloads.TraceWarning`
    (one line under the CLI).

    Raises:
        ValueError: on bad flags, or when no request is left (naming the window).
    """
    src = workload_source_from_args(args, default_workload)
    return check_has_requests(src.build())


def check_has_requests(wl: Workload) -> Workload:
    """Returns ``wl``; raises ValueError (naming ``--arrival-window-s``) when it has no request, e.g. an
    arrival window past its last arrival."""
    if wl.num_requests == 0:
        raise ValueError(f"workload {wl.name!r} has no requests (check --arrival-window-s against its arrivals)")
    return wl


def check_plot_file(path: str | None, flag: str = "--plot") -> None:
    """:func:`check_out_file` for a figure, plus its format: the file name must end in a format
    matplotlib writes (``.png``, ``.pdf``, ``.svg``, ...). ``savefig`` refused ``x.txt`` only after
    every simulation had run, and wrote ``x`` (no suffix) as ``x.png``.

    Raises:
        ValueError: naming ``flag``, ``path`` and the formats expected.
    """
    from pathlib import Path

    check_out_file(path, flag)
    if path is None:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise ValueError(f"{flag} {path} needs a file name ending in one of "
                         f"{', '.join('.' + f for f in formats)} (the figure format)")


def dumps_json(obj) -> str:
    """JSON with NaN/inf written as null (strict JSON for downstream tools)."""

    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), indent=2)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Writes ``text`` to ``path`` through a temporary file beside it and ``os.replace``: a reader,
    or a run stopped midway (an error, Ctrl-C), sees the previous complete file or the new one,
    never half a file (the temporary file is removed if the write fails). Returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # a process of its own per writer
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_rows_csv(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Writes ``rows`` as ``pandas.DataFrame(rows).to_csv(path, index=False)`` would (the same
    bytes), atomically (:func:`write_text_atomic`). The per-unit writer of the commands that keep
    their finished units when stopped midway: called with the rows so far after each finished
    episode / run / cell, and once more at the end, so a partial file has the complete run's
    format and columns of the rows it holds."""
    import pandas as pd

    return write_text_atomic(path, pd.DataFrame(rows).to_csv(index=False))


def print_unclipped(table) -> None:
    """Prints a rich table at least 160 columns wide and as wide as it needs, so that no cell (a
    long policy name, a header naming the reference policy) is ever cut to "…"."""
    from rich.console import Console
    from rich.measure import Measurement

    wide = Console(width=100_000)  # measure without a width limit
    Console(width=max(160, Measurement.get(wide, wide.options, table).maximum)).print(table)
