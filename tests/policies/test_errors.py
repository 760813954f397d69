"""The policies layer's command-line errors (`cpgym evaluate`, `cpgym train`), one table: each row is
a command line, the flag, key or file its one error line must name, a short phrase it must hold,
and exit status 2 (tests/error_table.py). Where a row has ``forbid``, the check must come before
anything runs (or loads); ``after`` checks that nothing was written."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.error_table import CliError, check, param
from tests.factories import (
    CHECKPOINTS_DIR,
    ROUTING_EPISODE_ROW,
    episode_rows_csv,
    junk_checkpoint,
    reconfig_rows_csv,
    set_cell,
)

RUN = (("baselines.runner", "run_policy"),)
NO_LOADING = (("policies.common.checkpoint", "load_model_zip"),)
NO_RECONFIG_RUNS = RUN + (("policies.reconfig.evaluate", "LearnedReconfig"),)
TRAIN = ("--timesteps", "1", "--out", "{tmp}/run", "--quiet", "--wandb", "disabled")


def _no_run(tmp_path, names):
    assert not (tmp_path / "run").exists()


def _no_model(tmp_path, names):
    assert not (tmp_path / "model.zip").exists()


# --- setups: the files a row's command reads --------------------------------------------------
def _rows(edit=None):
    def setup(tmp_path, monkeypatch):
        path = episode_rows_csv(tmp_path)
        if edit is not None:
            edit(pd.read_csv(path)).to_csv(path, index=False)
        return {"csv": str(path)}
    return setup


def _bad_columns(tmp_path, monkeypatch):
    path = tmp_path / "bad.csv"
    pd.DataFrame([{"name": "x", "seed": 1}]).to_csv(path, index=False)
    return {"csv": str(path)}


def _empty_csv(tmp_path, monkeypatch):
    (tmp_path / "bad.csv").write_text("")
    return {"csv": str(tmp_path / "bad.csv")}


def _reconfig_rows(case):
    def setup(tmp_path, monkeypatch):
        path = reconfig_rows_csv(tmp_path, extra=[ROUTING_EPISODE_ROW] if case == "routing row" else (),
                                 composition=case != "no composition column")
        df = pd.read_csv(path)
        if case == "empty composition":
            df.loc[2, "composition"] = None
        if case == "empty policy":
            df.loc[1, "policy"] = None
        df.to_csv(path, index=False)
        return {"csv": str(path)}
    return setup


def _protocol_rows(drop=None, edit_line=None):
    def setup(tmp_path, monkeypatch):
        rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
                 "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9} for w in (1, 2)
                for p in ("least-work", "round-robin")]
        path = tmp_path / "p.csv"
        df = pd.DataFrame(rows)
        (df.drop(columns=[drop]) if drop else df).to_csv(path, index=False)
        if edit_line is not None:
            lines = path.read_text().splitlines()
            path.write_text("\n".join([lines[0], edit_line(lines[1]), *lines[2:]]) + "\n")
        return {"csv": str(path)}
    return setup


def _tuned(content):
    def setup(tmp_path, monkeypatch):
        (tmp_path / "tuned.json").write_text(content)
        return {"tuned": str(tmp_path / "tuned.json")}
    return setup


def _junk(kind, junk="model.zip", run_guard=False):
    def setup(tmp_path, monkeypatch):
        d = junk_checkpoint(tmp_path, kind, junk)
        if run_guard:  # joint: was loaded at its turn, after the learned controller's run of the first seed
            import policies.reconfig.evaluate as ev

            monkeypatch.setattr(ev.LearnedReconfig, "run", lambda *a, **k: pytest.fail("ran before joint: was loaded"))
        return {"ckpt": str(d), "junk": str(d / junk)}
    return setup


def _junk_zip(tmp_path, monkeypatch):
    (tmp_path / "junk.zip").write_bytes(b"junk")
    return {"junk": str(tmp_path / "junk.zip")}


def _shipped_reconfig(tmp_path, monkeypatch):
    from policies.common.checkpoint import SHIPPED_RECONFIG  # lazy: loads torch

    return {"shipped": SHIPPED_RECONFIG.name}


# --- the table ------------------------------------------------------------------------------------
def _checkpoint_rows():
    rows = []
    for ckpt, kind, trained in [("routing_conversation_residual", "reconfig", "routing"),
                                ("reconfig_target", "routing", "reconfig")]:
        path = str(CHECKPOINTS_DIR / ckpt)
        rows.append(CliError(f"checkpoint-of-the-other-kind-{kind}", ("evaluate", "--policy", path, "--kind", kind, "--seeds",
                                                                      "1", "--quiet"),
                             f"--policy {path}", f"is a {trained} checkpoint (train_config.json kind '{trained}'), not a "
                             f"{kind} one; evaluate it with --kind {trained} (or --kind auto)", forbid=NO_LOADING))
    rows += [
        # was "unknown policy '...'; known policies: ..."
        CliError("not-a-checkpoint", ("evaluate", "--policy", "{file}", "--quiet"), "{file}",
                 "not a checkpoint; expected a checkpoint folder holding model.zip, a model .zip file, or 'shipped'"),
        # was read as a checkpoint folder ("vertumnus-adaptive/train_config.json: No such file or directory")
        CliError("heuristic-as-the-reconfig-policy", ("evaluate", "--kind", "reconfig", "--policy", "vertumnus-adaptive",
                                                      "--seeds", "1000", "--quiet"),
                 "--policy vertumnus-adaptive", "is a heuristic; a reconfiguration evaluation takes a reconfiguration "
                 "checkpoint ('shipped-reconfig' or a folder) or 'none'"),
        # was a numpy broadcasting traceback inside VecNormalize at its first action
        CliError("reconfig-checkpoint-on-another-pool-size",
                 ("evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                  "--seeds", "1000", "--pool-gpus", "32", "--pool-composition", "cp4x4,cp2x8", "--horizon-s", "1", "--quiet"),
                 "{shipped}: the checkpoint observes targets (36, 5)",
                 "36 actions, this pool (32 GPUs, CP degrees 1,2,4,8) gives targets (25, 5)", setup=_shipped_reconfig),
        CliError("reconfig-checkpoint-menu-the-pool-cannot-make",
                 ("evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                  "--seeds", "1000", "--supported-degrees", "2,4", "--horizon-s", "1", "--quiet"),
                 "{shipped}", "the checkpoint's target menu does not fit this pool: target_degrees [2, 4, 8]: expected a "
                 "non-empty subset of the pool's supported degrees [2, 4]", setup=_shipped_reconfig, forbid=RUN),
        # was SB3's "ValueError: Error: the file ... wasn't a zip-file" traceback
        CliError("corrupt-routing-checkpoint-zip", ("evaluate", "--policy", "{junk}", "--windows", "0", "--quiet"),
                 "{junk}: ", "not a readable SB3 checkpoint zip (", setup=_junk_zip),
        CliError("corrupt-routing-checkpoint-folder", ("evaluate", "--policy", "{ckpt}", "--windows", "0", "--quiet"),
                 "{junk}: ", "not a readable SB3 checkpoint zip (", setup=_junk("routing")),
        CliError("corrupt-joint-routing-checkpoint", ("evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig",
                                                      "--against", "joint:{ckpt}", "--seeds", "1000", "--quiet"),
                 "{junk}: ", "not a readable SB3 checkpoint zip (", setup=_junk("routing", run_guard=True)),
        # was a torch AttributeError traceback ('CombinedExtractor' object has no attribute 'w_div')
        CliError("reconfig-checkpoint-as-the-joint-router",
                 ("evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against",
                  "vertumnus-router,joint:shipped-reconfig", "--seeds", "1000", "--quiet"),
                 "--against joint:shipped-reconfig", "shipped-reconfig is a reconfig checkpoint (train_config.json kind "
                 "'reconfig'); joint: takes a routing checkpoint (e.g. joint:shipped)", forbid=NO_RECONFIG_RUNS),
        # it was loaded only when its turn came, after the learned controller's runs
        CliError("missing-joint-routing-checkpoint", ("evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig",
                                                      "--against", "joint:/nonexistent/ckpt", "--seeds", "1000", "--quiet"),
                 "--against joint:/nonexistent/ckpt", "/nonexistent/ckpt: checkpoint path does not exist",
                 forbid=(("policies.reconfig.evaluate", "LearnedReconfig"),)),
    ]
    for junk, what in [("model.zip", "not a readable SB3 checkpoint zip ("),
                       ("vecnormalize.pkl", "not a readable VecNormalize pickle (")]:
        rows += [CliError(f"corrupt-reconfig-checkpoint-{junk}", ("evaluate", "--policy", "{ckpt}", "--seeds", "1000",
                                                                  "--quiet"),
                          "{junk}: ", what, setup=_junk("reconfig", junk)),
                 CliError(f"corrupt-init-from-{junk}", ("train", "reconfig", "--init-from", "{ckpt}/model.zip", "--out",
                                                        "{tmp}/run", "--quiet", "--wandb", "disabled"),
                          "{junk}: ", what, setup=_junk("reconfig", junk), after=_no_run)]
    return rows


def _evaluate_flag_rows():
    rows = [
        CliError("policy-required", ("evaluate",), "--policy", "is required (a checkpoint, 'shipped' or a policy name), "
                                                               "unless --from-csv"),
        CliError("policy-required-with-seeds", ("evaluate", "--seeds", "1"), "--policy", "is required"),
        # the first policy ran, then the pool's message alone
        CliError("fixed-composition-the-pool-rejects",
                 ("evaluate", "--kind", "reconfig", "--policy", "none", "--against", "vertumnus-router,fixed:cp4x5",
                  "--seeds", "1000", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4",
                  "--quiet"),
                 "--against fixed:cp4x5", "composition 'cp4x5' uses 20 GPUs but the pool has 8", forbid=RUN),
        # evaluated after a warning line: training-data numbers in the table
        CliError("training-seeds-of-the-checkpoint", ("evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig",
                                                      "--seeds", "1,2,70", "--quiet"),
                 "--seeds 1,2,70", "seed(s) 1-2 of matched-phases are training seeds of shipped-reconfig (trained on "
                 "seeds 0-59); evaluate on held-out seeds", forbid=NO_RECONFIG_RUNS),
    ]
    # each copy was counted as another episode: a zero-width, fake confidence interval
    for argv, key, phrase in [
            (("--policy", "least-work", "--against", "round-robin", "--seeds", "1,1", "--windows", "0"), "(--seeds)",
             "seeds must be distinct integers >= 0, got [1, 1]"),
            (("--policy", "least-work", "--against", "round-robin", "--seeds", "1", "--windows", "0,0"), "--windows",
             "lists 0 twice: '0,0'; expected distinct values (each is one episode)"),
            (("--kind", "reconfig", "--policy", "none", "--against", "vertumnus-router", "--seeds", "1000,1001,1000"),
             "(--seeds)", "seeds must be distinct integers >= 0, got [1000, 1001, 1000]")]:
        rows.append(CliError(f"repeated{key}-{argv[-1]}", ("evaluate", *argv, "--quiet"), key, phrase, forbid=RUN))
    # both labels ran, and best-fixed-in-hindsight was a 'best of one'
    for against, key, phrase in [
            ("fixed:cp4x9+cp2x2,fixed:cp2x2+cp4x9", "--against fixed:cp2x2+cp4x9",
             "is the same composition as fixed:cp4x9+cp2x2; expected each composition once"),
            ("vertumnus-router,fixed:cp4x6+cp2x8", "--against fixed:cp4x6+cp2x8",
             "is the initial composition cp4x6,cp2x8 (--pool-composition), which vertumnus-router runs; expected each "
             "composition once")]:
        rows.append(CliError(f"one-composition-two-labels-{against}", ("evaluate", "--kind", "reconfig", "--policy", "none",
                                                                       "--against", against, "--seeds", "1000", "--quiet"),
                             key, phrase, forbid=NO_RECONFIG_RUNS))
    # an empty string read as 'not given' ran the default comparison policies
    for extra in [(), ("--kind", "reconfig", "--seeds", "1000"), ("--protocol", "--target-rps", "5")]:
        policy = "none" if "reconfig" in extra else "least-work"
        rows.append(CliError(f"empty-against{''.join(extra)}", ("evaluate", "--policy", policy, "--against", "", *extra,
                                                                "--quiet"),
                             "--against", "needs at least one name, got ''", one_line=False, forbid=RUN))
    for i, (content, phrase) in enumerate([
            ("a,b\n1,2\n", "not valid JSON (line 1, column 1)"),
            ('{"heuristic": "vertumnus"}', "no 'cells' object; expected the file written by `cpgym tune vertumnus --out`"),
            ('{"cells": {"conv@0.7": [3, 1]}}', "cell 'conv@0.7' is a list"),
            ('{"cells": {"conv@0.7": {"lambda": 1}}}',
             "cell 'conv@0.7', field 'beta': got None; expected a finite number >= 1"),
            ('{"cells": {"conv@0.7": {"beta": 0.5, "lambda": 1}}}', "field 'beta': got 0.5; expected a finite number >= 1"),
            ('{"cells": {"conv@0.7": {"beta": 3, "lambda": "1"}}}', "field 'lambda': got '1'; expected a finite number >= 0"),
            ('{"cells": {"conv@0.7": {"beta": 3, "lambda": NaN}}}',
             "field 'lambda': got nan; expected a finite number >= 0")]):
        rows.append(CliError(f"tuned-file-{i}", ("evaluate", "--policy", "least-work", "--against", "vertumnus-tuned",
                                                 "--protocol", "--target-rps", "6", "--tuned", "{tuned}", "--quiet"),
                             "error: {tuned}: ", phrase, setup=_tuned(content),
                             forbid=(("policies.routing.protocol", "scenarios"),)))
    return rows


def _more_evaluate_rows():
    rows = [
        CliError("evaluate-unknown-against", ("evaluate", "--policy", "least-work", "--against", "no-such-policy",
                                              "--windows", "0", "--seeds", "1"),
                 "'no-such-policy'", "unknown policy", one_line=False),
        CliError("evaluate-seeds-not-integers", ("evaluate", "--policy", "least-work", "--seeds", "one"), "--seeds", ""),
        CliError("train-zero-timesteps", ("train", "routing", "--timesteps", "0", "--out", "{tmp}", "--wandb", "disabled"),
                 "total_timesteps", "", one_line=False),
    ]
    # `--loads 0.7,0.7` ran the same cell twice (its windows counted twice: a zero-width CI), before the capacity search
    for command in [("evaluate", "--policy", "least-work"), ("tune", "vertumnus", "--out", "{tmp}/tuned.json")]:
        rows.append(CliError(f"{command[0]}-repeated-load", (*command, "--trace", "{tmp}/tiny.jsonl", "--loads",
                                                             "0.7,0.9,0.7", "--quiet"),
                             "--loads", "lists 0.7 twice: 0.7,0.9,0.7; expected distinct loads (each is one cell of windows)",
                             one_line=False))
    for flag, value in [("--windows", "0"), ("--episode-window-s", "5"), ("--eval-every", "3")]:
        rows.append(CliError(f"reconfig-checkpoint-with-routing-only{flag}", ("evaluate", "--policy", "shipped-reconfig",
                                                                             "--seeds", "1000", "--quiet", flag, value),
                             f"(drop {flag})", "applies only to routing evaluation",
                             forbid=(("policies.reconfig.evaluate", "evaluate_reconfig"),)))
    return rows


def _from_csv_rows():
    rows = [
        CliError("from-csv-with-policy", ("evaluate", "--from-csv", "{csv}", "--policy", "shipped"), "--policy",
                 "does not apply with --from-csv", setup=_rows()),
        CliError("from-csv-with-seeds", ("evaluate", "--from-csv", "{csv}", "--seeds", "1"), "--seeds",
                 "does not apply with --from-csv", setup=_rows()),
        CliError("from-csv-wrong-columns", ("evaluate", "--from-csv", "{csv}"), "{csv}: ",
                 "missing column(s) policy, window, mean_ttft_s", setup=_bad_columns),
        CliError("from-csv-empty-file", ("evaluate", "--from-csv", "{csv}"), "{csv}: ", "not a per-episode CSV",
                 setup=_empty_csv, one_line=False),
    ]
    # a non-number was a bare "could not convert string to float"; a repeated episode counted twice
    for i, (edit, where, phrase) in enumerate([
            (lambda df: df.astype({"mean_ttft_s": object}).assign(mean_ttft_s=["1.0", "abc", "2", "3"]),
             "row 2, field 'mean_ttft_s'", "got 'abc'; expected a finite number >= 0"),
            (lambda df: df.astype({"seed": float}).assign(seed=[7, 9, 7.5, 9]), "row 3, field 'seed'",
             "got 7.5; expected an integer"),
            (lambda df: pd.concat([df, df.iloc[[1]]]), "row 5",
             "a second row of the episode (policy 'least-work', seed 9, window 0); expected one row per episode")]):
        rows.append(CliError(f"from-csv-bad-value-{i}", ("evaluate", "--from-csv", "{csv}"), f"{{csv}}, {where}", phrase,
                             setup=_rows(edit)))
    # nan was read as a missing value and dropped (the table then paired the policies over different episodes);
    # the others were averaged into the table (a negative mean TTFT in the JSON)
    for edit, where, phrase in [
            (set_cell("mean_ttft_s", "nan"), "row 2, field 'mean_ttft_s'", "got 'nan'; expected a finite number >= 0"),
            (set_cell("mean_ttft_s", "NA"), "row 2, field 'mean_ttft_s'", "got 'NA'; expected a finite number >= 0"),
            (set_cell("mean_ttft_s", -5), "row 2, field 'mean_ttft_s'", "got -5.0; expected a finite number >= 0"),
            (set_cell("p90_ttft_s", "inf", row=3), "row 4, field 'p90_ttft_s'", "got inf; expected a finite number >= 0"),
            (set_cell("slo_attainment_token_weighted", 1.5), "row 2, field 'slo_attainment_token_weighted'",
             "got 1.5; expected a share in [0, 1]"),
            (set_cell("prefix_hit_rate", -0.1), "row 2, field 'prefix_hit_rate'", "got -0.1; expected a share in [0, 1]"),
            (set_cell("num_unfinished", -1), "row 2, field 'num_unfinished'", "got -1; expected a count (an integer >= 0)"),
            (set_cell("num_unfinished", 0.5), "row 2, field 'num_unfinished'", "got 0.5; expected a count (an integer >= 0)"),
            (set_cell("seed", -7), "row 2, field 'seed'", "got -7; expected an integer >= 0")]:
        rows.append(CliError(f"from-csv-out-of-range-{where}-{phrase.split(';')[0]}",
                             ("evaluate", "--from-csv", "{csv}", "--format", "json"), f"{{csv}}, {where}", phrase,
                             setup=_rows(edit)))
    for case, where, phrase in [
            # a KeyError traceback in aggregate_reconfig
            ("no composition column", "row 3, field 'composition'", "missing column; expected the fixed composition that won"),
            ("empty composition", "row 3, field 'composition'", "empty; expected the fixed composition that won"),
            # a rich MarkupError / TypeError traceback on the NaN label
            ("empty policy", "row 2, field 'policy'", "empty; expected the policy label of the episode"),
            # aggregated as a reconfiguration policy with one episode and a paired delta
            ("routing row", "row 7", "a routing evaluation's row (field 'window' 0.0) among a reconfiguration evaluation's "
                                     "rows")]:
        rows.append(CliError(f"from-csv-reconfig-{case}", ("evaluate", "--from-csv", "{csv}"), f"{{csv}}, {where}", phrase,
                             setup=_reconfig_rows(case)))
    # a protocol CSV without its window column was read as a routing CSV ("missing column(s) seed, window, ...")
    for column in ["window", "rate_rps", "load_fraction"]:
        rows.append(CliError(f"from-csv-protocol-without-{column}", ("evaluate", "--from-csv", "{csv}"),
                             f"{{csv}}: missing column(s) {column}", "expected the per-episode rows of a protocol evaluation",
                             setup=_protocol_rows(drop=column)))
    for name, edit, fields in [("truncated", lambda line: line.rsplit(",", 1)[0], 7),  # its SLO attainment read as missing
                               ("trailing-comma", lambda line: line + ",", 9)]:  # read as an index column
        rows.append(CliError(f"from-csv-row-{name}", ("evaluate", "--from-csv", "{csv}"), "{csv}, row 1",
                             f"{fields} fields, the header has 8; expected one field per column",
                             setup=_protocol_rows(edit_line=edit)))
    return rows


def _train_rows():
    rows = []
    for argv, key, phrase in [
            (("--target-degrees", "2,4"), "--target-degrees", "applies to --action-mode target only"),
            (("--warm-start", "oracle"), "--warm-start", "applies to --action-mode target only"),
            (("--bc-epochs", "5"), "--bc-epochs", "applies to --action-mode target only"),
            (("--action-mode", "target", "--oracle-switch-cost-s-per-gpu", "5"), "--oracle-switch-cost-s-per-gpu",
             "applies to --warm-start oracle only"),
            (("--action-mode", "target", "--warm-start", "oracle", "--oracle-noisy-rollouts", "2"), "--oracle-noisy-rollouts",
             "go together"),
            (("--action-mode", "target", "--noop-logit-bias", "1"), "--noop-logit-bias", "applies to --action-mode operation"),
            (("--action-mode", "target", "--no-capacity-features"), "--no-capacity-features", "drop --no-capacity-features"),
            (("--action-mode", "target", "--max-operation-gpus-per-window", "0"), "max_operation_gpus_per_window",
             "must be > 0")]:
        rows.append(CliError(f"train-reconfig{''.join(argv)}", ("train", "reconfig", *argv, "--out", "{tmp}"), key, phrase,
                             one_line=False, after=_no_model))
    rows.append(CliError("train-minibatch-larger-than-rollout", ("train", "reconfig", "--n-steps", "8", "--batch-size", "16",
                                                                 "--out", "{tmp}"),
                         "batch_size", "", one_line=False, after=_no_model))
    for argv in [("reconfig", "--hidden-dim", "32"),  # routing-only flag
                 ("reconfig", "--eval-every", "3"),  # routing-only flag
                 ("routing", "--decision-window-s", "10"),  # reconfig-only flag
                 ("routing", "--no-capacity-features"),  # reconfig-only flag
                 ("reconfig", "--validation-windows", "3"),  # no such flag (reconfig validates on --validation-seeds)
                 ("routing", "--seed", "3"),  # the simulator seed is drawn from --train-seed
                 ("routing", "--no-such-flag", "1")]:
        rows.append(CliError(f"train-{argv[0]}-unrecognized{argv[1]}", ("train", *argv, "--out", "{tmp}"), argv[1],
                             "unrecognized arguments"))
    for flags, message in [
            (("--noop-logit-bias", "nan"),  # was a NaN-logits traceback
             "noop_logit_bias must be a finite number, got nan (--noop-logit-bias)"),
            (("--action-mode", "target", "--warm-start", "oracle", "--bc-learning-rate", "inf"),  # same, after the oracle runs
             "bc_learning_rate must be a finite number > 0, got inf (--bc-learning-rate)"),
            (("--episode-window-s", "inf"),  # was accepted
             "episode_window_s must be a finite number > 0, got inf (--episode-window-s)"),
            (("--action-mode", "target", "--target-degrees", "2,2"),  # was accepted (ControllerConfig refuses it)
             "target_degrees must be distinct CP degrees, got [2, 2] (--target-degrees)"),
            (("--action-mode", "target", "--target-degrees", "16"),  # named no flag, after provenance.json was written
             "--target-degrees: target_degrees [16]: expected a non-empty subset of the pool's supported degrees "
             "[1, 2, 4, 8]"),
            (("--workload-seeds", "-1"),  # named --train-seed
             "workload_seeds must be distinct integers >= 0, got [-1] (--workload-seeds)"),
            (("--workload-seeds", "1,1"),  # was accepted: one workload trained on twice
             "workload_seeds must be distinct integers >= 0, got [1, 1] (--workload-seeds)"),
            (("--decision-window-s", "700"),  # was accepted: one decision per 600 s episode, on an empty window
             "decision_window_s must be shorter than episode_window_s (the controller decides once per window), got 700 s "
             "and 600 s (--decision-window-s, --episode-window-s)"),
            (("--validation-seeds", "-2"),  # failed after training, at the first validation
             "validation_seeds must be distinct integers >= 0, got [-2] (--validation-seeds)")]:
        flag = [f for f in flags if f.startswith("--")][-1]
        rows.append(CliError(f"train-reconfig{''.join(flags)}", ("train", "reconfig", *flags, *TRAIN), flag,
                             message.replace(f" ({flag})", ""), after=_no_run))
    # --ent-coef inf used to pass `>= 0` and crash inside PPO with a NaN-logits traceback
    for kind, flag, phrase in [
            ("routing", "--ent-coef",
             "ent_coef must be a finite number >= 0 and clip_range a finite number > 0, got inf, 0.2"),
            ("routing", "--learning-rate", "learning_rate must be a finite number > 0, got inf"),
            ("routing", "--clip-range", "clip_range a finite number > 0, got 0.01, inf"),
            ("reconfig", "--ent-coef", "ent_coef a finite number >= 0, got 0.0003, inf"),
            ("reconfig", "--learning-rate", "learning_rate must be a finite number > 0 and ent_coef a finite number >= 0, "
                                            "got inf, 0.0")]:
        rows.append(CliError(f"train-{kind}{flag}-inf", ("train", kind, flag, "inf", *TRAIN), flag, phrase, after=_no_run))
    # inf made the prior -J/tau vanish (a uniform prior) without a word
    rows.append(CliError("train-routing-residual-tau-inf", ("train", "routing", "--residual-tau-s", "inf", *TRAIN),
                         "(--residual-tau-s)", "residual_tau_s must be a finite number > 0, got inf"))
    for kind in ("routing", "reconfig"):
        # -1 crashed in gymnasium on the derived seed -1000 (after provenance.json was written); >= 2**32 in SB3
        for seed in ["-1", "4294967296", "99999999999999999999"]:
            rows.append(CliError(f"train-{kind}-seed{seed}", ("train", kind, "--train-seed", seed, *TRAIN), "(--train-seed)",
                                 f"seed must be an integer in [0, 4294967295], got {seed}", after=_no_run))
        # failed only when the trainer built the workload, after provenance.json was written to --out
        rows.append(CliError(f"train-{kind}-unknown-workload", ("train", kind, "--workload", "nope", *TRAIN[:-2]),
                             "workload 'nope'", "unknown workload 'nope'; known workloads: bursty, ", one_line=False,
                             after=_no_run))
        for source, key, phrase in [(("--workload", "tool-agent", "--workload-param", "duration_s=-5"), "duration_s",
                                     "must be a finite number > 0"),
                                    (("--trace", "/nonexistent/trace.jsonl"), "/nonexistent/trace.jsonl",
                                     "trace file does not exist")]:
            rows.append(CliError(f"train-{kind}{''.join(source)}", ("train", kind, *source, *TRAIN[:-2]), key, phrase,
                                 one_line=False, after=_no_run))
    # both failed only inside the trainer, with provenance.json, train_config.json and progress.csv already in --out
    for flags, key, phrase in [(("--bc-policy", "nope"), "bc_policy", "unknown policy 'nope'; known policies: vertumnus, "),
                               (("--num-slots", "3"), "num_slots",
                                "must be >= the pool's max_num_workers (40, pool of 40 GPUs over CP degrees 1,2,4,8), got 3")]:
        rows.append(CliError(f"train-routing{''.join(flags)}", ("train", "routing", "--workload", "tool-agent",
                                                                "--workload-param", "duration_s=40", *flags, *TRAIN),
                             key, phrase, one_line=False, after=_no_run))
    return rows


ROWS = [row for rows in (_checkpoint_rows(), _evaluate_flag_rows(), _more_evaluate_rows(), _from_csv_rows(), _train_rows())
        for row in rows]


def test_row_ids_are_distinct():
    ids = [r.id for r in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("row", [param(r) for r in ROWS])
def test_policies_cli_error(row, tmp_path, monkeypatch, capsys):
    check(row, tmp_path, monkeypatch, capsys)
