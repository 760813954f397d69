"""The policies layer's command-line errors (`cpgym evaluate`, `cpgym train`), one table: each row is
a command line, the flag, key or file its one error line must name, a short phrase it must hold,
and exit status 2 (tests/error_table.py). Where a row has ``forbid``, the check must come before
anything runs (or loads); ``after`` checks that nothing was written."""

from __future__ import annotations

import pytest

from tests.error_table import CliError, assert_distinct_ids, check, param
from tests.factories import CHECKPOINTS_DIR, junk_checkpoint

RUN = (("baselines.runner", "run_policy"),)
NO_LOADING = (("policies.common.checkpoint", "load_model_zip"),)
#: the benchmark protocol's run (cpgym evaluate is a view of it): every SPEC is checked before it
NO_BENCHMARK = (("benchmark.protocol", "run_benchmark"),)
TRAIN = ("--timesteps", "1", "--out", "{tmp}/run", "--quiet", "--wandb", "disabled")


def _no_run(tmp_path, names):
    assert not (tmp_path / "run").exists()


def _no_model(tmp_path, names):
    assert not (tmp_path / "model.zip").exists()


# --- setups: the files a row's command reads --------------------------------------------------
def _junk(kind, junk="model.zip"):
    def setup(tmp_path, monkeypatch):
        d = junk_checkpoint(tmp_path, kind, junk)
        return {"ckpt": str(d), "junk": str(d / junk)}
    return setup


def _junk_zip(tmp_path, monkeypatch):
    (tmp_path / "junk.zip").write_bytes(b"junk")
    return {"junk": str(tmp_path / "junk.zip")}


# --- the table ------------------------------------------------------------------------------------
def _checkpoint_rows():
    rows = []
    for ckpt, task, kind, trained in [("routing_conversation_residual", "reconfig/matched-phases-v1", "reconfig", "routing"),
                                      ("reconfig_target", "routing/conversation-0.9-v1", "routing", "reconfig")]:
        path = str(CHECKPOINTS_DIR / ckpt)
        rows.append(CliError(f"checkpoint-of-the-other-kind-{kind}", ("evaluate", "--policy", path, "--task", task, "--quick",
                                                                      "--quiet"),
                             f"--policy {path}", f"is a {trained} checkpoint (train_config.json kind '{trained}'), not a "
                             f"{kind} one; evaluate it on a {trained} task", forbid=NO_LOADING + NO_BENCHMARK))
    rows += [
        # was "unknown policy '...'; known policies: ..."
        CliError("not-a-checkpoint", ("evaluate", "--policy", "{file}", "--quiet"), "{file}",
                 "not a checkpoint; expected a checkpoint folder holding model.zip, a model .zip file, or 'shipped'"),
        # was SB3's "ValueError: Error: the file ... wasn't a zip-file" traceback
        CliError("corrupt-routing-checkpoint-zip", ("evaluate", "--policy", "{junk}", "--quick", "--quiet"),
                 "{junk}: ", "not a readable SB3 checkpoint zip (", setup=_junk_zip, forbid=NO_BENCHMARK),
        CliError("corrupt-routing-checkpoint-folder", ("evaluate", "--policy", "{ckpt}", "--quick", "--quiet"),
                 "{junk}: ", "not a readable SB3 checkpoint zip (", setup=_junk("routing"), forbid=NO_BENCHMARK),
    ]
    for junk, what in [("model.zip", "not a readable SB3 checkpoint zip ("),
                       ("vecnormalize.pkl", "not a readable VecNormalize pickle (")]:
        rows += [CliError(f"corrupt-reconfig-checkpoint-{junk}", ("evaluate", "--policy", "{ckpt}", "--quick", "--quiet"),
                          "{junk}: ", what, setup=_junk("reconfig", junk), forbid=NO_BENCHMARK),
                 CliError(f"corrupt-init-from-{junk}", ("train", "reconfig", "--init-from", "{ckpt}/model.zip", "--out",
                                                        "{tmp}/run", "--quiet", "--wandb", "disabled"),
                          "{junk}: ", what, setup=_junk("reconfig", junk), after=_no_run)]
    return rows


def _evaluate_flag_rows():
    rows = [
        CliError("policy-required", ("evaluate", "--quick"), "--policy", "the following arguments are required"),
        # the first policy ran, then the pool's message alone
        CliError("fixed-composition-the-pool-rejects",
                 ("evaluate", "--task", "reconfig/matched-phases-v1", "--policy", "vertumnus-adaptive", "--against",
                  "vertumnus-router,fixed:cp4x5", "--quick", "--quiet"),
                 "fixed:cp4x5", "composition 'cp4x5' uses 20 GPUs but the pool has 40", forbid=NO_BENCHMARK),
        CliError("evaluate-repeated-against", ("evaluate", "--policy", "least-work", "--against", "round-robin,round-robin",
                                               "--quick", "--quiet"),
                 "--against", "lists 'round-robin' twice", forbid=NO_BENCHMARK),
    ]
    # an empty string read as 'not given' ran the default comparison policies
    for extra in [(), ("--task", "reconfig/matched-phases-v1"), ("--protocol", "--target-rps", "5")]:
        policy = "vertumnus-adaptive" if "--task" in extra else "least-work"
        rows.append(CliError(f"empty-against{''.join(extra)}", ("evaluate", "--policy", policy, "--against", "", *extra,
                                                                "--quick", "--quiet"),
                             "--against", "needs at least one name, got ''", one_line=False, forbid=NO_BENCHMARK))
    return rows


def _more_evaluate_rows():
    rows = [
        CliError("evaluate-unknown-against", ("evaluate", "--policy", "least-work", "--against", "no-such-policy",
                                              "--quick", "--quiet"),
                 "'no-such-policy'", "unknown policy", forbid=NO_BENCHMARK),
        CliError("evaluate-unknown-task", ("evaluate", "--policy", "least-work", "--task", "routing/nope-v1", "--quiet"),
                 "--task", "unknown task 'routing/nope-v1'", also=("cpgym evaluate: error: --task: ",),
                 forbid=NO_BENCHMARK),
        CliError("evaluate-max-episodes-not-an-integer", ("evaluate", "--policy", "least-work", "--max-episodes", "one"),
                 "--max-episodes", "expected an integer, got 'one'"),
        # a trailing comma ran silently
        CliError("benchmark-run-empty-task-item", ("benchmark", "run", "--policy", "least-work", "--tasks",
                                                   "routing/conversation-0.9-v1,", "--quick", "--quiet"),
                 "--tasks", "without empty items", forbid=NO_BENCHMARK),
        CliError("evaluate-lambda-named-as-the-user-writes-it", ("evaluate", "--policy", "vertumnus-router:lambda=-2",
                                                                  "--quiet"),
                 "lambda", "vertumnus lambda must be a finite number >= 0", absent=("lambda_",), forbid=NO_BENCHMARK),
        CliError("train-arms-decision-window-longer-than-episode", ("train", "arms", "--decision-window-s", "20",
                                                                    "--episode-window-s", "10", "--out", "{tmp}/arms"),
                 "decision_window_s", "must not exceed episode_window_s"),
        CliError("train-reconfig-missing-init-from", ("train", "reconfig", "--init-from", "{tmp}/no_model.zip", "--out",
                                                       "{tmp}/run", "--quiet", "--wandb", "disabled"),
                 "--init-from", "no such file", after=_no_run),
        CliError("train-zero-timesteps", ("train", "routing", "--timesteps", "0", "--out", "{tmp}", "--wandb", "disabled"),
                 "total_timesteps", "", one_line=False),
        # `--loads 0.7,0.7` ran the same cell twice (its windows counted twice: a zero-width CI), before the capacity search
        CliError("tune-repeated-load", ("tune", "vertumnus", "--out", "{tmp}/tuned.json", "--trace", "{tmp}/tiny.jsonl",
                                        "--loads", "0.7,0.9,0.7", "--quiet"),
                 "--loads", "lists 0.7 twice: 0.7,0.9,0.7; expected distinct loads (each is one cell of windows)",
                 one_line=False),
    ]
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


def _trained(name):
    """A run folder holding a checkpoint file ``name`` (an earlier training's)."""
    def setup(tmp_path, monkeypatch):
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / name).write_text("earlier")
        return {"run": str(tmp_path / "run")}
    return setup


def _untouched(name):
    def after(tmp_path, names):
        assert [p.name for p in (tmp_path / "run").iterdir()] == [name]
        assert (tmp_path / "run" / name).read_text() == "earlier"
    return after


def _overwrite_rows():
    # a second training into the same --out silently replaced the first one's checkpoint
    trainers = (("policies.reconfig.train", "train_reconfig"), ("policies.routing.train", "train_routing"),
                ("policies.routing.train_arms", "train_arms"))
    return [CliError(f"train-{kind}-out-holds-a-checkpoint", ("train", kind, "--out", "{run}", "--quiet",
                                                              *(() if kind == "arms" else ("--wandb", "disabled"))),
                     "{run}", f"holds a checkpoint ({name})", also=("--overwrite",), setup=_trained(name),
                     forbid=tuple(t for t in trainers if t[1] != "train_arms" or kind == "arms"),
                     after=_untouched(name))
            for kind, name in (("routing", "model.zip"), ("reconfig", "model.zip"), ("arms", "arm_model.json"))]


ROWS = [row for rows in (_checkpoint_rows(), _evaluate_flag_rows(), _more_evaluate_rows(), _train_rows(),
                         _overwrite_rows())
        for row in rows]


def test_row_ids_are_distinct():
    assert_distinct_ids(ROWS)


@pytest.mark.parametrize("row", [param(r) for r in ROWS])
def test_policies_cli_error(row, tmp_path, monkeypatch, capsys):
    check(row, tmp_path, monkeypatch, capsys)
