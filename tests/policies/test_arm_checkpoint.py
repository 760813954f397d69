"""The arm-selection checkpoint (policies/checkpoints/routing_vertumnus_arms) is reproducible from
the command in its README: the command parses to the stored config, a refit on the stored
per-window costs gives the stored model (coefficients to BLAS rounding), and a tiny re-simulation
gives the stored costs."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from policies.common.checkpoint import current_meta

CHECKPOINT = Path(__file__).resolve().parents[2] / "policies" / "checkpoints" / "routing_vertumnus_arms"
# as every reader sees it: the keys of earlier releases renamed (the stored file keeps window_s)
META = current_meta(json.loads((CHECKPOINT / "train_config.json").read_text()))
#: the recorded command line without the program name
ARGV = META["argv"][1:] if META["argv"][0] == "cpgym" else META["argv"]


def _config_from_argv(argv: list[str], tmp_path: Path):
    from envs.sim.options import config_from_args
    from experiments.cli import build_parser
    from experiments.common import sim_config_from_args
    from policies.routing.train_arms import ArmTrainConfig

    argv = list(argv)
    argv[argv.index("--out") + 1] = str(tmp_path / "run")
    args = build_parser().parse_args(argv)
    return config_from_args(ArmTrainConfig, args), sim_config_from_args(args)


def test_readme_command_gives_the_stored_config(tmp_path):
    readme = (CHECKPOINT / "README.md").read_text()
    assert " ".join(["cpgym", *ARGV[:2], "--out", "policies/checkpoints/routing_vertumnus_arms"]) in readme
    for flag in [a for a in ARGV if a.startswith("--")]:
        assert flag in readme
    cfg, _ = _config_from_argv(ARGV, tmp_path)
    assert json.loads(json.dumps(asdict(cfg))) == META["train_config"]


def _read_csv(path: Path) -> list[dict]:
    import csv

    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_refit_on_stored_costs_gives_the_stored_model(tmp_path):
    """Model selection on the checkpoint's costs.csv (no simulation) gives arm_model.json and
    validation.csv (coefficients to BLAS rounding); the switch margin is deployed_validation.csv's
    one-standard-error choice."""
    from policies.routing.arm_selection import load_arm_checkpoint
    from policies.routing.train_arms import cells_from_costs_csv, one_standard_error_choice, select_model

    cfg, _ = _config_from_argv(ARGV, tmp_path)
    train, validation = cells_from_costs_csv(CHECKPOINT / "costs.csv.gz")
    assert [c.key for c in train] == list(META["capacities_rps"])
    model, rows = select_model(cfg, train, validation)
    stored, router = load_arm_checkpoint(CHECKPOINT)
    deployed = _read_csv(CHECKPOINT / "deployed_validation.csv")
    assert [float(r["switch_margin"]) for r in deployed] == list(cfg.switch_margins)
    best_deployed = deployed[one_standard_error_choice([float(r["score"]) for r in deployed],
                                                       [float(r["score_standard_error"]) for r in deployed],
                                                       [float(r["switch_margin"]) for r in deployed])]
    assert [r["selected"] for r in deployed] == [str(r is best_deployed) for r in deployed]
    assert float(best_deployed["switch_margin"]) == META["deployed_selected"]["switch_margin"]
    # the least-squares coefficients agree to BLAS rounding (the kernel OpenBLAS picks depends on the CPU:
    # 1.4e-12 apart on an AMD EPYC from the stored fit); everything else exactly
    np.testing.assert_allclose(np.asarray(model.coef), np.asarray(stored.coef), rtol=1e-9, atol=1e-10)
    assert replace(model, switch_margin=float(best_deployed["switch_margin"]), coef=stored.coef) == stored
    assert router == cfg.router_settings()
    best = min(rows, key=lambda r: r["score"])
    assert {k: best[k] for k in ("features", "degree", "alpha", "weighting")} == \
        {k: META["selected"][k] for k in ("features", "degree", "alpha", "weighting")}
    assert best["score"] == pytest.approx(META["selected"]["score"], rel=1e-12)


def test_tiny_resimulation_matches_the_stored_costs(tmp_path):
    """Two arms on the first and last training windows of the conversation cell at 0.9 (the
    capacity from train_config.json): the same mean TTFT and SLO attainment as costs.csv.gz."""
    import csv
    import gzip

    from policies.routing.train_arms import capacity_cache_file, cell_scenarios, collect_cell, cost_table_rows, episode_source

    cfg, sim_config = _config_from_argv(ARGV, tmp_path)
    item = cfg.source_list()[0]
    key = next(k for k in META["capacities_rps"] if k.endswith("@0.9") and k.startswith("conversation"))
    tiny = replace(cfg, sources=item, loads=(0.9,), betas=(cfg.betas[0], cfg.betas[-1]), lambdas=(cfg.lambdas[-1],),
                   max_train_windows=2, cache_dir=str(tmp_path / "cache"))
    f = capacity_cache_file(tiny, episode_source(item), sim_config)
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"source": item, "capacity_rps": META["capacities_rps"][key]}))
    (sc,) = cell_scenarios(tiny, sim_config)
    got = cost_table_rows(collect_cell(sc, "train", tiny, sim_config))
    assert len(got) == 4
    with gzip.open(CHECKPOINT / "costs.csv.gz", "rt", newline="") as fh:
        stored = {(r["cell"], r["part"], int(r["window"]), float(r["beta"]), float(r["lambda"])): r
                  for r in csv.DictReader(fh)}
    for r in got:
        s = stored[(r["cell"], r["part"], r["window"], r["beta"], r["lambda"])]
        assert float(s["mean_ttft_s"]) == r["mean_ttft_s"] and float(s["slo_attainment"]) == r["slo_attainment"]
        for n in ("offered_utilisation", "log_rate_per_gpu", "prefix_reuse_share"):
            assert (float(s[n]) if s[n] else None) == r[n]


def test_tiny_deployed_resimulation_matches_the_stored_runs(tmp_path):
    """The stored router deployed on the first and last validation windows of the conversation
    cell at 0.9: the mean TTFT, SLO attainment and switches of deployed_costs.csv, and the
    deployed_validation.csv score of the selected margin is its mean over all windows."""
    import numpy as np

    from policies.routing.arm_selection import load_arm_checkpoint
    from policies.routing.protocol import Scenario
    from policies.routing.train_arms import deployed_cell, episode_source

    cfg, sim_config = _config_from_argv(ARGV, tmp_path)
    item = cfg.source_list()[0]
    key = next(k for k in META["capacities_rps"] if k.endswith("@0.9") and k.startswith("conversation"))
    tiny = replace(cfg, max_validation_windows=2, cache_dir=str(tmp_path / "cache"))
    sc = Scenario(episode_source(item), 0.9 * META["capacities_rps"][key], 0.9, cfg.episode_window_s, cfg.warmup_s)
    model, _ = load_arm_checkpoint(CHECKPOINT)
    got = deployed_cell(sc, model, tiny, sim_config)
    assert len(got["windows"]) == 2
    rows = [r for r in _read_csv(CHECKPOINT / "deployed_costs.csv")
            if r["cell"] == key and float(r["switch_margin"]) == model.switch_margin]
    stored = {int(r["window"]): r for r in rows}
    for j, w in enumerate(got["windows"]):
        assert float(stored[w]["mean_ttft_s"]) == got["mean_ttft_s"][j]
        assert float(stored[w]["slo_attainment"]) == got["slo_attainment"][j]
        assert int(stored[w]["num_arm_switches"]) == got["num_arm_switches"][j]
    ratio = np.mean([float(r["mean_ttft_s"]) for r in rows]) / np.mean([float(r["tuned_mean_ttft_s"]) for r in rows])
    assert META["deployed_selected"][f"{key}_pct"] == pytest.approx(100 * (ratio - 1), rel=1e-9)


@pytest.mark.parametrize("flag", ["out", "cache_dir"])
def test_train_arms_rejects_a_file_as_out_or_cache_dir_before_simulating(tmp_path, flag):
    """A file given as --out / --cache-dir fails at once with the flag named (sim_config=None:
    any simulation would crash first), not after the cost collection with a bare OSError."""
    from policies.routing.train_arms import ArmTrainConfig, train_arms

    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile if flag == "out" else tmp_path / "ckpt"
    cfg = ArmTrainConfig(cache_dir=str(afile if flag == "cache_dir" else tmp_path / "cache"))
    with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')} .*afile exists and is not a folder"):
        train_arms(cfg, out, sim_config=None)


@pytest.mark.parametrize("flag", ["out", "cache_dir"])
def test_train_arms_rejects_a_path_under_a_file_before_simulating(tmp_path, flag):
    """--out / --cache-dir inside a file (``afile/sub``) fails at once naming the flag and the file,
    not after the cost collection (sim_config=None: any simulation would crash first)."""
    from policies.routing.train_arms import ArmTrainConfig, train_arms

    afile = tmp_path / "afile"
    afile.write_text("")
    out = afile / "sub" if flag == "out" else tmp_path / "ckpt"
    cfg = ArmTrainConfig(cache_dir=str(afile / "sub" if flag == "cache_dir" else tmp_path / "cache"))
    with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')} .*afile/sub cannot be created: .*afile is not a folder"):
        train_arms(cfg, out, sim_config=None)


@pytest.mark.parametrize("field,value", [("betas", (1.0, float("nan"))), ("betas", (float("inf"),)),
                                         ("lambdas", (float("nan"),)), ("lambdas", (0.0, float("inf"))),
                                         ("warmup_s", float("nan")), ("warmup_s", float("inf")),
                                         ("episode_window_s", float("inf")), ("alphas", (float("inf"),)),
                                         ("switch_margins", (float("nan"),)), ("switch_margins", (-0.1,))])
def test_train_config_rejects_non_finite_values(field, value):
    """NaN / infinite grid values and durations fail in the config (before the capacity bisection
    that used to run first), naming the field."""
    from policies.routing.train_arms import ArmTrainConfig

    with pytest.raises(ValueError, match=f"^{field} must be"):
        ArmTrainConfig(**{field: value})
