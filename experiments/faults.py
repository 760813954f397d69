"""The fault experiment: every §9 policy (and the learned router) under the same faults.

A spec (YAML, ``experiments/specs/faults/conversation.yaml``) names a trace window, a load as a
fraction of capacity, the policies and the fault scenarios (fault schedule files,
``envs/sim/fault_config.py``). :func:`run_fault_experiment`:

1. estimates the capacity of ``capacity_policy`` on the window (:func:`estimate_capacity_rps`):
   bisection over the target rate; a rate is *sustainable* when the backlog drains — the last
   request finishes at most ``capacity_drain_s`` after the last arrival (DESIGN.md "Loads
   relative to capacity": the highest rate at which a long window's backlog drains);
2. scales the window to ``load_fraction`` x capacity and runs every policy under every scenario
   (plus a fault-free reference), same seed, same workload;
3. returns one row per (scenario, policy) and the per-request TTFT series for the plots.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from baselines.registry import get_policy
from baselines.runner import run_policy
from envs.metrics import summarize
from envs.planning.capacity_definitions import FaultDrainDefinition, search_capacity
from envs.sim.fault_config import load_fault_config
from envs.sim.yaml_keys import check_unique_keys, compose, load
from envs.workloads import default_traces_dir, load_trace, scale_to_rate, window
from experiments.spec.paths import SpecDeprecationWarning
from policies.common.checkpoint import LearnedPolicy, checkpoint_path, resolve_checkpoint
from policies.common.heuristic import make_routing_env, run_episode
from policies.routing.arm_selection import arm_policy_spec, is_arm_checkpoint

SPEC_KEYS = ("name", "description", "trace", "arrival_window_s", "load_fraction", "capacity_policy", "capacity_search_rps",
             "capacity_iterations", "capacity_drain_s", "policies", "learned", "scenarios", "seed", "plot_bin_s",
             "plot_before_s", "plot_after_s")
# spellings of earlier releases still read, with a one-line SpecDeprecationWarning (removed in the next release)
DEPRECATED_SPEC_KEYS = {"window_s": "arrival_window_s"}


@dataclass(frozen=True)
class FaultExperimentSpec:
    """A validated fault-experiment spec (module docstring; field units in names).

    Raises:
        ValueError: ``<file>: <key>: <problem>`` on an unknown key or invalid value.
    """

    name: str
    trace: str
    arrival_window_s: tuple[float, float]
    scenarios: tuple[tuple[str, str], ...]  # (scenario name, fault schedule path)
    policies: tuple[str, ...]
    load_fraction: float = 0.8
    capacity_policy: str = "vertumnus-router"
    capacity_search_rps: tuple[float, float] = (5.0, 80.0)
    capacity_iterations: int = 7
    capacity_drain_s: float = 30.0
    learned: str | None = None
    seed: int = 0
    plot_bin_s: float = 10.0
    plot_before_s: float = 120.0
    plot_after_s: float = 300.0
    description: str = ""
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        src = self.source or "spec"
        a, b = self.arrival_window_s
        if not 0 <= a < b:
            raise ValueError(f"{src}: arrival_window_s: expected [start, end] with 0 <= start < end, "
                             f"got {list(self.arrival_window_s)}")
        if not 0 < self.load_fraction <= 2:
            raise ValueError(f"{src}: load_fraction: expected a share in (0, 2], got {self.load_fraction}")
        lo, hi = self.capacity_search_rps
        if not 0 < lo < hi < math.inf:
            raise ValueError(f"{src}: capacity_search_rps: expected [low, high] [requests/s] with 0 < low < high, "
                             f"both finite, got {list(self.capacity_search_rps)}")
        if (isinstance(self.capacity_iterations, bool) or not isinstance(self.capacity_iterations, int)
                or self.capacity_iterations < 1):
            raise ValueError(f"{src}: capacity_iterations: expected an integer >= 1, got {self.capacity_iterations!r}")
        if not 0 < self.capacity_drain_s < math.inf:  # NaN passed `<= 0` and made every probe 'overloaded'
            raise ValueError(f"{src}: capacity_drain_s: expected seconds, a finite number > 0, got {self.capacity_drain_s}")
        if not self.policies or not self.scenarios:
            raise ValueError(f"{src}: policies and scenarios must each list at least one entry")
        if not (0 < self.plot_bin_s < math.inf):  # checked here: the plots come after every run
            raise ValueError(f"{src}: plot_bin_s: expected a bin width in seconds, a finite number > 0, got {self.plot_bin_s}")
        for key in ("plot_before_s", "plot_after_s"):
            if not (0 <= getattr(self, key) < math.inf):
                raise ValueError(f"{src}: {key}: expected seconds, a finite number >= 0, got {getattr(self, key)}")
        if self.plot_before_s + self.plot_after_s <= 0:
            raise ValueError(f"{src}: plot_before_s + plot_after_s: expected a plot span > 0 s, got 0")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{src}: seed: expected an integer >= 0, got {self.seed!r}")
        if self.learned is not None and not (isinstance(self.learned, str) and self.learned.strip()):
            raise ValueError(f"{src}: learned: expected a checkpoint (a shipped alias such as shipped-residual, or a "
                             f"checkpoint folder), got {self.learned!r}")


def load_spec(path: str | Path) -> FaultExperimentSpec:
    """Reads a fault-experiment spec; relative paths are relative to the spec file, ``@traces/``
    is the shared trace folder.

    Raises:
        ValueError: naming the file and the key (also for a ``learned`` checkpoint that does not
            exist and plot settings the plots would reject, found before any run).
    """
    import yaml

    p = Path(path)

    try:
        text = p.read_text()
        data = load(text)  # 1e9 is a number (PyYAML's safe_load read it as the string '1e9')
        root = compose(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: not valid YAML: {exc}") from None
    check_unique_keys(root, str(p))
    if not isinstance(data, dict):
        raise ValueError(f"{p}: expected a mapping with keys {list(SPEC_KEYS)}")
    _rename_deprecated_keys(p, data)
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"{p}: unknown key(s) {unknown}; expected only {list(SPEC_KEYS)}")

    def resolve(key: str, value: str) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{p}: {key}: expected a file path, got {value!r}")
        f = default_traces_dir() / value[len("@traces/"):] if value.startswith("@traces/") else (p.parent / value)
        if not f.is_file():
            raise ValueError(f"{p}: {key}: file {f} does not exist")
        return str(f.resolve())

    for key in ("name", "trace", "arrival_window_s", "policies", "scenarios"):
        if key not in data:
            raise ValueError(f"{p}: {key}: missing")
    scenarios = data["scenarios"]
    if not isinstance(scenarios, dict):
        raise ValueError(f"{p}: scenarios: expected a mapping scenario name -> fault schedule file")
    resolved = tuple((str(k), resolve(f"scenarios.{k}", v)) for k, v in scenarios.items())
    for k, f in resolved:
        load_fault_config(f)  # fail early, with the schedule's own file/line message
    policies = data["policies"]
    if not isinstance(policies, list) or not all(isinstance(x, str) for x in policies):
        raise ValueError(f"{p}: policies: expected a list of policy names")
    for key, name in [*((f"policies[{i}]", x) for i, x in enumerate(policies)),
                      ("capacity_policy", data.get("capacity_policy", "vertumnus-router"))]:
        try:
            get_policy(name)
        except ValueError as exc:
            raise ValueError(f"{p}: {key}: {exc}") from None
    kw = {k: data[k] for k in SPEC_KEYS if k in data and k not in ("trace", "scenarios", "policies")}
    _pairs(p, kw)
    spec = FaultExperimentSpec(trace=resolve("trace", data["trace"]), scenarios=resolved, policies=tuple(policies),
                               source=str(p), **kw)
    if spec.learned is not None:  # the learned row runs after the capacity search: a bad checkpoint fails now
        _check_learned(p, spec.learned)
    return spec


_NUMBER_KEYS = ("load_fraction", "capacity_drain_s", "plot_bin_s", "plot_before_s", "plot_after_s")


def _rename_deprecated_keys(p: Path, data: dict) -> None:
    """Renames in place each key of ``data`` spelled as in an earlier release
    (:data:`DEPRECATED_SPEC_KEYS`), with a one-line :class:`SpecDeprecationWarning`.

    Raises:
        ValueError: naming the file and key, when both the old and the new spelling are given.
    """
    for old, new in DEPRECATED_SPEC_KEYS.items():
        if old in data:
            if new in data:
                raise ValueError(f"{p}: {old}: given with its new spelling {new}; expected one of the two")
            warnings.warn(f"{p}: {old} is deprecated and will be removed in the next release; use {new}",
                          SpecDeprecationWarning, stacklevel=3)
            data[new] = data.pop(old)


def _check_learned(p: Path, learned: str) -> None:
    """Raises ValueError ``<file>: learned: <path>: <problem>`` if ``learned`` is not a loadable
    checkpoint location (a shipped alias, a checkpoint folder or a model file; relative paths are
    relative to the working directory, as ``cpgym evaluate --policy``)."""
    try:
        resolve_checkpoint(learned)
    except FileNotFoundError as exc:
        raise ValueError(f"{p}: learned: {exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{p}: learned: {exc}") from None


def _pairs(p: Path, kw: dict) -> None:
    """The pairs of ``kw`` as tuples of floats; its numbers checked to be numbers (ValueError naming the key)."""
    for k in ("arrival_window_s", "capacity_search_rps"):
        if k in kw:
            if not (isinstance(kw[k], list) and len(kw[k]) == 2):
                raise ValueError(f"{p}: {k}: expected a list of two numbers")
            kw[k] = tuple(float(x) for x in kw[k])
    for k in _NUMBER_KEYS:
        if k in kw and (isinstance(kw[k], bool) or not isinstance(kw[k], (int, float))):
            raise ValueError(f"{p}: {k}: expected a number, got {kw[k]!r}")


def _workload(spec: FaultExperimentSpec, target_rps: float | None):
    wl = load_trace(spec.trace, spread_seed=spec.seed)
    if target_rps is not None:
        wl = scale_to_rate(wl, target_rps)
    return window(wl, *spec.arrival_window_s)


def estimate_capacity_rps(spec: FaultExperimentSpec, config, log=print) -> tuple[float, list[dict]]:
    """Bisection over the target rate (module docstring; the ``fault-drain-time`` definition of
    ``envs.planning.capacity_definitions``). Returns the highest sustainable rate found
    [requests/s] and the probes ``[{target_rps, drain_s, sustainable}, ...]``."""
    definition = FaultDrainDefinition(capacity_drain_s=spec.capacity_drain_s, capacity_iterations=spec.capacity_iterations)
    probes = []

    def ok(rate: float) -> bool:
        wl = _workload(spec, rate)
        passes, drain = definition.verdict(run_policy(spec.capacity_policy, wl, config), wl.requests[-1].arrival_time_s)
        probes.append({"target_rps": rate, "drain_s": drain, "sustainable": passes})
        log(f"capacity probe {rate:.2f} req/s: backlog drains in {drain:.1f} s -> {'sustainable' if passes else 'overloaded'}")
        return passes

    lo, _ = search_capacity(ok, definition.search, *spec.capacity_search_rps)
    return lo, probes


def _run_learned(checkpoint: str, wl, config):
    import torch as th

    if is_arm_checkpoint(checkpoint_path(checkpoint)):  # a router over the live pool: a plain run
        return run_policy(arm_policy_spec(checkpoint_path(checkpoint), name="learned"), wl, config)
    th.set_num_threads(1)  # batch-1 inference of a small net: one thread is fastest (as policies/routing/evaluate.py)
    env = make_routing_env(None, [wl], config)
    res, _, _ = run_episode(env, LearnedPolicy(checkpoint, name="learned"),
                            options={"window_index": 0, "sim_seed": config.seed})
    return res


def run_fault_experiment(spec: FaultExperimentSpec, base_config, log=print, on_row=None) -> dict:
    """Runs the experiment. Returns ``{"capacity_rps", "target_rps", "probes", "rows", "series"}``:
    ``rows`` one dict per (scenario, policy) (summary metrics + fault metrics), ``series``
    ``{(scenario, policy): (arrival_s, ttft_s, faults)}`` for the plots. ``on_row``: optional
    ``callable(rows)`` called after each run with the rows so far (``cpgym faults`` writes them,
    so a run stopped midway keeps its finished runs)."""
    from dataclasses import replace

    config = replace(base_config, seed=spec.seed)
    capacity, probes = estimate_capacity_rps(spec, config, log)
    target = spec.load_fraction * capacity
    wl = _workload(spec, target)
    log(f"capacity {capacity:.2f} req/s ({spec.capacity_policy}); load {spec.load_fraction} -> {target:.2f} req/s, "
        f"{wl.num_requests} requests")
    rows, series = [], {}
    scenarios = (("none", None),) + spec.scenarios
    names = list(spec.policies) + (["learned"] if spec.learned else [])
    for scen, path in scenarios:
        cfg = replace(config, faults=load_fault_config(path) if path else None)
        for name in names:
            res = _run_learned(spec.learned, wl, cfg) if name == "learned" else run_policy(name, wl, cfg)
            s = summarize(res)
            acct = {"num_finished": int(np.isfinite(res.records["finish_s"]).sum())}
            if s["num_requests"] != acct["num_finished"] + s["num_unfinished"]:
                raise RuntimeError(f"{scen}/{name}: request accounting broken")
            faults = res.extras.get("faults", [])
            f0 = faults[0] if faults else {}
            row = {"scenario": scen, "policy": name, "target_rps": target, **{k: s[k] for k in (
                "num_requests", "num_unfinished", "num_rejected", "mean_ttft_s", "p90_ttft_s", "p99_ttft_s",
                "slo_attainment_token_weighted", "gpu_time_s")}, **acct}
            row.update({k: res.extras.get(k, 0)
                        for k in ("num_fault_affected_requests", "recompute_gpu_time_s", "recovery_time_s")})
            row.update({k: f0.get(k, math.nan) for k in ("ttft_before_s", "ttft_after_s", "slo_attainment_before",
                                                          "slo_attainment_after")})
            rows.append(row)
            if on_row is not None:
                on_row(list(rows))
            series[(scen, name)] = (res.records["arrival_s"], res.records["ttft_s"], faults)
            log(f"{scen:14s} {name:22s} mean TTFT {s['mean_ttft_s']:.3f} s  SLO {s['slo_attainment_token_weighted']:.3f}  "
                f"affected {row['num_fault_affected_requests']}")
    return {"capacity_rps": capacity, "target_rps": target, "probes": probes, "rows": rows, "series": series,
            "num_requests": wl.num_requests}


def plot_ttft_over_time(result: dict, spec: FaultExperimentSpec, out_dir: Path) -> list[Path]:
    """One figure per scenario: mean TTFT of the requests arriving in each ``plot_bin_s`` bin,
    from ``plot_before_s`` before to ``plot_after_s`` after the first fault, one line per
    policy; vertical lines at the fault, its detection and the rebuilt workers' commit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    scen_names = [s for s, _ in spec.scenarios]
    for scen in scen_names:
        keys = [k for k in result["series"] if k[0] == scen]
        if not keys:
            continue
        faults = result["series"][keys[0]][2]
        t0 = faults[0]["time_s"] if faults else 0.0
        lo, hi = t0 - spec.plot_before_s, t0 + spec.plot_after_s
        edges = np.arange(lo, hi + spec.plot_bin_s, spec.plot_bin_s)
        fig, ax = plt.subplots(figsize=(8, 4.2))
        for _, pol in keys:
            arr, ttft, _ = result["series"][(scen, pol)]
            idx = np.digitize(arr, edges) - 1
            ok = (idx >= 0) & (idx < len(edges) - 1) & np.isfinite(ttft)
            sums = np.bincount(idx[ok], weights=ttft[ok], minlength=len(edges) - 1)
            cnt = np.bincount(idx[ok], minlength=len(edges) - 1)
            mean = np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)
            ax.plot(edges[:-1] + spec.plot_bin_s / 2 - t0, mean, label=pol, lw=1.3)
        if faults:
            f = faults[0]
            for t, lab, st in ((f["time_s"], "fault", "-"), (f.get("detected_s"), "detected", "--"),
                               (f.get("rebuilt_s"), "rebuilt", ":"), (f.get("end_s"), "straggler ends", ":")):
                if t is not None and np.isfinite(t) and lo <= t <= hi and not (lab == "rebuilt" and t == f.get("detected_s")):
                    ax.axvline(t - t0, color="k", ls=st, lw=0.8)
                    ax.text(t - t0, ax.get_ylim()[1] * 0.97, lab, rotation=90, va="top", ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_xlabel("arrival time relative to the fault [s]")
        ax.set_ylabel(f"mean TTFT [s] ({spec.plot_bin_s:g} s bins)")
        ax.set_title(f"{spec.name}: {scen} at {result['target_rps']:.1f} req/s ({spec.load_fraction:g} x capacity)")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out_dir / f"ttft_over_time_{scen}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        out.append(path)
    return out
