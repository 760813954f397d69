"""`cpgym evaluate` input checks: checkpoint kind vs --kind before loading, and --from-csv."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments.cli import main
from tests.factories import CHECKPOINTS_DIR, episode_rows_csv, junk_checkpoint, set_cell, tiny_trace


@pytest.fixture
def no_model_loading(monkeypatch):
    import policies.common.checkpoint as checkpoint
    import policies.reconfig.evaluate as evaluate_reconfig

    def fail(*a, **k):
        raise AssertionError("loaded a model before checking the checkpoint's kind")

    for module in (checkpoint, evaluate_reconfig):
        monkeypatch.setattr(module, "load_model_zip", fail)


def test_run_evaluation_checks_the_checkpoint_kind(no_model_loading):
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, run_evaluation

    cfg = EvaluationConfig(policy=str(CHECKPOINTS_DIR / "routing_conversation_residual"), kind="reconfig", seeds=(1,))
    with pytest.raises(ValueError, match="is a routing checkpoint"):
        run_evaluation(cfg, SimConfig())


def test_from_csv_needs_no_policy_and_titles_the_csv_seeds(tmp_path, capsys):
    path = episode_rows_csv(tmp_path)
    assert main(["evaluate", "--from-csv", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "seeds [7, 9]" in out and "seeds [1, 2, 3]" not in out
    assert "least-work" in out and "round-robin" in out


def test_from_csv_warns_when_policies_have_different_episodes(tmp_path, capsys):
    path = episode_rows_csv(tmp_path)
    assert main(["evaluate", "--from-csv", str(path)]) == 0
    assert "different episodes" not in capsys.readouterr().err  # every policy on seeds 7, 9
    df = pd.read_csv(path)
    df[~((df["policy"] == "round-robin") & (df["seed"] == 9))].to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--reference", "least-work"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "policies were evaluated on different episodes: round-robin lacks (seed, window) episodes (9, 0)" in err


def test_uneven_episodes_of_a_reconfig_evaluation_name_the_missing_seeds():
    from policies.episode_rows import uneven_episodes

    rows = [{"policy": p, "seed": s} for p in ("a", "b") for s in range(8)]
    assert uneven_episodes(rows, "reconfig") is None
    rows = [r for r in rows if not (r["policy"] == "b" and r["seed"] != 0)]
    assert "b lacks seeds 1, 2, 3, 4, 5 and 2 more" in uneven_episodes(rows, "reconfig")


def test_from_csv_reads_an_empty_metric_cell_as_not_recorded(tmp_path, capsys):
    """``--out`` writes a metric an episode did not record (NaN) as an empty cell: read back, not an error."""
    import json
    import math

    from policies.episode_rows import read_episode_rows

    path = episode_rows_csv(tmp_path)
    set_cell("prefix_hit_rate", None)(pd.read_csv(path)).to_csv(path, index=False)
    _, rows = read_episode_rows(str(path))
    assert math.isnan(rows[1]["prefix_hit_rate"]) and rows[0]["prefix_hit_rate"] == 0.3
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    json.loads(capsys.readouterr().out)


def test_load_model_zip_names_a_zip_sb3_cannot_read(tmp_path):
    import zipfile

    from sb3_contrib import MaskablePPO

    from policies.common.checkpoint import load_model_zip

    for members in ({"notes.txt": "x"}, {"data": "{not json", "policy.pth": "x"}):
        path = tmp_path / "m.zip"
        with zipfile.ZipFile(path, "w") as z:
            for name, text in members.items():
                z.writestr(name, text)
        with pytest.raises(ValueError, match=rf"^{path}: not a readable SB3 checkpoint zip \(\w+: .*\); expected the "
                                             r"model.zip written by `cpgym train`$"):
            load_model_zip(MaskablePPO, path)


def test_a_reconfig_checkpoint_zip_path_loads_that_zip(tmp_path):
    """``--policy DIR/last_model.zip`` loaded ``DIR/model.zip`` (the best validated model) instead."""
    import os

    from policies.reconfig.evaluate import LearnedReconfig

    d = junk_checkpoint(tmp_path, "reconfig", "model.zip")
    os.symlink(CHECKPOINTS_DIR / "reconfig_target" / "model.zip", d / "last_model.zip")
    os.symlink(CHECKPOINTS_DIR / "reconfig_target" / "vecnormalize.pkl", d / "last_vecnormalize.pkl")
    learned = LearnedReconfig(d / "last_model.zip")
    assert learned.vecnormalize is not None
    with pytest.raises(ValueError, match="model.zip: not a readable SB3 checkpoint zip"):
        LearnedReconfig(d)


def test_library_evaluations_reject_a_repeated_seed_or_window():
    from envs.sim import SimConfig
    from policies.reconfig.evaluate import evaluate_reconfig
    from policies.routing.episodes import EpisodeSource
    from policies.routing.evaluate import evaluate

    with pytest.raises(ValueError, match=r"^seeds lists 1 twice: '1,2,1'"):
        evaluate(["least-work"], EpisodeSource(), SimConfig(), [1, 2, 1])
    with pytest.raises(ValueError, match=r"^window_indices lists 3 twice: '3,3'"):
        evaluate(["least-work"], EpisodeSource(), SimConfig(), [1], window_indices=[3, 3])
    with pytest.raises(ValueError, match=r"^seeds lists 5 twice"):
        evaluate_reconfig(None, ["vertumnus-router"], "phases", [5, 5], SimConfig())


def test_from_csv_of_a_reconfig_evaluation_checks_its_counts(tmp_path):
    from policies.episode_rows import read_episode_rows

    rows = [{"policy": p, "seed": s, "mean_ttft_s": 1.0, "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9,
             "num_operations": 3, "num_committed_operations": 2, "num_unfinished": 0}
            for p in ("learned", "vertumnus-adaptive") for s in (1000, 1001)]
    path = tmp_path / "reconfig.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert read_episode_rows(str(path))[0] == "reconfig"
    set_cell("num_committed_operations", -2, row=2)(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"reconfig.csv, row 3, field 'num_committed_operations': got -2; expected a count"):
        read_episode_rows(str(path))


# --- reconfiguration evaluation: comparisons, held-out seeds and --from-csv rows (evalreview) ---

def _no_reconfig_runs(monkeypatch):
    import baselines.runner as runner
    import policies.reconfig.evaluate as ev

    def fail(*a, **k):
        raise AssertionError("ran or loaded before the input was checked")

    monkeypatch.setattr(runner, "run_policy", fail)
    monkeypatch.setattr(ev, "LearnedReconfig", fail)


def test_reconfig_evaluation_defaults_to_held_out_seeds(monkeypatch, capsys):
    """The default --seeds were 1,2,3 for every kind: training seeds of shipped-reconfig, so the
    issue's own command (no --seeds) evaluated the checkpoint on its training data."""
    from policies.evaluate import DEFAULT_RECONFIG_SEEDS, DEFAULT_ROUTING_SEEDS, EvaluationConfig

    calls = []
    _fake_reconfig_rows(monkeypatch, calls)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-adaptive",
                 "--format", "json", "--quiet"]) == 0
    assert calls == [("matched-phases", [1000, 1001, 1002])] and DEFAULT_RECONFIG_SEEDS == (1000, 1001, 1002)
    assert capsys.readouterr().err == ""  # no training or validation seed among them
    cfg = EvaluationConfig(policy="least-work")
    assert cfg.seeds is None and cfg.with_default_seeds("routing").seeds == DEFAULT_ROUTING_SEEDS == (1, 2, 3)
    assert EvaluationConfig(policy="least-work", seeds=(7,)).with_default_seeds("reconfig").seeds == (7,)


def test_run_evaluation_refuses_training_seeds_too(monkeypatch):
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, run_evaluation

    _no_reconfig_runs(monkeypatch)
    with pytest.raises(ValueError, match="training seeds of shipped-reconfig"):
        run_evaluation(EvaluationConfig(policy="shipped-reconfig", kind="reconfig", seeds=(5,)), SimConfig())


def _fake_reconfig_rows(monkeypatch, calls):
    import policies.reconfig.evaluate as ev

    def fake(checkpoint, against, workload, seeds, *a, **k):
        calls.append((workload, list(seeds)))
        return [{"policy": p, "seed": s, "wall_s": 0.0, "mean_ttft_s": 1.0, "p90_ttft_s": 2.0,
                 "slo_attainment_token_weighted": 0.9, "num_operations": 0, "num_committed_operations": 0,
                 "num_unfinished": 0} for s in seeds for p in ("shipped-reconfig", *against)]

    monkeypatch.setattr(ev, "evaluate_reconfig", fake)


def test_validation_seeds_are_named_in_a_warning_and_other_workloads_are_other_data(capsys, monkeypatch):
    """Validation seeds (model selection) were evaluated without a word; a seed of another workload
    than the checkpoint's is not its training data."""
    calls = []
    _fake_reconfig_rows(monkeypatch, calls)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                 "--seeds", "500,1000", "--quiet", "--format", "json"]) == 0
    assert capsys.readouterr().err == ("warning: seeds [500] are validation seeds of shipped-reconfig (model selection "
                                       "data, not held out)\n")
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                 "--workload", "phases", "--seeds", "1", "--quiet", "--format", "json"]) == 0
    assert capsys.readouterr().err == ""
    assert calls == [("matched-phases", [500, 1000]), ("phases", [1])]


def test_from_csv_reads_the_rows_of_a_protocol_evaluation(tmp_path, capsys):
    # --loads / --protocol --out writes per-window rows without seed (and prefix_hit_rate): --from-csv
    # refused them ("missing column(s) seed, prefix_hit_rate"), though --out's help says it reads them
    import json

    trace = tiny_trace(tmp_path / "tiny.jsonl")
    out = tmp_path / "protocol.csv"
    run = ["evaluate", "--policy", "least-work", "--against", "vertumnus-router", "--trace", str(trace), "--target-rps", "6",
           "--protocol", "--episode-window-s", "4", "--pool-gpus", "8", "--pool-composition", "cp2x2,cp1x4",
           "--supported-degrees", "1,2", "--quiet"]
    assert main([*run, "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert main(["evaluate", "--from-csv", str(out)]) == 0
    again = capsys.readouterr()
    assert again.err == ""
    title = "test windows (4 s, warm-up 30 s)"
    assert title in table and f"{out}: protocol windows" in " ".join(again.out.split())
    def body(text):  # the table below its title (which may wrap)
        return text[text.index("┏"):]

    assert body(again.out) == body(table)  # the run's table
    assert main([*run, "--format", "json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--from-csv", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran and ran[0]["load_fraction"] is None
    assert main(["evaluate", "--from-csv", str(out), "--format", "json", "--reference", "least-work"]) == 0
    assert {r["reference"] for r in json.loads(capsys.readouterr().out)} == {"least-work"}
    # --kind routing reads them as well; --kind reconfig is one line naming the file and the CSV it expects
    assert main(["evaluate", "--from-csv", str(out), "--kind", "routing", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran
    assert main(["evaluate", "--from-csv", str(out), "--kind", "reconfig"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {out}: the per-window rows of a protocol evaluation") and \
        "expected the per-episode rows of a reconfig evaluation" in err and len(err.splitlines()) == 1
    assert main(["evaluate", "--from-csv", str(out), "--reference", "round-robin"]) == 2
    assert "--reference 'round-robin' is not among the evaluated policies" in capsys.readouterr().err


def test_from_csv_of_protocol_rows_checks_cells_and_windows(tmp_path, capsys):
    rows = [{"policy": p, "workload": "conv", "load_fraction": lf, "rate_rps": 10.0 * lf, "window": w, "num_requests": 5,
             "num_unfinished": 0, "mean_ttft_s": t * w + lf, "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9}
            for lf in (0.5, 0.9) for w in (1, 2, 3) for p, t in (("least-work", 1.0), ("vertumnus-router", 1.5))]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    from experiments.common import dumps_json
    from policies.routing.protocol import cell_table

    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out) == json.loads(dumps_json(cell_table(rows, "vertumnus-router")))
    pd.DataFrame(rows[:-1]).to_csv(path, index=False)  # vertumnus-router lacks conv@0.9's window 3
    assert main(["evaluate", "--from-csv", str(path)]) == 0
    assert "vertumnus-router lacks windows conv@0.9 window 3" in capsys.readouterr().err
    for edit, message in [({"load_fraction": 2.5}, "'load_fraction': got 2.5; expected a fraction of capacity in (0, 2]"),
                          ({"rate_rps": None}, "'rate_rps': got nan; expected a rate > 0"),
                          ({"workload": ""}, "'workload': empty")]:
        pd.DataFrame([{**rows[0], **edit}] + rows[1:]).to_csv(path, index=False)
        assert main(["evaluate", "--from-csv", str(path)]) == 2
        assert f"{path}, row 1, field {message}" in capsys.readouterr().err
    pd.DataFrame(rows + rows[:1]).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert "a second row of the episode (policy 'least-work', workload 'conv', load_fraction 0.5, rate_rps 5, window 1)" \
        in capsys.readouterr().err


def test_from_csv_of_protocol_rows_with_a_zero_reference_ttft_has_no_delta(tmp_path, capsys):
    # a reference mean TTFT of 0 in every window (a hand-edited CSV: 0 is a time >= 0) was a
    # ZeroDivisionError traceback in policies.routing.protocol.cell_table; a % of 0 has no value
    import json

    rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w,
             "mean_ttft_s": 0.0 if p == "vertumnus-router" else 1.0, "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9}
            for w in (1, 2) for p in ("least-work", "vertumnus-router")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert table["least-work"]["delta_mean_ttft_pct_vs_ref"] is None and table["least-work"]["mean_ttft_s"] == 1.0
    assert table["vertumnus-router"]["delta_mean_ttft_pct_vs_ref"] == 0.0
    assert main(["evaluate", "--from-csv", str(path)]) == 0


def test_from_csv_second_row_of_an_absolute_rate_window_names_its_load_as_empty(tmp_path, capsys):
    # the message read "load_fraction nan" for the empty cell of a --target-rps run
    rows = [{"policy": p, "workload": "conv", "load_fraction": None, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
             "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9} for w in (1, 2) for p in ("least-work", "round-robin")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows + rows[:1]).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert (f"{path}, row 5: a second row of the episode (policy 'least-work', workload 'conv', load_fraction empty (an "
            "absolute rate), rate_rps 5, window 1)") in capsys.readouterr().err


def test_from_csv_of_protocol_rows_with_a_metric_never_recorded_prints_no_numpy_warning(tmp_path, capsys, recwarn):
    # "protocol.py:379: RuntimeWarning: Mean of empty slice" on stderr above the table
    import json

    rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
             "p90_ttft_s": None if p == "round-robin" else 2.0, "slo_attainment_token_weighted": 0.9}
            for w in (1, 2) for p in ("least-work", "round-robin")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and [r["p90_ttft_s"] for r in json.loads(out)] == [2.0, None]
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []
