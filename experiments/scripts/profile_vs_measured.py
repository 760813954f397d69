"""How far the full system's capacity profile (``envs/planning/capacity.py`` ``CapacityTable``, read
by ``envs/planning/composition.py`` ``workload_initial_pool``) is from the measured capacity
(``baselines/capacity.py``, ``cpgym capacity``) on the three ``cpgym reproduce`` workloads, and
which of the profile's assumptions the gap comes from.

For each workload (``production`` = the conversation trace with seed-0 spreading, ``tool-agent``,
``leval-like``; 300 s windows, seed 0) the script prints:

1. **The summary table**: the profiled capacity of ``cp2x20``, ``cp4x10`` and the default
   ``cp4x6,cp2x8`` (``Σ`` of the per-worker profiles ``workload_initial_pool`` computes on the
   window at the 0.85 and the 0.95 points of ``results/end-to-end/quick/end-to-end-runs.csv``)
   against the measured capacity of ``homogeneous-cp2``, ``homogeneous-cp4`` and
   ``vertumnus-router`` (:func:`baselines.capacity.find_capacity`, no disk cache).
2. **The ladder** (``--ladder``, homogeneous pools): the pool's capacity bisected (in the
   window's rate factor, ``--steps`` halvings of ``[0.4, 2.5]`` x the 1.0 point) after each
   cumulative change that turns the measurement into the profile:

   ====  ==========================================================================
   step  what changes (each row keeps the changes above it)
   ====  ==========================================================================
   0     measured: the window, its prefix caches and arrivals, the policy's router
         (Vertumnus beta=1, ``homogeneous-cpC``), ``cpgym capacity``'s criterion
         (backlog drains and token-weighted SLO >= 0.9)
   1     the profile's criterion: token-weighted SLO attainment >= 0.9 x its
         zero-load value (the same requests with arrivals 1000x apart)
   2     hits as shorter prompts: each request uncached with prompt ``L - P``, ``P``
         its hit in step 1's run at the same rate (real hit size, cost of a shorter
         prompt: no ``alpha R P`` attention to the prefix, no ``b P``); SLO of ``L``
   3     hit size: ``P`` = its hit in an unbounded cache (``reuse_prefix_tokens``'
         per-request term) instead of the run's finite caches
   4     SLO of the shorter prompt ``L - P`` (the profile's SLO)
   5     a stationary stream: the requests in a random order, Poisson arrivals at the
         window's mean rate (a session workload's window is not stationary: ``leval-like``
         opens documents from t = 0, so its expensive first questions are front-loaded)
   6     least-outstanding-work router (the profile's)
   7     the mean hit ``P̄`` subtracted from every prompt (``max(1, L - P̄)``)
   8     the profile itself: the window's class histogram, lengths log-uniform in a
         class, 60 s of Poisson arrivals, profile seed (``CapacityTable``)
   ====  ==========================================================================

Deterministic (fixed seeds, no disk cache)::

    python -m experiments.scripts.profile_vs_measured                 # summary, ~3 min
    python -m experiments.scripts.profile_vs_measured --ladder        # + ladder, ~15 min
    python -m experiments.scripts.profile_vs_measured --workloads production --ladder --noise --degrees 4
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace

import numpy as np

RUNS_CSV = "results/end-to-end/quick/end-to-end-runs.csv"
WORKLOADS = ("production", "tool-agent", "leval-like")
LADDER = ("measured (capacity criterion)", "profile criterion", "hits as shorter prompts", "unbounded-cache hits",
          "SLO of shorter prompt", "shuffled, Poisson arrivals", "least-work router", "mean hit subtracted", "profile")


def per_request_reuse(workload) -> np.ndarray:
    """Per-request prefix [tokens] already seen in an earlier request (whole KV blocks, capped at
    ``L - 1``): the terms of :func:`envs.planning.capacity.reuse_prefix_tokens`."""
    seen: set = set()
    out = np.zeros(workload.num_requests)
    for i, r in enumerate(workload.requests):
        n = 0
        for h in r.block_hashes:
            if h not in seen:
                break
            n += 1
        out[i] = min(n * workload.kv_block_size_tokens, max(0, r.num_prompt_tokens - 1))
        seen.update(r.block_hashes)
    return out


def uncached(workload, prompt_tokens: np.ndarray, arrivals_s: np.ndarray | None = None):
    """``workload`` with every request uncached (one unique KV block) and the given prompt
    lengths (and arrival times)."""
    from envs.sim.request import Request, Workload

    L = np.maximum(1, np.floor(prompt_tokens)).astype(np.int64)
    t = [r.arrival_time_s for r in workload.requests] if arrivals_s is None else arrivals_s.tolist()
    reqs = tuple(Request(i, float(ti), int(x), r.num_output_tokens, (-(i + 1),), r.session_id)
                 for i, (r, ti, x) in enumerate(zip(workload.requests, t, L.tolist())))
    return Workload(f"{workload.name}-uncached", reqs, kv_block_size_tokens=max(512, int(L.max())))


def stretched(workload, factor: float = 1000.0):
    """``workload`` with its arrival times multiplied by ``factor`` (zero load)."""
    from envs.sim.request import Workload

    reqs = tuple(replace(r, arrival_time_s=r.arrival_time_s * factor) for r in workload.requests)
    return Workload(f"{workload.name}-stretched", reqs, kv_block_size_tokens=workload.kv_block_size_tokens)


class Ladder:
    """The ladder's simulations for one workload and one homogeneous degree (module docstring)."""

    def __init__(self, rated, config, calibration, degree: int) -> None:
        from envs.sim.pool import PoolConfig

        self.rated, self.cal, self.degree = rated, calibration, degree
        pool = config.pool
        k = pool.num_gpus // degree
        self.config = replace(config, horizon_s=None, pool=replace(pool, composition=f"cp{degree}x{k}"))
        self.config_lw = self.config
        assert isinstance(self.config.pool, PoolConfig)
        self._windows: dict[float, object] = {}
        self._a0: dict[int, float] = {}

    def window(self, scale: float):
        if scale not in self._windows:
            self._windows[scale] = self.rated.at_scale(scale)
        return self._windows[scale]

    def _run(self, wl, router: str):
        from baselines.vertumnus import VertumnusParams, VertumnusRouter
        from envs.sim.router import LeastWorkRouter
        from envs.sim.simulator import Simulator

        r = LeastWorkRouter() if router == "least-work" else VertumnusRouter(VertumnusParams(beta=1.0), "homogeneous")
        return Simulator(wl, self.config, self.cal).run(r)

    def variant(self, step: int, scale: float):
        """``(workload, router, SLO [s] per request, token weights)`` of ladder step 0-7 at a rate
        factor; the weights are the full prompts' up to step 3 and the shorter prompts' after."""
        from envs.planning.capacity import slo_for_lengths

        wl = self.window(scale)
        L = np.array([r.num_prompt_tokens for r in wl.requests], float)
        if step <= 1:
            return wl, "policy", slo_for_lengths(self.config, self.cal, L), L
        if step == 2:
            hit = self._run(wl, "policy").records["num_cached_tokens"].astype(float)
        else:
            hit = per_request_reuse(wl)
        arrivals = None
        if step >= 5:  # a stationary stream: shuffled order, Poisson at the window's mean rate (fixed seed)
            rng = np.random.default_rng(0)
            perm = rng.permutation(wl.num_requests)
            L, hit = L[perm], hit[perm]
            arrivals = np.cumsum(rng.exponential(1.0, wl.num_requests)) / max(wl.mean_rate_rps, 1e-9)
        if step >= 7:
            hit = np.full(L.shape, hit.mean())
        short = np.maximum(1.0, np.floor(L - hit))
        out = uncached(wl, short, arrivals)
        if step <= 3:
            return out, "policy", slo_for_lengths(self.config, self.cal, L), L
        return out, ("least-work" if step >= 6 else "policy"), slo_for_lengths(self.config, self.cal, short), short

    @staticmethod
    def attainment(res, slo: np.ndarray, weights: np.ndarray) -> float:
        """Token-weighted SLO attainment (records are in request order)."""
        ok = res.records["ttft_s"] <= slo
        return float((weights * ok).sum() / weights.sum())

    def good(self, step: int, scale: float) -> bool:
        from baselines.capacity import sustainable

        wl, router, slo, weights = self.variant(step, scale)
        res = self._run(wl, router)
        if step == 0:
            return sustainable(res, self.config, self.cal)[0]
        if step not in self._a0:
            self._a0[step] = self.attainment(self._run(stretched(wl), router), slo, weights)
        return self.attainment(res, slo, weights) >= 0.9 * self._a0[step]

    def capacity(self, step: int, ref_scale: float, steps: int) -> tuple[float, str]:
        """Pool capacity [requests/s] of a step by bisection in log scale on ``[0.4, 2.5] x
        ref_scale``; the flag is ``<`` / ``>`` when it lies outside that range."""
        lo, hi = 0.4 * ref_scale, 2.5 * ref_scale
        if not self.good(step, lo):
            return self.window(lo).mean_rate_rps, "<"
        if self.good(step, hi):
            return self.window(hi).mean_rate_rps, ">"
        for _ in range(steps):
            mid = math.sqrt(lo * hi)
            if self.good(step, mid):
                lo = mid
            else:
                hi = mid
        return self.window(lo).mean_rate_rps, ""


def profiled(wl, config, calibration) -> dict[int, float]:
    """Per-worker profiled capacities ``workload_initial_pool`` computes for the window."""
    from envs.planning.capacity import CapacityCache
    from envs.planning.composition import workload_initial_pool

    _, info = workload_initial_pool(config.pool, wl, config, calibration, CapacityCache())
    return info["profiles"]


def profile_noise(rated, scales, config, calibration, seeds=(0, 1, 2), durations=(60.0, 300.0)) -> list[str]:
    """Markdown rows: the spread of the profiled ``cp4x10`` and ``cp2x20`` capacities over profile
    seeds and windows (``scales``), per ``ProfileConfig.duration_s``: mean, sd and range [req/s]."""
    from envs.planning.capacity import CapacityCache, ProfileConfig
    from envs.planning.composition import workload_initial_pool

    rows = []
    for dur in durations:
        caps = {4: [], 2: []}
        for scale in scales:
            wl = rated.at_scale(scale)
            for seed in seeds:
                _, info = workload_initial_pool(config.pool, wl, config, calibration, CapacityCache(),
                                                profile=ProfileConfig(seed=seed, duration_s=dur))
                for d in caps:
                    caps[d].append(config.pool.num_gpus // d * info["profiles"][d])
        for d, v in caps.items():
            rows.append(f"| {rated.label} | cp{d}x{config.pool.num_gpus // d} | {dur:g} | {np.mean(v):.2f} | "
                        f"{np.std(v, ddof=1):.2f} | {min(v):.2f}-{max(v):.2f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.scripts.profile_vs_measured",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--degrees", default="2,4", help="homogeneous degrees of the ladder (default 2,4)")
    p.add_argument("--ladder", action="store_true", help="also run the ladder (module docstring)")
    p.add_argument("--steps", type=int, default=7, help="bisection halvings of the ladder (default 7: ~1.4 %%)")
    p.add_argument("--noise", action="store_true",
                   help="also the profile's spread over profile seeds 0-2 x the 0.85/0.95 windows, 60 vs 300 s runs")
    p.add_argument("--no-measured", action="store_true", help="skip the measured capacities (profiles only)")
    args = p.parse_args(argv)
    from baselines.capacity import find_capacity
    from envs.sim import Calibration, SimConfig
    from experiments.reproduce import _model_sim, _rated
    from experiments.scripts.full_system_ablation import _workload_case, rate_scale_of

    cal = Calibration.resolve(None)
    sim = _model_sim(SimConfig(), None, None, 0)
    degrees = [int(x) for x in args.degrees.split(",")]
    summary = ["| workload | pool | profiled @0.85 | profiled @0.95 | measured | profile / measured |",
               "|---|---|---|---|---|---|"]
    noise = ["| workload | pool | profile duration_s | mean | sd | range |", "|---|---|---|---|---|---|"]
    for wk in args.workloads.split(","):
        rated = _rated(_workload_case(wk), 300.0, 0)
        s85, s95 = (rate_scale_of(RUNS_CSV, wk, x) for x in (0.85, 0.95))
        prof = {x: profiled(rated.at_scale(s), sim, cal) for x, s in ((0.85, s85), (0.95, s95))}
        pools = (("cp2x20", "homogeneous-cp2", {2: 20}), ("cp4x10", "homogeneous-cp4", {4: 10}),
                 ("cp4x6,cp2x8", "vertumnus-router", {4: 6, 2: 8}))
        for comp, policy, counts in pools:
            pc = {x: sum(n * prof[x][d] for d, n in counts.items()) for x in prof}
            meas = math.nan if args.no_measured else find_capacity(policy, rated, sim, cal).capacity_rps
            summary.append(f"| {wk} | {comp} ({policy}) | {pc[0.85]:.2f} | {pc[0.95]:.2f} | {meas:.2f} | "
                           f"{pc[0.85] / meas:.2f} / {pc[0.95] / meas:.2f} |")
            print(summary[-1], file=sys.stderr, flush=True)
        if args.noise:
            noise += profile_noise(rated, (s85, s95), sim, cal)
            print("\n".join(noise[-4:]), file=sys.stderr, flush=True)
        if args.ladder:
            for degree in degrees:
                k = sim.pool.num_gpus // degree
                lad = Ladder(rated, sim, cal, degree)
                rows = []
                for step in range(len(LADDER) - 1):
                    t0 = time.perf_counter()
                    cap, flag = lad.capacity(step, s85 / 0.85, args.steps)
                    rows.append((LADDER[step], cap, flag))
                    print(f"{wk} cp{degree}x{k} step {step} {LADDER[step]}: {flag}{cap:.2f} req/s "
                          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
                rows.append((LADDER[-1], k * prof[0.85][degree], ""))
                print(f"\n{wk} cp{degree}x{k}: ladder (cumulative changes; capacity [req/s], change vs the row above)")
                print("| step | change | capacity | vs above |\n|---|---|---|---|")
                for i, (name, cap, flag) in enumerate(rows):
                    ch = "" if i == 0 else f"{100.0 * (cap / rows[i - 1][1] - 1.0):+.1f} %"
                    print(f"| {i} | {name} | {flag}{cap:.2f} | {ch} |")
                sys.stdout.flush()
    print("\nprofiled (workload_initial_pool on the 0.85 / 0.95 windows, seed 0) vs measured (find_capacity) [req/s]")
    print("\n".join(summary))
    if args.noise:
        print("\nprofile spread over profile seeds 0-2 x the 0.85 and 0.95 windows (6 profiles each) [req/s]")
        print("\n".join(noise))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
