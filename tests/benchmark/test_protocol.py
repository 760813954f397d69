"""The benchmark protocol (``benchmark.protocol``): row schemas, the paired interval computed
independently, policies from Python (a callable, an SB3-style object), SPEC strings and the
task's reference (tuned or untuned)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import benchmark.tuned as tuned
from baselines.registry import get_policy
from benchmark import evaluate
from benchmark.protocol import EPISODE_FIELDS, SUMMARY_FIELDS, run_benchmark
from benchmark.specs import Contender, heuristic_contender, reference_contender
from benchmark.splits import QUICK_EPISODES
from benchmark.tasks import get_task
from experiments.benchmark_specs import resolve_spec, resolve_specs
from tests.interrupt import patch_everywhere

TASK = get_task("routing/conversation-0.9-v1")
#: Student-t 0.975 quantile with 3 degrees of freedom (4 episodes).
T975_DF3 = 3.182446305284263


@pytest.fixture
def no_tuned(tmp_path, monkeypatch):
    """No stored tuned parameters (an empty ``benchmark/tuned``): the reference is the untuned router."""
    import benchmark.tuned as tuned

    patch_everywhere(monkeypatch, tuned, "tuned_dir", lambda: tmp_path)


@pytest.fixture(scope="module")
def quick():
    contenders = [heuristic_contender("least-work", TASK), reference_contender(TASK)]
    return run_benchmark(contenders, [TASK], "validation", max_episodes=QUICK_EPISODES)


def test_rows_have_the_issue_schema(quick):
    lw = quick[0]
    assert list(lw["summary"]) == list(SUMMARY_FIELDS)
    assert lw["summary"]["num_episodes"] == len(lw["episodes"]) == QUICK_EPISODES
    for row in lw["episodes"]:
        assert list(row) == [f if f != "seed|block_offset_s" else "block_offset_s" for f in EPISODE_FIELDS]
        assert row["task"] == TASK.id and row["policy"] == "least-work" and row["split"] == "validation"
        assert row["num_requests"] > 0 and 0 < row["mean_ttft_s"] <= row["p90_ttft_s"] <= row["p99_ttft_s"]
        assert row["overloaded"] is False  # 0.9 of the measured capacity
    assert [r["episode_index"] for r in lw["episodes"]] == sorted({r["episode_index"] for r in lw["episodes"]})


def test_delta_is_the_paired_t_interval_over_episodes(quick):
    lw, vr = quick
    a = np.array([r["mean_ttft_s"] for r in lw["episodes"]])
    b = np.array([r["mean_ttft_s"] for r in vr["episodes"]])
    d = 100 * (a - b) / b.mean()
    half = T975_DF3 * d.std(ddof=1) / math.sqrt(len(d))
    s = lw["summary"]
    assert s["reference"] == reference_contender(TASK).label  # tuned:vertumnus-router once tuned, else "(untuned)"
    assert s["delta_mean_ttft_pct"] == pytest.approx(d.mean(), rel=1e-12)
    # (envs.metrics.stats tabulates t to 3 decimals: 3.182)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half), abs=2e-4 * half)
    assert s["mean_ttft_s"] == pytest.approx(a.mean(), rel=1e-12)
    assert s["delta_mean_ttft_pct"] == pytest.approx(100 * (s["mean_ttft_s"] / vr["summary"]["mean_ttft_s"] - 1))
    # the reference itself: no difference, no interval
    assert vr["summary"]["delta_mean_ttft_pct"] == 0.0 and math.isnan(vr["summary"]["ci_low"])


def test_runs_are_deterministic(quick):
    again = run_benchmark([heuristic_contender("least-work", TASK)], [TASK], "validation", max_episodes=QUICK_EPISODES)
    assert json.dumps(again[0]["episodes"]) == json.dumps(quick[0]["episodes"])


def _earliest_finish(obs):
    w = obs["workers"]  # columns: envs.routing_env.WORKER_FEATURES (1: eligible, 7: predicted finish [s])
    return int(np.argmin(np.where(w[:, 1] > 0, w[:, 7], np.inf)))


class _MaskedLeastWork:
    """SB3-style: predict(obs, state, episode_start, deterministic, action_masks)."""

    def __init__(self):
        self.calls = 0

    def predict(self, obs, state=None, episode_start=None, deterministic=True, action_masks=None):
        self.calls += 1
        assert action_masks is not None and deterministic
        return np.array([np.argmin(np.where(action_masks, obs["workers"][:, 4], np.inf))]), state


def test_a_callable_and_an_sb3_style_object_run_through_the_task_env():
    f = evaluate(_earliest_finish, TASK, max_episodes=2)
    assert f["summary"]["policy"] == "_earliest_finish" and f["summary"]["num_episodes"] == 2
    model = _MaskedLeastWork()
    m = evaluate(model, TASK.id, split="validation", max_episodes=2, label="masked-least-work")
    assert model.calls >= sum(r["num_requests"] for r in m["episodes"])  # one decision per request (warm-up too)
    assert m["summary"]["policy"] == "masked-least-work"
    assert f["summary"]["mean_ttft_s"] != m["summary"]["mean_ttft_s"]


def test_unknown_policy_kind_is_refused():
    with pytest.raises(ValueError, match="expected a PolicySpec"):
        Contender("x", 3)


@pytest.mark.parametrize("spec, match", [
    ("vertumnus-router:gamma=2", r"--policy vertumnus-router:gamma=2: vertumnus-router has no parameter 'gamma'; "
                                 r"its parameters: beta, lambda"),
    ("vertumnus-router:beta", r"expected NAME:param=value"),
    ("vertumnus-router:beta=2,beta=3", r"parameter 'beta' given twice"),
    ("no-such-router", r"unknown policy 'no-such-router'"),
    ("no-such-router:beta=2", r"unknown policy 'no-such-router'; .*known policies: .*vertumnus-router"),
    ("tuned:vertumnus-router", r"task routing/conversation-0.9-v1 has no stored tuned parameters of vertumnus-router; "
                               r"run `cpgym benchmark tune vertumnus-router --tasks routing/conversation-0.9-v1`"),
    ("tuned:nope", r"--policy tuned:nope: unknown policy 'nope'"),
    ("vertumnus-router:beta=abc", r"--policy vertumnus-router:beta=abc: beta: expected a number, got 'abc'"),
    ("fixed:cp4x10", r"--policy fixed:cp4x10: task routing/conversation-0.9-v1 is a routing task"),
    ("", r"--policy: expected a SPEC"),
    ("vertumnus:initial_composition=cp8x9", r"--policy vertumnus:initial_composition=cp8x9: initial_composition "
                                            r"'cp8x9': expected 'profile' or a composition of the 40-GPU pool"),
    ("vertumnus:profile=x", r"--policy vertumnus:profile=x: profile is a ProfileConfig and cannot be set in a SPEC"),
])
def test_spec_errors_are_one_line(spec, match, no_tuned):
    with pytest.raises(ValueError, match=match) as info:
        resolve_spec(spec, TASK)
    assert "\n" not in str(info.value)


def test_spec_forms():
    c = resolve_spec("vertumnus-router:beta=4,lambda=2.5", TASK)
    assert c.label == c.spec == "vertumnus-router:beta=4,lambda=2.5"
    assert dict(c.policy.params) == {"beta": 4.0, "lambda": 2.5}
    with pytest.raises(ValueError, match="given twice"):
        resolve_specs(["least-work", "least-work"], TASK)
    shipped = resolve_spec("shipped", TASK)  # routing: the arm-selection checkpoint, run as a router
    assert shipped.label == "shipped" and len(shipped.checkpoint_sha256) == 64


def test_tuned_parameters_become_the_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(tuned, "tuned_dir", lambda: tmp_path)
    assert reference_contender(TASK).label == "vertumnus-router (untuned)"
    (tmp_path / "routing__conversation-0.9-v1.json").write_text(json.dumps(
        {"task": TASK.id, "policies": {"vertumnus-router": {"params": {"beta": 5.0, "lambda": 3.0}, "trials": 200}}}))
    ref = reference_contender(TASK)
    assert ref.label == ref.spec == "tuned:vertumnus-router"
    assert dict(ref.policy.params) == {"beta": 5.0, "lambda": 3.0}
    assert dict(resolve_spec("tuned:vertumnus-router", TASK).policy.params) == {"beta": 5.0, "lambda": 3.0}
    res = run_benchmark([resolve_spec("tuned:vertumnus-router", TASK)], [TASK], "validation", max_episodes=1)[0]
    assert res["summary"]["reference"] == "tuned:vertumnus-router" and res["summary"]["delta_mean_ttft_pct"] == 0.0
    (tmp_path / "routing__conversation-0.9-v1.json").write_text(json.dumps({"task": "other", "policies": {}}))
    with pytest.raises(ValueError, match="routing__conversation-0.9-v1.json: expected"):
        reference_contender(TASK)


def test_untuned_default_reuses_the_reference_rows(no_tuned):
    vr = get_policy("vertumnus-router")
    res = run_benchmark([Contender("vertumnus-router", vr, spec="vertumnus-router")], [TASK], "validation",
                        max_episodes=1)[0]
    assert res["summary"]["delta_mean_ttft_pct"] == 0.0 and math.isnan(res["summary"]["ci_low"])


def test_gymnasium_entry_builds_the_tasks_split_train_by_default():
    import gymnasium as gym

    import envs
    from benchmark.capacity import task_rate_scale
    from benchmark.tasks import num_episodes

    envs.register_envs()
    env = gym.make("cpgym/Benchmark-v1", task=TASK.id, max_episodes=2)
    assert {w.metadata["split"] for w in env.unwrapped.windows} == {"train"}
    val = gym.make("cpgym/Benchmark-v1", task=TASK.id, split="validation")
    n = num_episodes(TASK, "validation", task_rate_scale(TASK))
    assert n >= 2 and [w.metadata["episode_index"] for w in val.unwrapped.windows] == list(range(n))
    assert {w.metadata["split"] for w in val.unwrapped.windows} == {"validation"}
    with pytest.raises(ValueError, match="unknown task"):
        gym.make("cpgym/Benchmark-v1", task="routing/nope-v1")


def test_an_arm_checkpoint_spec_runs_its_router(tmp_path):
    # a constant arm-selection model always picks arm (8, 4): the rows of the Vertumnus router with those parameters
    from policies.routing.arm_selection import constant_model, write_model

    write_model(tmp_path / "ck", constant_model(((1.0, 0.0), (3.0, 1.0), (8.0, 4.0)), 2),
                {"decision_window_s": 10.0, "history_s": 30.0, "prefix_memory_s": 60.0})
    (tmp_path / "ck" / "train_config.json").write_text(json.dumps({"kind": "routing", "policy_type": "vertumnus-arms"}))
    ck = resolve_spec(str(tmp_path / "ck"), TASK)
    assert ck.label == str(tmp_path / "ck") and len(ck.checkpoint_sha256) == 64
    fixed = resolve_spec("vertumnus-router:beta=8,lambda=4", TASK)
    a, b = run_benchmark([ck, fixed], [TASK], "validation", max_episodes=1)
    assert [r["mean_ttft_s"] for r in a["episodes"]] == [r["mean_ttft_s"] for r in b["episodes"]]
    with pytest.raises(ValueError, match="is a routing checkpoint"):
        resolve_spec(str(tmp_path / "ck"), get_task("reconfig/matched-phases-v1"))
    with pytest.raises(FileNotFoundError):
        resolve_spec(str(tmp_path / "missing"), TASK)


def test_fixed_composition_specs():
    mp = get_task("reconfig/matched-phases-v1")
    c = resolve_spec("fixed:cp8x2+cp4x6", mp)
    assert c.label == "fixed:cp8x2+cp4x6" and c.policy.composition == "cp8x2,cp4x6"
    assert resolve_spec("fixed:cp4x10", mp).policy.resolve_composition(mp.sim_config().pool) == "cp4x10"
    with pytest.raises(ValueError, match=r"--policy fixed:cp4x11: .*44"):
        resolve_spec("fixed:cp4x11", mp)


def test_the_env_path_and_the_heuristic_path_simulate_the_same_episode():
    # a router acting through the task's environment gives the numbers of the same router run directly
    from benchmark.capacity import task_episodes
    from benchmark.env import task_env
    from benchmark.protocol import episode_metrics, run_contender
    from policies.common.heuristic import HeuristicPolicy, run_episode

    (ep,) = task_episodes(TASK, "validation", max_episodes=1)
    env = task_env(TASK, [ep])
    result, _, _ = run_episode(env, HeuristicPolicy(get_policy("least-work").make_router, env),
                               options={"window_index": 0, "sim_seed": 0})
    through_env = episode_metrics(result, ep.metadata["measure_from_s"])
    assert {**through_env, "num_invalid_actions": 0} == run_contender(heuristic_contender("least-work", TASK), TASK, ep)


def test_the_ledger_records_test_runs_only(tmp_path):
    from benchmark.ledger import append_ledger, count_test_evaluations, read_ledger

    line = {"date": "2026-12-07T00:00:00Z", "commit": "abc", "policy": "x", "checkpoint_sha256": None, "task": TASK.id,
            "split": "test", "num_episodes": 3, "mean_ttft_s": 1.0}
    append_ledger(tmp_path / "l.jsonl", [line, line])
    with pytest.raises(ValueError, match="only test-split runs are recorded"):
        append_ledger(tmp_path / "l.jsonl", [{**line, "split": "validation"}])
    assert count_test_evaluations(read_ledger(tmp_path / "l.jsonl")) == {(TASK.id, "x", None): 2}
    (tmp_path / "l.jsonl").write_text("{\"task\": 1}\nnot json\n")
    with pytest.raises(ValueError, match=r"l.jsonl:1: not a ledger record \(missing date, commit, policy"):
        read_ledger(tmp_path / "l.jsonl")


def _ineligible_first(obs):
    return int(np.argmin(obs["workers"][:, 1]))  # column 1: eligible; an ineligible worker whenever there is one


def test_invalid_actions_are_counted_per_episode_and_summed(quick):
    r = evaluate(_ineligible_first, TASK, max_episodes=2)
    counts = [e["num_invalid_actions"] for e in r["episodes"]]
    assert all(n > 0 for n in counts) and r["summary"]["num_invalid_actions"] == sum(counts)
    lw = quick[0]  # a heuristic spec reports 0
    assert lw["summary"]["num_invalid_actions"] == 0 and {e["num_invalid_actions"] for e in lw["episodes"]} == {0}


def test_a_test_split_evaluation_from_python_is_appended_to_the_ledger(tmp_path, monkeypatch):
    from benchmark.ledger import LEDGER_FIELDS, read_ledger

    ledger = tmp_path / "ledger.jsonl"
    r = evaluate(heuristic_contender("least-work", TASK), TASK, split="test", max_episodes=1, ledger=ledger)
    (line,) = read_ledger(ledger)
    assert list(line) == list(LEDGER_FIELDS)
    assert (line["policy"], line["task"], line["split"], line["num_episodes"], line["mean_ttft_s"]) == \
        ("least-work", TASK.id, "test", 1, r["summary"]["mean_ttft_s"])
    evaluate(_earliest_finish, TASK, split="validation", max_episodes=1, ledger=ledger)
    assert len(read_ledger(ledger)) == 1  # only the test split is recorded
    monkeypatch.chdir(tmp_path)  # the default: the CLI's results/benchmark/ledger.jsonl
    evaluate(_earliest_finish, TASK, split="test", max_episodes=1)
    (line,) = read_ledger(tmp_path / "results/benchmark/ledger.jsonl")
    assert line["policy"] == "_earliest_finish" and line["checkpoint_sha256"] is None
    (tmp_path / "other.txt").write_text("not a ledger\n")
    with pytest.raises(ValueError, match="other.txt:1: not a ledger record"):
        evaluate(_earliest_finish, TASK, split="test", max_episodes=1, ledger=tmp_path / "other.txt")
    assert (tmp_path / "other.txt").read_text() == "not a ledger\n"


def test_an_env_over_the_test_split_warns_that_its_uses_are_not_logged():
    import gymnasium as gym

    import envs
    from benchmark.env import SealedSplitWarning

    envs.register_envs()
    with pytest.warns(SealedSplitWarning, match="test split is sealed.*cpgym benchmark run --split test"):
        gym.make("cpgym/Benchmark-v1", task=TASK.id, split="test", max_episodes=1)


def test_a_full_system_plans_from_the_training_history_never_from_the_episode():
    """The initial composition and the controller's first reference mix read the task's training
    episodes (``task_history``), so two episodes with very different demand start from the same
    pool; without the history (the run's own workload, outside the benchmark) they do not."""
    import functools

    from baselines.runner import build_simulator
    from benchmark.capacity import task_episodes
    from benchmark.protocol import task_capacity_cache, task_history
    from envs.workloads import transforms

    task = get_task("reconfig/matched-phases-v1")
    ep = task_episodes(task, "validation", max_episodes=1)[0]
    light = transforms.window(ep, 0.0, 60.0)
    heavy = transforms.scale_rate(light, 8.0)  # the same requests at 8x the rate
    cache = task_capacity_cache(task.id)
    history = task_history(task.id)
    train_seeds = set(task.split.seeds("train"))
    assert history.source.startswith(task.id)
    assert {int(s) for s in history.source.rsplit("episodes ", 1)[1].split(", ")} <= train_seeds

    def start(wl, hist):
        sim, _ = build_simulator("vertumnus", wl, task.sim_config(), capacity_cache=cache, history=hist)
        return sim, sim.config.pool.composition

    (sim_l, pool_l), (sim_h, pool_h) = (start(w, functools.partial(task_history, task.id)) for w in (light, heavy))
    assert pool_l == pool_h
    assert sim_l.attachments["demand_history"] is history  # resolved once, read by the controller too
    assert start(light, None)[1] != start(heavy, None)[1]  # the leak this guards against
