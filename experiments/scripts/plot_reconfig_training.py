"""Training curve of a reconfiguration checkpoint trained with ``--warm-start oracle``:
behaviour-cloning loss per epoch (``bc.csv``), PPO training return per rollout (``progress.csv``,
``rollout/ep_rew_mean``) and validation mean TTFT (``validation.csv``). A checkpoint trained in
two stages (``--init-from``) keeps the first stage's logs as ``stage1_*``; its steps come first
and the second stage's are offset by them.

    python experiments/scripts/plot_reconfig_training.py CHECKPOINT_DIR [OUT.png]

(default output: ``CHECKPOINT_DIR/training_curve.png``)."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    d = Path(argv[0])
    out = Path(argv[1]) if len(argv) == 2 else d / "training_curve.png"
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    staged = (d / "stage1_bc.csv").is_file()
    first = "stage1_" if staged else ""
    bc = pd.read_csv(d / f"{first}bc.csv")
    ax[0].plot(bc["epoch"], bc["loss"], marker=".")
    ax[0].set(xlabel="behaviour-cloning epoch", ylabel="NLL of the oracle action", title="warm start")
    offset = 0
    stages = [("stage1_", "stage 1 (warm start + PPO)"), ("", "stage 2 (--init-from)")] if staged else [("", "PPO")]
    va_all = []
    for prefix, label in stages:
        pr = pd.read_csv(d / f"{prefix}progress.csv").dropna(subset=["rollout/ep_rew_mean"])
        ax[1].plot(pr["time/total_timesteps"] + offset, pr["rollout/ep_rew_mean"], marker=".", label=label)
        va = pd.read_csv(d / f"{prefix}validation.csv")
        va["timesteps"] += offset
        ax[2].plot(va["timesteps"], va["mean_ttft_s"], marker="o", label=label)
        va_all.append(va)
        offset = int(pr["time/total_timesteps"].max())
    ax[1].legend()
    ax[1].set(xlabel="PPO env steps", ylabel="episode return (-0.01 x sum of TTFT [s])", title="PPO training return")
    last = va_all[-1]  # model.zip: the best validated model of the last stage (validation selects within a run)
    best = last.loc[last["mean_ttft_s"].idxmin()]
    ax[2].scatter([best["timesteps"]], [best["mean_ttft_s"]], color="red", zorder=3, label="model.zip")
    ax[2].set(xlabel="PPO env steps (0 = warm start)", ylabel="mean TTFT [s]", title="validation seeds")
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
