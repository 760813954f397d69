"""Reconfiguration tasks' reference points (benchmark/references.py): the best fixed composition
stored with the tuned heuristics and run as ``tuned:fixed``."""

import json

import numpy as np
import pytest

from benchmark import references
from benchmark.specs import heuristic_contender
from benchmark.tasks import get_task
from benchmark.tuned import load_tuned
from tests.interrupt import patch_everywhere


def test_candidates_are_every_placeable_composition_over_cp_2_4_8():
    comps = references.fixed_candidates(get_task("reconfig/production-day-v1"))
    assert len(comps) == 36 == len(set(comps))
    assert comps[0] == "cp8x5" and comps[-1] == "cp2x20"


def test_a_routing_task_has_no_fixed_composition_reference():
    with pytest.raises(ValueError, match="reconfiguration task's reference"):
        references.choose_fixed(get_task("routing/conversation-0.9-v1"))


@pytest.mark.slow  # ~9 s: 36 compositions x 3 training episodes
def test_choose_fixed_picks_the_lowest_training_score_and_stores_it(tmp_path, monkeypatch):
    task = get_task("reconfig/matched-phases-v1")
    seen = []

    def fake_best(episodes, sim_config, candidates, router):
        seen.append([e.metadata["split"] for e in episodes])
        scores = [float(i % 7) + 0.5 for i in range(len(candidates))]
        return candidates[scores.index(min(scores))], scores

    patch_everywhere(monkeypatch, references, "best_fixed_composition", fake_best)
    entry = references.choose_fixed(task, num_episodes=2)
    assert seen == [["train", "train"]]
    assert entry["params"]["composition"] == references.fixed_candidates(task)[0] and entry["train_mean_ttft_s"] == 0.5
    path = references.store_tuned_entry(task, "fixed", entry, tmp_path)
    references.store_tuned_entry(task, "vertumnus-router", {"params": {"beta": 2.0}}, tmp_path)
    doc = json.loads(path.read_text())
    assert set(doc["policies"]) == {"fixed", "vertumnus-router"} and doc["task"] == task.id
    assert load_tuned(task, "fixed", tmp_path) == {"composition": entry["params"]["composition"]}


def test_tuned_fixed_runs_the_stored_composition_without_reconfiguration(tmp_path, monkeypatch):
    task = get_task("reconfig/matched-phases-v1")
    references.store_tuned_entry(task, "fixed", {"params": {"composition": "cp8x2,cp4x6"}}, tmp_path)
    import benchmark.tuned as tuned

    patch_everywhere(monkeypatch, tuned, "tuned_dir", lambda: tmp_path)
    c = heuristic_contender("tuned:fixed", task)
    assert c.label == "tuned:fixed" and c.policy.composition == "cp8x2,cp4x6" and c.policy.make_attachments() == []
    other = get_task("reconfig/production-day-v1")
    with pytest.raises(ValueError, match="has no stored best fixed composition; run `cpgym benchmark tune fixed"):
        heuristic_contender("tuned:fixed", other)


# ------------------------------------------------------------------------------------------
# the hindsight oracles as leaderboard entries

#: A few candidates (the task's 36 take ~15 CPU-s per matched-phases episode).
FEW = ["cp8x5", "cp4x9,cp2x2", "cp4x6,cp2x8"]


def test_oracle_specs_resolve_only_on_reconfiguration_tasks():
    from benchmark.specs import EpisodeRunner
    from experiments.benchmark_specs import resolve_spec

    task = get_task("reconfig/matched-phases-v1")
    for name in references.ORACLES:
        c = resolve_spec(f"oracle:{name}", task)
        assert c.label == c.spec == f"oracle:{name}" and isinstance(c.policy, EpisodeRunner)
    with pytest.raises(ValueError, match=r"^--policy oracle:hindsight: unknown oracle 'hindsight'; oracles: "
                                         r"oracle:best-fixed, oracle:per-phase, oracle:phase-schedule$"):
        resolve_spec("oracle:hindsight", task)
    with pytest.raises(ValueError, match="reference points of the reconfiguration tasks, not of routing/"):
        resolve_spec("oracle:per-phase", get_task("routing/conversation-0.9-v1"))


def test_oracle_results_match_the_fixed_composition_table():
    """The runner's two results agree with ``fixed_and_oracle_rows`` (whole-episode means of each
    fixed pool; the request-weighted per-phase minimum), and the per-phase oracle is never behind."""
    from baselines.fixed_compositions import fixed_and_oracle_rows
    from benchmark.capacity import task_episodes
    from benchmark.protocol import episode_metrics

    task = get_task("reconfig/matched-phases-v1")
    ep = task_episodes(task, "validation", max_episodes=1)[0]
    res = references.oracle_results(ep, task.sim_config(), FEW)
    table = fixed_and_oracle_rows([ep], task.sim_config(), FEW, FEW[0])[0]
    best, phased = (episode_metrics(res[k], 0.0) for k in ("best-fixed", "per-phase"))
    assert best["mean_ttft_s"] == pytest.approx(table["best_fixed_hindsight_mean_ttft_s"], rel=1e-12)
    assert phased["mean_ttft_s"] == pytest.approx(table["oracle_mean_ttft_s"], rel=1e-12)
    assert phased["mean_ttft_s"] <= best["mean_ttft_s"] and best["num_requests"] == phased["num_requests"] == ep.num_requests
    assert res["per-phase"].extras["oracle_compositions"] == table["oracle_schedule"]
    assert set(res["best-fixed"].records) == set(references.ORACLE_RECORD_KEYS)
    again = references.oracle_results(ep, task.sim_config(), FEW)
    assert set(again) == set(res) and all(again[k] is res[k] for k in res)  # memoised: the second oracle is free


@pytest.mark.slow
def test_the_phase_schedule_oracle_pays_its_moves_and_is_never_behind_the_best_fixed():
    """``oracle:phase-schedule`` through the runner (the task's decision window): it reuses the
    memoised fixed runs, is never behind the episode's best fixed composition, and its result
    has the records the protocol reads and one composition per phase."""
    from benchmark.capacity import task_episodes
    from benchmark.protocol import episode_metrics

    task = get_task("reconfig/matched-phases-v1")
    ep = task_episodes(task, "validation", max_episodes=1)[0]
    res = references.oracle_results(ep, task.sim_config(), FEW, decision_window_s=task.decision_window_s)
    sched, best, free = (episode_metrics(res[k], 0.0) for k in ("phase-schedule", "best-fixed", "per-phase"))
    assert sched["mean_ttft_s"] <= best["mean_ttft_s"] and sched["num_requests"] == ep.num_requests
    assert set(res["phase-schedule"].records) == set(references.ORACLE_RECORD_KEYS)
    num_phases = len(ep.metadata["phase_boundaries_s"]) - 1
    assert len(res["phase-schedule"].extras["oracle_compositions"]) == num_phases
    assert references.oracle_results(ep, task.sim_config(), FEW)["best-fixed"] is res["best-fixed"]
    assert free["mean_ttft_s"] <= best["mean_ttft_s"]


@pytest.mark.slow
def test_oracle_rows_are_the_same_in_one_process_and_on_a_pool(monkeypatch):
    from benchmark.protocol import run_benchmark
    from benchmark.specs import heuristic_contender

    task = get_task("reconfig/matched-phases-v1")
    monkeypatch.setattr(references, "fixed_candidates", lambda t: list(FEW))
    cs = [heuristic_contender("oracle:best-fixed", task), heuristic_contender("oracle:per-phase", task)]
    one = run_benchmark(cs, [task], "validation", max_episodes=1)
    pool = run_benchmark(cs, [task], "validation", max_episodes=1, jobs=2)
    def rows(res):  # as JSON: one episode's interval is NaN (NaN != NaN)
        return json.dumps([(r["summary"], r["episodes"]) for r in res])

    assert rows(one) == rows(pool)
    assert one[1]["summary"]["mean_ttft_s"] <= one[0]["summary"]["mean_ttft_s"]


def test_leaderboard_marks_the_oracles_not_attainable():
    from benchmark.leaderboard import leaderboard_markdown, make_entry

    def entry(label, mean, delta):
        summary = {"task": "reconfig/matched-phases-v1", "policy": label, "split": "test", "num_episodes": 2,
                   "mean_ttft_s": mean, "p90_ttft_s": 1.0, "p99_ttft_s": 2.0, "slo_attainment_token_weighted": 0.99,
                   "reference": "tuned:vertumnus", "delta_mean_ttft_pct": delta, "ci_low": delta - 1,
                   "ci_high": delta + 1, "overloaded": False}
        return make_entry(summary, [], label, None, None, "abc", "cpgym benchmark run")

    md = leaderboard_markdown([entry("oracle:per-phase", 0.40, -9.0), entry("tuned:fixed", 0.44, 0.5)], [])
    assert "| oracle:per-phase (hindsight, not attainable) | 2 | 0.400 |" in md
    assert "| tuned:fixed | 2 | 0.440 |" in md and "tuned:fixed (hindsight" not in md
    assert "| oracle:per-phase (hindsight, not attainable) | 1 | 0.910 |" in md  # the summary table too
    assert "* **oracle:per-phase**: hindsight oracle, **not attainable**" in md


def test_oracle_memo_is_keyed_by_the_workload_contents():
    """Two workloads of one name and seed but different requests never share oracle results."""
    from envs.sim import SimConfig
    from envs.sim.pool import PoolConfig
    from envs.workloads.production_day import production_day

    cfg = SimConfig(pool=PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp2x4", supported_degrees=(2, 4, 8)))
    a = production_day(duration_s=24.0, peak_rate_rps=6.0, seed=0)
    b = production_day(duration_s=24.0, peak_rate_rps=6.0, seed=0, long_fraction_range=(0.6, 0.7))
    assert (a.name, a.source) == (b.name, b.source) and a.num_requests == b.num_requests
    ra, rb = (references.oracle_results(w, cfg, ["cp2x4", "cp4x2"]) for w in (a, b))
    assert ra["best-fixed"] is not rb["best-fixed"]
    assert not np.array_equal(ra["best-fixed"].records["ttft_s"], rb["best-fixed"].records["ttft_s"], equal_nan=True)
    assert references.oracle_results(a, cfg, ["cp2x4", "cp4x2"])["best-fixed"] is ra["best-fixed"]
