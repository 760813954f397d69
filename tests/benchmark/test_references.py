"""Reconfiguration tasks' reference points (benchmark/references.py): the best fixed composition
stored with the tuned heuristics and run as ``tuned:fixed``."""

import json

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
