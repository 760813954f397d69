"""benchmark/tuning.py: search spaces, bound detection and widening, determinism (local vs Ray),
the store format, and that tuning never simulates the test split."""

from __future__ import annotations

import argparse
import functools
import math

import pytest

from baselines.registry import get_policy
from benchmark import protocol, tuning
from benchmark.tasks import get_task
from benchmark.tuning import TUNABLE, ParamRange, bound_status, check_space, split_score, tune

TASK = "routing/conversation-0.9-v1"  # has a stored capacity on every branch (benchmark/capacity.json)


# ------------------------------------------------------------------------------------------
# search spaces


@pytest.mark.parametrize("name", sorted(TUNABLE))
def test_search_space_inside_the_routers_limits(name):
    space = TUNABLE[name]
    check_space(name)  # every corner builds a router (the parameter dataclass validates)
    spec = get_policy(name)
    for p, r in space.items():
        assert r.source, f"{name}.{p}: no source for the default/limits"
        assert r.low <= spec.params[p] <= r.high, f"{name}.{p}: default {spec.params[p]} outside [{r.low}, {r.high}]"
        if r.log:
            assert r.high / r.low >= 100, f"{name}.{p}: a log range should span >= 2 decades"
    # just past a float range's positive hard limit the router refuses: the limits are the router's
    # (balance_abs_threshold's limit 1 is the log scale's; the router takes 0)
    for p, r in space.items():
        if r.hard_low is not None and r.hard_low > 0 and not r.integer:
            with pytest.raises(ValueError):
                spec.with_params(**{p: r.hard_low - 0.01}).make_router()


def test_vertumnus_space_follows_the_paper():
    beta, lam = TUNABLE["vertumnus-router"]["beta"], TUNABLE["vertumnus-router"]["lambda"]
    assert (beta.low, beta.hard_low, lam.hard_low) == (1.0, 1.0, 0.0)  # paper §5: beta >= 1, lambda >= 0
    assert lam.log and lam.low <= 1e-3 and lam.high >= 1e3 and beta.high >= 1e3


def test_invalid_ranges_are_refused():
    with pytest.raises(ValueError, match="low > 0"):
        ParamRange(0.0, 1.0).check("x")
    with pytest.raises(ValueError, match="outside the limits"):
        ParamRange(0.5, 10.0, hard_low=1.0).check("x")
    with pytest.raises(ValueError, match="no tunable parameters"):
        tuning.search_space("least-work")
    with pytest.raises(ValueError, match="not a parameter"):
        check_space("dynamo-kv", {"beta": ParamRange(1.0, 10.0)})


# ------------------------------------------------------------------------------------------
# bounds and widening on a cheap synthetic objective


def _bowl(target: dict, params: dict, split: str) -> float:
    """Squared log distance to ``target`` (validation = train + a constant)."""
    return sum((math.log10(params[p]) - math.log10(t)) ** 2 for p, t in target.items()) + (split == "validation")


def test_bound_status_and_widened_ranges():
    r = ParamRange(1e-3, 1e3, hard_low=0.0)
    assert bound_status({"x": 9e2}, {"x": r}) == (["x:high"], [])
    assert bound_status({"x": 1.0}, {"x": r}) == ([], [])
    assert r.widened("high")[:2] == (1e-3, 1e4) and r.widened("low")[:2] == (1e-4, 1e3)
    beta = ParamRange(1.0, 1e3, hard_low=1.0)
    assert bound_status({"b": 1.0}, {"b": beta}) == ([], ["b:low"])  # the validity limit: recorded, not widened
    assert beta.widened("low").low == 1.0
    lin = ParamRange(0.0, 1.0, log=False, hard_low=0.0, hard_high=1.0)
    assert bound_status({"c": 0.99}, {"c": lin}) == ([], ["c:high"])
    assert ParamRange(1, 64, integer=True, hard_low=1).widened("high")[:2] == (1, 640)


def test_choice_on_a_bound_widens_the_range_and_repeats():
    space = {"x": ParamRange(1e-3, 1e3, hard_low=0.0), "y": ParamRange(1.0, 1e3, hard_low=1.0)}
    score = functools.partial(_bowl, {"x": 3e4, "y": 0.5})  # x past the top; y below its hard limit 1
    res = tune(score, space, {"x": 1.0, "y": 3.0}, num_trials=40, seed=3, top_k=3, max_rounds=4)
    rounds = res["rounds"]
    assert rounds[0]["on_bound"] == ["x:high"]
    assert rounds[1]["ranges"]["x"] == [1e-3, 1e4] and rounds[2]["ranges"]["x"] == [1e-3, 1e5]
    assert all(r["ranges"]["y"] == [1.0, 1e3] for r in rounds)  # at its hard limit: never widened
    assert rounds[-1]["on_bound"] == [] and rounds[-1]["at_limit"] == ["y:low"] and len(rounds) == 3
    assert 1e4 <= res["params"]["x"] <= 1e5 and res["params"]["y"] < 1.1
    assert res["num_trials"] == 40 * len(rounds) and len(res["records"]) == len(rounds)
    assert all(len(r["trials"]) == 40 for r in res["records"])
    # the choice is the best validation score among the top-k training trials
    last = res["records"][-1]["validation"]
    assert res["validation_mean_ttft_s"] == min(v["validation_mean_ttft_s"] for v in last)
    assert len(last) == 3 + 1 and last[-1]["number"] == 0  # the previous choice is a candidate too


def test_defaults_win_when_they_are_best_on_validation():
    # training prefers x near 100, validation prefers the default x = 1: the choice is the default
    def score(params, split):
        return abs(math.log10(params["x"]) - (0.0 if split == "validation" else 2.0))

    res = tune(score, {"x": ParamRange(1e-3, 1e3)}, {"x": 1.0}, num_trials=30, seed=0, top_k=3, max_rounds=1)
    assert res["params"] == {"x": 1.0} and res["validation_mean_ttft_s"] == 0.0


def test_same_seed_same_result_and_defaults_tried_first():
    space = {"x": ParamRange(1e-3, 1e3), "n": ParamRange(1, 4096, integer=True, hard_low=1)}
    score = functools.partial(_bowl, {"x": 2.0, "n": 100})
    a = tune(score, space, {"x": 1.0, "n": 64}, num_trials=24, seed=7, max_rounds=1)
    b = tune(score, space, {"x": 1.0, "n": 64}, num_trials=24, seed=7, max_rounds=1)
    c = tune(score, space, {"x": 1.0, "n": 64}, num_trials=24, seed=8, max_rounds=1)
    assert a == b and a["records"] != c["records"]
    assert a["records"][0]["trials"][0]["params"] == {"x": 1.0, "n": 64}
    assert all(isinstance(t["params"]["n"], int) for t in a["records"][0]["trials"])


@pytest.mark.expensive
def test_local_and_ray_backends_give_the_same_result():
    pytest.importorskip("ray")
    score = functools.partial(split_score, TASK, "dynamo-kv", 2)
    kw = {"num_trials": 3, "seed": 1, "top_k": 1, "max_rounds": 1, "batch_size": 2}
    space = {"overlap_score_weight": TUNABLE["dynamo-kv"]["overlap_score_weight"]}
    local = tune(score, space, {"overlap_score_weight": 1.0}, backend="local", jobs=1, **kw)
    pool = tune(score, space, {"overlap_score_weight": 1.0}, backend="local", jobs=2, **kw)
    ray = tune(score, space, {"overlap_score_weight": 1.0}, backend="ray", jobs=2, **kw)
    assert local == pool == ray


# ------------------------------------------------------------------------------------------
# the store and the search record


def test_store_round_trip_and_stable_bytes(tmp_path):
    entry = {"params": {"beta": 6.5, "lambda": 0.25}, "train_mean_ttft_s": 1.5, "validation_mean_ttft_s": 1.25,
             "num_trials": 200, "rounds": [{"ranges": {"beta": [1.0, 1e3]}, "best_params": {"beta": 6.5},
                                            "on_bound": [], "at_limit": []}], "seed": 0, "commit": "abc", "command": "x"}
    p = tuning.store_tuned(TASK, "vertumnus-router", entry, tmp_path)
    assert p.name == "routing__conversation-0.9-v1.json"
    first = p.read_bytes()
    tuning.store_tuned(TASK, "dynamo-kv", {**entry, "params": {"overlap_score_weight": 2.0}}, tmp_path)
    data = tuning.load_tuned_file(TASK, tmp_path)
    assert data["task"] == TASK and data["policies"]["vertumnus-router"] == entry
    assert sorted(data["policies"]) == ["dynamo-kv", "vertumnus-router"]
    tuning.store_tuned(TASK, "dynamo-kv", {**entry, "params": {"overlap_score_weight": 2.0}}, tmp_path)
    assert p.read_bytes() == tuning.dumps_stable(data).encode() and p.read_bytes() != first
    # tuned parameters apply to the policy
    spec = get_policy("vertumnus-router").with_params(**data["policies"]["vertumnus-router"]["params"])
    assert (spec.make_router().params.beta, spec.make_router().params.lambda_) == (6.5, 0.25)
    rec = {"task": TASK, "rounds": [{"trials": [{"number": 0, "params": {"beta": 3.0}, "train_mean_ttft_s": 1.0}]}]}
    a = tuning.write_record(tmp_path / "a" / "r.json.gz", rec).read_bytes()
    b = tuning.write_record(tmp_path / "b" / "r.json.gz", rec).read_bytes()
    assert a == b and tuning.read_record(tmp_path / "a" / "r.json.gz") == rec
    assert tuning.record_path(TASK, "R").as_posix() == "R/routing__conversation-0.9-v1.json.gz"
    tuning.store_record(TASK, "llm-d", rec, tmp_path / "c")
    tuning.store_record(TASK, "dynamo-kv", rec, tmp_path / "c")
    assert tuning.read_record(tuning.record_path(TASK, tmp_path / "c")) == \
        {"task": TASK, "policies": {"dynamo-kv": rec, "llm-d": rec}}


# ------------------------------------------------------------------------------------------
# the sealed test split


def test_tuning_never_simulates_the_test_split(monkeypatch, tmp_path):
    from experiments.commands import benchmark_tune

    splits_run, splits_cut = [], []
    real_episodes = tuning.task_episodes

    def episodes(task, split, **kw):
        splits_cut.append(split)
        return real_episodes(task, split, **kw)

    def run_policy(spec, workload, config, capacity_cache=None, history=None):
        splits_run.append(workload.metadata["split"])
        history()  # the demand history a full system would plan from: training episodes only
        return workload

    monkeypatch.setattr(tuning, "task_episodes", episodes)
    monkeypatch.setattr(protocol, "task_episodes", episodes)
    protocol.task_history.cache_clear()
    monkeypatch.setattr(tuning, "run_policy", run_policy)
    monkeypatch.setattr(tuning, "measured_summary", lambda wl, t0: {"mean_ttft_s": 1.0 + len(wl.requests) / 1e4})
    tuning._episodes.cache_clear()
    try:
        p = argparse.ArgumentParser()
        benchmark_tune.add_arguments(p)
        args = p.parse_args(["vertumnus-router", "--tasks", TASK, "--trials", "4", "--max-train-episodes", "3",
                             "--top-k", "2", "--max-rounds", "1", "--tuned-dir", str(tmp_path / "tuned"),
                             "--records-dir", str(tmp_path / "rec"), "--quiet"])
        assert benchmark_tune.run(args) == 0
    finally:
        tuning._episodes.cache_clear()
        protocol.task_history.cache_clear()
    assert set(splits_run) == {"train", "validation"} and set(splits_cut) == {"train", "validation"}
    entry = tuning.load_tuned_file(TASK, tmp_path / "tuned")["policies"]["vertumnus-router"]
    assert entry["num_trials"] == 4 and entry["num_train_episodes"] == 3 and entry["seed"] == 0
    assert entry["command"] == (f"cpgym benchmark tune vertumnus-router --tasks {TASK} --trials 4 --seed 0 "
                                "--max-train-episodes 3 --top-k 2 --max-rounds 1")
    rec = tuning.read_record(tuning.record_path(TASK, tmp_path / "rec"))["policies"]["vertumnus-router"]
    assert len(rec["rounds"][0]["trials"]) == 4 and (tmp_path / "rec" / "provenance.json").is_file()
    with pytest.raises(ValueError, match="train or validation"):
        tuning._episodes(TASK, "test", None)


def test_cli_input_errors(tmp_path):
    from experiments.commands import benchmark_tune

    p = argparse.ArgumentParser()
    benchmark_tune.add_arguments(p)
    for argv, msg in ((["least-work", "--tasks", TASK], "no tunable parameters"),
                      (["dynamo-kv", "--tasks", "routing/nope-v1"], "unknown task"),
                      (["dynamo-kv", "--tasks", TASK, "--trials", "0"], "--trials must be >= 1"),
                      (["dynamo-kv", "--tasks", TASK, "--jobs", "0"], "--jobs must be >= 1")):
        with pytest.raises(ValueError, match=msg):
            benchmark_tune.run(p.parse_args(argv))
    assert get_task(TASK).kind == "routing"


@pytest.mark.slow
def test_controller_trials_reuse_the_capacity_profiles_and_score_the_same():
    # a controller search's trials share one CapacityCache per task and process
    # (benchmark.protocol.task_capacity_cache): the second trial simulates no profile, and its
    # score is the one of a run with a new cache
    task_id = "reconfig/matched-phases-v1"
    tuning.task_capacity_cache.cache_clear()
    first = split_score(task_id, "vertumnus-adaptive", 1, {}, "train")
    cache = tuning.task_capacity_cache(task_id)
    num_profiles = cache.num_profiles_computed
    assert num_profiles > 0
    assert split_score(task_id, "vertumnus-adaptive", 1, {}, "train") == first
    assert cache.num_profiles_computed == num_profiles
    tuning.task_capacity_cache.cache_clear()
    assert split_score(task_id, "vertumnus-adaptive", 1, {}, "train") == first


def test_the_full_system_search_starts_from_the_stored_best_fixed_composition(tmp_path, monkeypatch):
    import benchmark.tuned as tuned
    from benchmark.tuned import load_tuned
    from tests.interrupt import patch_everywhere

    task = get_task("reconfig/production-day-v1")
    best = load_tuned(task, "fixed")["composition"]
    assert tuning.fixed_params(task, "vertumnus") == {"initial_composition": best.replace(",", "+")}
    assert tuning.fixed_params(task, "vertumnus-router") == {}
    spec = get_policy("vertumnus").with_params(**tuning.fixed_params(task, "vertumnus"))
    assert spec.choose_pool(task.sim_config().pool, None, None, None, None)[0].composition == best
    patch_everywhere(monkeypatch, tuned, "tuned_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match=f"run `cpgym benchmark tune fixed --tasks {task.id}` first"):
        tuning.fixed_params(task, "vertumnus")
