"""Arguments shared by the commands that run simulations (simulate, compare, evaluate, ...),
and the functions turning them into a workload and a :class:`SimConfig`."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from envs.sim import EngineConfig, LatencyConfig, PoolConfig, PredictionErrorConfig, SimConfig, SLOConfig, Workload
from envs.sim.cost_model import DEFAULT_CALIBRATION, DEFAULT_CALIBRATION_DESCRIPTION
from envs.sim.faults import load_fault_config
from envs.sim.options import check_out_file, split_number_list
from envs.sim.pool import DEFAULT_COMPOSITION
from envs.sim.tiers import TierConfig, parse_levels
from envs.workloads import DEFAULT_WORKLOAD, WorkloadSource


def add_workload_arguments(p: argparse.ArgumentParser, default_text: str | None = None,
                           default_workload: str = DEFAULT_WORKLOAD, default_trace: str | None = None) -> None:
    """The shared workload flags (read by :func:`workload_source_from_args`). The source used when
    neither ``--trace`` nor ``--workload`` is given is ``default_trace`` if given, else the named
    ``default_workload``; both are stored as parser defaults, so that the help text (``default_text``
    if given, else generated) and :func:`workload_source_from_args` name the same source."""
    from pathlib import Path

    if default_text is None:
        default_text = f"the trace {Path(default_trace).name}" if default_trace is not None else default_workload
    p.set_defaults(_default_workload=default_workload, _default_trace=default_trace)
    g = p.add_argument_group("workload")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="PATH", help="trace file: Mooncake JSONL, Azure 2023 CSV or the L-Eval lengths CSV")
    src.add_argument("--workload", metavar="NAME",
                     help=f"named synthetic workload (default, without --trace or --workload: {default_text})")
    rate = g.add_mutually_exclusive_group()
    rate.add_argument("--target-rps", type=float, metavar="X", help="time-scale arrivals to this mean rate [requests/s]")
    rate.add_argument("--rate-scale", type=float, metavar="X", help="multiply the arrival rate by X")
    g.add_argument("--window-s", type=float, nargs=2, metavar=("START", "END"),
                   help="keep arrivals in [START, END) s (after rate scaling)")
    g.add_argument("--skip-invalid", action="store_true",
                   help="skip invalid trace lines and report their count instead of failing")
    g.add_argument("--workload-seed", type=int, default=0,
                   help="seed of the synthetic generator / arrival spreading (default 0)")
    g.add_argument("--workload-param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a parameter of the named workload's generator, e.g. duration_s=120 (repeatable)")


def add_sim_arguments(p: argparse.ArgumentParser, seed: bool = True, composition: bool = True,
                      supported_degrees: str = "1,2,4,8", supported_degrees_note: str = "", horizon: bool = True) -> None:
    """The shared pool and simulator flags (read by :func:`sim_config_from_args`); ``seed=False``
    leaves out ``--seed`` for commands that draw simulator seeds themselves (training),
    ``composition=False`` leaves out ``--pool-composition`` for commands that set the composition
    of each run themselves (``cpgym dynamic``); ``supported_degrees`` is the command's default of
    ``--supported-degrees`` (``supported_degrees_note`` says where it comes from in the help);
    ``horizon=False`` hides ``--horizon-s`` from the help of a command that refuses it (it stays
    parsed, so that the command can say why)."""
    g = p.add_argument_group("pool and simulator")
    g.add_argument("--pool-gpus", type=int, default=40, help="GPUs in the prefill pool (default 40, the paper's prefill pool)")
    g.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per topology group (default 8)")
    if composition:
        # default None, read as DEFAULT_COMPOSITION by sim_config_from_args, so that a command can tell
        # an unset flag (cpgym evaluate --kind reconfig: the checkpoint's training composition)
        g.add_argument("--pool-composition", default=None,
                       help="worker composition: 'cp4x6,cp2x8' (counts) or 'cp4@0,cp2@4,...' (placements); "
                            f"default {DEFAULT_COMPOSITION} (evaluate --kind reconfig: the checkpoint's training "
                            "composition)")
    g.add_argument("--supported-degrees", default=supported_degrees,
                   help=f"CP degrees a worker may have (default {supported_degrees}{supported_degrees_note})")
    g.add_argument("--calibration", metavar="FILE",
                   help=f"calibration JSON (default: shipped {DEFAULT_CALIBRATION}, {DEFAULT_CALIBRATION_DESCRIPTION})")
    if seed:
        g.add_argument("--seed", type=int, default=0, help="seed of the run (execution noise, randomised policies); default 0")
    g.add_argument("--horizon-s", type=float,
                   help="stop at this simulated time [s], a finite number > 0; unfinished requests count as SLO "
                        "misses (default: run until every request finished)" if horizon else argparse.SUPPRESS)
    g.add_argument("--max-batch-tokens", type=int, default=EngineConfig.max_batch_tokens,
                   help="engine step token budget (default 16384)")
    g.add_argument("--slo", default="scaled", metavar="SECONDS|scaled",
                   help="TTFT SLO: a fixed number of seconds, or 'scaled' (default): "
                        "max(1 s, slo-scale x isolated single-GPU TTFT)")
    g.add_argument("--slo-scale", type=float, default=None,
                   help=f"scale of the 'scaled' SLO rule (default {SLOConfig.slo_scale:g}; only with --slo scaled)")
    g.add_argument("--prediction-bias", type=float, default=1.0, help="actual/predicted execution time factor (default 1.0)")
    g.add_argument("--prediction-noise", type=float, default=0.0,
                   help="log-normal sigma of actual/predicted per step (default 0)")
    g.add_argument("--cache-capacity-scale", type=float, default=1.0,
                   help="multiply every worker's prefix-cache capacity [blocks kept for reuse by later requests]; "
                        "0 = no prefix reuse; >= 0; the KV memory a prompt's own computation gets, and so the longest "
                        "servable prompt, is unchanged (default 1.0)")
    g.add_argument("--first-decode-step-s", type=float, default=LatencyConfig.first_decode_step_s,
                   help=f"first decode step added to TTFT [s] (default {LatencyConfig.first_decode_step_s:g})")
    g.add_argument("--node-calibrations", metavar="FILE,FILE,...",
                   help="heterogeneous pool: one calibration JSON per node, comma-separated ('' = --calibration), "
                        "e.g. H20 and H20-3e nodes; default: every node uses --calibration")
    g.add_argument("--faults", metavar="FILE",
                   help="fault schedule (YAML/JSON: GPU/node failures, stragglers, KV link faults; "
                        "envs/sim/faults.py); default none")
    g.add_argument("--kv-handoff-gbps", type=float, default=LatencyConfig.kv_handoff_bandwidth_bytes_per_s / 1e9,
                   help="prefill->decode KV hand-off bandwidth [GB/s] (default 25)")
    add_tier_arguments(p)


def add_tier_arguments(p: argparse.ArgumentParser) -> None:
    """``--kv-tiers`` and its capacities/bandwidths (defaults and their sources: envs/sim/tiers.py)."""
    d = TierConfig()
    g = p.add_argument_group("KV tiers (off unless --kv-tiers names a tier below hbm; envs/sim/tiers.py)")
    add = g.add_argument
    add("--kv-tiers", default="hbm", metavar="hbm[,dram][,store]",
        help="KV tiers: hbm (default, GPU caches only), hbm,dram (host memory per node), "
             "hbm,dram,store (plus a pool-wide KV store)")
    add("--dram-gb-per-node", type=float, default=d.dram_capacity_bytes_per_node / 1e9,
        help="host DRAM per node for KV [GB] (default 1000: half of a 2 TB HGX node)")
    add("--dram-gbps-per-gpu", type=float, default=d.dram_bytes_per_s_per_gpu / 1e9,
        help="host->GPU bandwidth per GPU [GB/s] (default 50: PCIe Gen5 x16)")
    add("--store-gb", type=float, default=d.store_capacity_bytes / 1e9, help="remote KV store capacity [GB] (default 8000)")
    add("--store-gbps-per-node", type=float, default=None,
        help="store read bandwidth into a node [GB/s] (default: the inter-node KV link, 25)")
    add("--store-lookup-ms", type=float, default=d.store_lookup_latency_s * 1e3,
        help="store metadata lookup latency [ms] (default 0.5)")
    add("--kv-eviction", choices=("lru", "next-use"), default=d.eviction, help="host-memory eviction rule (default lru)")
    add("--kv-prefetch", choices=("routing", "queue-head"), default=d.prefetch,
        help="when a fetch starts: at routing (default) or near the head of the worker's queue")
    add("--kv-prefetch-depth", type=int, default=d.prefetch_depth_requests,
        help="queue positions prefetched in queue-head mode (default 2)")
    add("--kv-layerwise", action="store_true", help="layer-wise KV loading (compute overlaps the read of later layers)")
    add("--kv-buffer-layers", type=int, default=d.layerwise_buffer_layers,
        help="layers per layer-wise loading chunk (default 4)")
    add("--kv-num-layers", type=int, default=d.num_layers,
        help="model layers for layer-wise loading (default 48, Qwen3-30B-A3B)")
    add("--kv-fetch-policy", choices=("predicted", "always", "never"), default=d.fetch_policy,
        help="fetch or recompute: by predicted time (default), always fetch, never fetch")


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


def _tier_flag_defaults() -> dict:
    """The parser default of each flag of :data:`TIER_FLAG_NEEDS` (as :func:`add_tier_arguments` sets them)."""
    d = TierConfig()
    return {"dram_gb_per_node": d.dram_capacity_bytes_per_node / 1e9, "dram_gbps_per_gpu": d.dram_bytes_per_s_per_gpu / 1e9,
            "kv_eviction": d.eviction, "store_gb": d.store_capacity_bytes / 1e9, "store_gbps_per_node": None,
            "store_lookup_ms": d.store_lookup_latency_s * 1e3, "kv_prefetch": d.prefetch,
            "kv_prefetch_depth": d.prefetch_depth_requests, "kv_layerwise": False,
            "kv_buffer_layers": d.layerwise_buffer_layers, "kv_num_layers": d.num_layers, "kv_fetch_policy": d.fetch_policy}


def tier_config_from_args(args: argparse.Namespace):
    """The :class:`envs.sim.tiers.TierConfig` of the ``--kv-*`` arguments (the default, tiers
    off, when ``--kv-tiers`` is ``hbm``).

    Raises:
        ValueError: on bad tier names, a ``--kv-*`` flag given (not at its default) for a tier
            that ``--kv-tiers`` does not enable (it would have no effect), or a capacity, bandwidth or
            latency flag out of range (naming the flag in its own units).
    """
    levels = parse_levels(getattr(args, "kv_tiers", "hbm"))
    defaults = _tier_flag_defaults()
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
    store_gbps = args.store_gbps_per_node
    return TierConfig(
        levels=levels, dram_capacity_bytes_per_node=args.dram_gb_per_node * 1e9,
        dram_bytes_per_s_per_gpu=args.dram_gbps_per_gpu * 1e9, store_capacity_bytes=args.store_gb * 1e9,
        store_bytes_per_s_per_node=None if store_gbps is None else store_gbps * 1e9,
        store_lookup_latency_s=args.store_lookup_ms / 1e3, eviction=args.kv_eviction, prefetch=args.kv_prefetch,
        prefetch_depth_requests=args.kv_prefetch_depth, layerwise=args.kv_layerwise,
        layerwise_buffer_layers=args.kv_buffer_layers, num_layers=args.kv_num_layers, fetch_policy=args.kv_fetch_policy)


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
    """Builds the validated :class:`SimConfig` of the shared arguments; ``composition`` replaces
    ``--pool-composition`` (required when the parser has no such flag).

    Raises:
        ValueError: naming the flag (:func:`check_sim_flags`), or from the config's own checks.
    """
    check_sim_flags(args)
    if args.slo == "scaled":
        slo = SLOConfig(kind="scaled", slo_scale=SLOConfig.slo_scale if args.slo_scale is None else args.slo_scale)
    else:
        try:
            seconds = float(args.slo)
        except ValueError:
            raise ValueError(f"--slo must be a number of seconds or 'scaled', got {args.slo!r}") from None
        if args.slo_scale is not None:
            raise ValueError(f"--slo-scale applies to --slo scaled only; with a fixed --slo {args.slo} drop it")
        slo = SLOConfig(kind="fixed", ttft_slo_s=seconds)
    degrees = tuple(parse_list(args.supported_degrees, '--supported-degrees', int))
    if any(d < 1 or d & (d - 1) for d in degrees):  # PoolConfig's own error names its field pool.supported_degrees
        raise ValueError(f"--supported-degrees must be powers of two >= 1 (CP degrees), got {args.supported_degrees!r}")
    cfg = SimConfig(
        pool=PoolConfig(num_gpus=args.pool_gpus, gpus_per_node=args.gpus_per_node,
                        composition=(composition if composition is not None
                                     else DEFAULT_COMPOSITION if args.pool_composition is None else args.pool_composition),
                        supported_degrees=degrees),
        engine=EngineConfig(max_batch_tokens=args.max_batch_tokens),
        latency=LatencyConfig(kv_handoff_bandwidth_bytes_per_s=args.kv_handoff_gbps * 1e9,
                              first_decode_step_s=args.first_decode_step_s),
        prediction_error=PredictionErrorConfig(bias=args.prediction_bias, noise_sigma=args.prediction_noise),
        slo=slo,
        calibration_path=args.calibration,
        seed=getattr(args, "seed", 0),
        horizon_s=args.horizon_s,
        cache_capacity_scale=args.cache_capacity_scale,
        kv_tiers=tier_config_from_args(args),
        faults=_faults_from_args(args),
        node_calibration_paths=_node_calibrations_from_args(args),
    )
    if overrides:
        from dataclasses import replace

        cfg = replace(cfg, **overrides)
    return cfg


def _node_calibrations_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    text = getattr(args, "node_calibrations", None)
    return tuple(p.strip() for p in text.split(",")) if text else ()


def _faults_from_args(args: argparse.Namespace):
    path = getattr(args, "faults", None)
    if not path:
        return None

    return load_fault_config(path)


def workload_source_from_args(args: argparse.Namespace, default_workload: str | None = None,
                               default_trace: str | None = None):
    """The :class:`~envs.workloads.WorkloadSource` of the shared workload flags
    (:func:`add_workload_arguments`); with neither ``--trace`` nor ``--workload``, ``default_trace``
    if given, else the named ``default_workload`` (each defaulting to the one the parser was built
    with, i.e. the one its help names).

    Raises:
        ValueError: naming the flag, on a bad seed, rate or window.
    """
    if args.workload_seed < 0:
        raise ValueError(f"--workload-seed must be an integer >= 0, got {args.workload_seed}")
    if args.window_s and not (0 <= args.window_s[0] < args.window_s[1]):
        raise ValueError(f"--window-s START END needs 0 <= START < END, got {args.window_s[0]:g} {args.window_s[1]:g}")
    for flag in ("target_rps", "rate_scale"):
        v = getattr(args, flag)
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise ValueError(f"--{flag.replace('_', '-')} must be a finite number > 0, got {v}")
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
                          rate_scale=args.rate_scale, window_s=tuple(args.window_s) if args.window_s else None,
                          skip_invalid=args.skip_invalid)


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
    """Returns ``wl``; raises ValueError (naming ``--window-s``) when it has no request, e.g. an
    arrival window past its last arrival."""
    if wl.num_requests == 0:
        raise ValueError(f"workload {wl.name!r} has no requests (check --window-s against its arrivals)")
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
