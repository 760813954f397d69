"""A model-based reconfiguration controller on ``matched-phases``: a learned per-composition TTFT
model, planned with a switching cost. The alternative to cloning the oracle's *choice*
(``policies/checkpoints/reconfig_target``): learn what each composition's mean TTFT would be, and
choose.

* **Data.** Per training seed, rollouts of the target-mode environment (the checkpoint's settings:
  20 s windows, menu over CP {2, 4, 8}, 16 GPUs per window) that follow the switching-cost oracle
  (``policies.reconfig.oracle.select_targets``, cost 5 request-s per GPU, as the checkpoint's warm
  start) with DART disturbances (the first rollout clean, the others executing a random menu
  composition with probability 0.5). Each decision whose last window lies inside one phase is a
  sample: its observation and, for every menu composition ``k``, the phase's mean TTFT on the
  fixed pool ``k`` (the ``--cache`` file of ``reconfig_oracle_schedule.py``; no pool re-simulated).
* **Model** (:func:`fit_ttft_model`): one MLP shared by the compositions, log mean TTFT from the
  window's arrival rate, mean prompt length, long-request share and prefix-hit share, composition
  ``k``'s profiled capacity and load at the window's rate and mix, and ``k``'s GPU shares at CP 2 /
  4 / 8 (:func:`state_features`).
* **Planner** (:func:`plan`): each window, the composition minimising ``pred_k / min pred +
  switch_cost x GPUs moved`` (a relative TTFT gain must pay for the GPUs the move drains).

Prints one line per evaluation seed with the controller's mean TTFT per switching cost, the best
fixed composition in hindsight of that seed and the best single composition of the fit seeds
(both from the cache), and the means. Use training seeds only (fit on some, evaluate on others),
so validation and test seeds stay untouched::

    python -m experiments.scripts.reconfig_ttft_model --fit-seeds 0-44 --eval-seeds 45-59 \\
        --cache policies/checkpoints/reconfig_target/oracle_phase_ttft.json --switch-costs 0,0.003,0.01,0.03
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

from baselines.envs import make_reconfig_env

#: Window features the model reads (indices into the target-mode ``"window"`` observation:
#: ``envs.reconfig_env.WINDOW_FEATURES`` then ``CAPACITY_WINDOW_FEATURES``).
RATE, MEAN_TOKENS, LONG_SHARE, PREFIX_HIT = 0, 1, 2, 11
#: Degrees whose GPU shares describe a composition (the menu's, ``--target-degrees 2,4,8``).
MENU_DEGREES = (2, 4, 8)
#: The warm start's oracle switching cost [request-s per GPU] (checkpoint README).
ORACLE_SWITCH_COST_S_PER_GPU = 5.0


def composition_gpu_shares(counts: list[dict], num_gpus: int) -> np.ndarray:
    """``(K, 3)`` share of the pool's GPUs in CP-2, CP-4 and CP-8 workers per composition
    (``counts``: ``{degree: num_workers}`` as ``envs.planning.composition.degree_counts``)."""
    return np.array([[d * c.get(d, 0) / num_gpus for d in MENU_DEGREES] for c in counts], np.float32)


def state_features(window: np.ndarray, targets: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """``(N, K, 9)`` model inputs from ``window`` ``(N, W)`` and ``targets`` ``(N, K, 5)``
    observations and the ``(K, 3)`` GPU shares: log1p rate, log1p mean prompt tokens / 10, long
    share, prefix-hit share, log1p capacity [req/s], load (capped at 3), CP-2/4/8 GPU shares."""
    n, k, _ = targets.shape
    w = np.stack([np.log1p(window[:, RATE]), np.log1p(window[:, MEAN_TOKENS]) / 10.0, window[:, LONG_SHARE],
                  window[:, PREFIX_HIT]], 1)
    per_k = np.stack([np.log1p(targets[:, :, 0]), np.minimum(targets[:, :, 1], 3.0)], 2)
    return np.concatenate([np.repeat(w[:, None, :], k, 1), per_k, np.repeat(shares[None], n, 0)], 2).astype(np.float32)


def fit_ttft_model(x: np.ndarray, ttft_s: np.ndarray, steps: int = 800, seed: int = 0, hidden: int = 64):
    """Fits an MLP to log mean TTFT (full-batch Adam, lr 3e-3; entries with inf TTFT ignored).

    Args:
        x: ``(N, K, F)`` features (:func:`state_features`).
        ttft_s: ``(N, K)`` phase mean TTFT [s] per composition (inf: no data).

    Returns:
        ``predict(x) -> (N, K)`` log-TTFT predictions.

    Raises:
        ValueError: when the shapes differ or no entry is finite.
    """
    import torch

    if x.shape[:2] != ttft_s.shape or not np.isfinite(ttft_s).any():
        raise ValueError(f"expected x (N, K, F) and ttft_s (N, K) with finite entries, got {x.shape} and {ttft_s.shape}")
    torch.manual_seed(seed)
    mask = torch.tensor(np.isfinite(ttft_s) & (ttft_s > 0), dtype=torch.float32)
    y = torch.tensor(np.log(np.where(mask.numpy() > 0, ttft_s, 1.0)), dtype=torch.float32)
    xt = torch.tensor(x)
    flat = xt.reshape(-1, xt.shape[-1])
    mu, sd = flat.mean(0), flat.std(0) + 1e-6
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[-1], hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden),
                              torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    xn = (xt - mu) / sd
    for _ in range(steps):
        loss = (((net(xn).squeeze(-1) - y) ** 2) * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def predict(features: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net((torch.tensor(features) - mu) / sd).squeeze(-1).numpy()

    return predict


def plan(log_ttft: np.ndarray, gpus_moved: np.ndarray, switch_cost: float) -> int:
    """Menu index minimising ``pred_k / min_j pred_j + switch_cost x gpus_moved_k`` (ties: the
    first), with ``pred = exp(log_ttft)`` ``(K,)`` and ``gpus_moved`` ``(K,)`` the GPU-level distance
    from the projected composition."""
    pred = np.exp(log_ttft - log_ttft.min())
    return int(np.argmin(pred + switch_cost * gpus_moved))


def _seed_list(text: str) -> list[int]:
    """``"0-44"`` or ``"0,1,5"`` -> seeds; ValueError on anything else."""
    if "-" in text.strip()[1:]:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def collect(make_env, seeds: list[int], tables: dict, counts: list[dict], initial: dict, rollouts: int):
    """``(features, labels)`` stacked over the decisions of ``rollouts`` rollouts per seed (see the
    module docstring); decisions whose last window straddles a phase boundary are left out."""
    from envs import workloads
    from policies.reconfig.oracle import phase_at, select_targets

    feats, labels = [], []
    for seed in seeds:
        wl = workloads.build_workload(name="matched-phases", seed=seed)
        env = make_env(wl, seed)
        shares = composition_gpu_shares(counts, env.config.pool.num_gpus)
        ttft, num = tables[seed]
        targets = select_targets(ttft, num, counts, initial, 0.0, ORACLE_SWITCH_COST_S_PER_GPU)
        bounds = wl.metadata["phase_boundaries_s"]
        for r in range(rollouts):
            rng = np.random.default_rng([seed, r])
            obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
            done = False
            while not done:
                p = phase_at(wl, env.decision_time_s)
                if env.decision_time_s - env.window_s >= bounds[p] and obs["window"][RATE] > 0:
                    feats.append(state_features(obs["window"][None], obs["targets"][None], shares)[0])
                    labels.append(ttft[:, p])
                a = targets[p] if r == 0 or rng.random() >= 0.5 else int(rng.integers(len(counts)))
                obs, _, term, trunc, _ = env.step(a)
                done = term or trunc
    return np.stack(feats), np.stack(labels)


def run_planner(env, predict, shares: np.ndarray, seed: int, switch_cost: float) -> float:
    """Mean TTFT [s] of one whole-workload episode of ``env`` driven by :func:`plan` (an empty
    window keeps the projected composition)."""
    from envs.metrics import summarize

    obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
    done = False
    gpus = env.config.pool.num_gpus
    while not done:
        t = obs["targets"]
        if obs["window"][RATE] > 0:
            a = plan(predict(state_features(obs["window"][None], t[None], shares))[0], t[:, 2] * gpus, switch_cost)
        else:
            a = int(np.argmax(t[:, 3]))
        obs, _, term, trunc, _ = env.step(a)
        done = term or trunc
    return float(summarize(env.sim.result())["mean_ttft_s"])


def main(argv: list[str]) -> int:
    import torch

    from envs import workloads
    from envs.planning.capacity import CapacityTable
    from envs.planning.composition import degree_counts
    from envs.reconfig_env import observation_profile_config, target_menu
    from envs.sim import Calibration, SimConfig
    from policies.reconfig.oracle import fixed_mean_ttft, load_phase_ttft

    ap = argparse.ArgumentParser(prog="reconfig_ttft_model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit-seeds", required=True, help="matched-phases seeds to fit on: 'A-B' or comma-separated")
    ap.add_argument("--eval-seeds", required=True, help="seeds to run the controller on (disjoint from --fit-seeds)")
    ap.add_argument("--cache", required=True, help="per-phase TTFT file holding every seed (reconfig_oracle_schedule.py)")
    ap.add_argument("--switch-costs", default="0,0.003,0.01,0.03",
                    help="planner costs: relative mean-TTFT gain a moved GPU must pay for (0.01 = 1 %% per GPU)")
    ap.add_argument("--rollouts", type=int, default=3, help="rollouts per fit seed (first clean, then DART 0.5)")
    ap.add_argument("--steps", type=int, default=800, help="full-batch Adam steps")
    a = ap.parse_args(argv)
    try:
        fit, ev = _seed_list(a.fit_seeds), _seed_list(a.eval_seeds)
        costs = [float(c) for c in a.switch_costs.split(",")]
    except ValueError:
        ap.error("--fit-seeds / --eval-seeds: 'A-B' or comma-separated integers; --switch-costs: numbers")
    if set(fit) & set(ev):
        ap.error(f"--fit-seeds and --eval-seeds overlap: {sorted(set(fit) & set(ev))}")
    if not all(np.isfinite(c) and c >= 0 for c in costs) or a.rollouts < 1 or a.steps < 1:
        ap.error("--switch-costs must be finite and >= 0, --rollouts and --steps >= 1")
    torch.set_num_threads(1)
    sc = SimConfig()
    table = CapacityTable(sc, Calibration.resolve(sc.calibration_path), observation_profile_config())

    def make_env(wl, seed):
        return make_reconfig_env([wl], replace(sc, seed=seed), capacity_features=True, capacity_table=table,
                                  action_mode="target", target_degrees=MENU_DEGREES, max_operation_gpus_per_window=16.0,
                                  window_s=20.0)

    menu = target_menu(sc.pool, MENU_DEGREES)  # the environment's action menu
    try:
        tables = load_phase_ttft(a.cache, menu)
    except (OSError, ValueError) as e:
        ap.error(f"--cache: {e}")
    missing = sorted(set(fit + ev) - set(tables))
    if missing:
        ap.error(f"--cache {a.cache}: no per-phase TTFTs for seed(s) {missing}")
    counts = [degree_counts(c, sc.pool) for c in menu]
    x, y = collect(make_env, fit, tables, counts, degree_counts(sc.pool.composition, sc.pool), a.rollouts)
    predict = fit_ttft_model(x, y, steps=a.steps)
    single = int(np.argmin(np.mean([fixed_mean_ttft(*tables[s]) for s in fit], axis=0)))
    print(f"fit on {len(fit)} seeds: {len(x)} samples; best single composition of the fit seeds {menu[single]}", flush=True)
    shares = composition_gpu_shares(counts, sc.pool.num_gpus)
    res = {c: [] for c in costs}
    best, fixed = [], []
    for seed in ev:
        totals = fixed_mean_ttft(*tables[seed])
        best.append(float(totals.min()))
        fixed.append(float(totals[single]))
        wl = workloads.build_workload(name="matched-phases", seed=seed)
        for c in costs:
            res[c].append(run_planner(make_env(wl, seed), predict, shares, seed, c))
        print(f"seed {seed}: best fixed in hindsight {menu[int(totals.argmin())]} {best[-1]:.3f} s, {menu[single]} "
              f"{fixed[-1]:.3f} s; model + planner " + ", ".join(f"cost {c:g}: {res[c][-1]:.3f} s" for c in costs),
              flush=True)
    print(f"mean over {len(ev)} seeds: best fixed in hindsight {np.mean(best):.4f} s, {menu[single]} {np.mean(fixed):.4f} s; "
          + ", ".join(f"model + planner (cost {c:g}) {np.mean(v):.4f} s ({100 * np.mean(np.array(v) / best - 1):+.1f} %)"
                      for c, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
