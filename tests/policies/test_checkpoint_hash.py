"""The benchmark's ``checkpoint_sha256`` (``policies.common.checkpoint_hash.policy_sha256``): the same
weights give the same hash whatever else the model zip holds (its ``data`` member's start time and
buffers, the members' write times), other weights or observation statistics another; the committed
entries' hashes, from before it (the model file's SHA-256), still validate."""

from __future__ import annotations

import io
import shutil
import zipfile

import pytest

from envs.workloads import WorkloadSource
from policies.common.checkpoint_hash import file_sha256, policy_sha256

SHIPPED_RECONFIG = "policies/checkpoints/reconfig_target"
SHIPPED_ARMS = "policies/checkpoints/routing_vertumnus_arms/arm_model.json"


def _train(out):
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="phases"), workload_seeds=(0,), episode_window_s=100.0,
                              total_timesteps=16, n_steps=16, batch_size=16, n_epochs=1, wandb_mode="disabled",
                              capacity_features=False)
    train_reconfig(cfg, out, log=lambda s: None)
    return out / "model.zip"


@pytest.mark.slow  # ~5 s: two PPO trainings
def test_two_identical_trainings_give_one_policy_hash(tmp_path):
    a, b = _train(tmp_path / "a"), _train(tmp_path / "b")
    assert policy_sha256(a) == policy_sha256(b)
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        assert za.read("policy.pth") == zb.read("policy.pth")
        assert za.read("data") != zb.read("data")  # the start time: the file hash differed
    assert file_sha256(a) != file_sha256(b)


def _rewrite(src, dst, change=None):
    """``src``'s members into ``dst`` with new write times; ``change(name, bytes) -> bytes``."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            data = z.read(info.filename)
            out.writestr(zipfile.ZipInfo(info.filename, (2030, 1, 2, 3, 4, 6)), change(info.filename, data)
                         if change else data)


def test_only_the_parameters_and_observation_statistics_count(tmp_path):
    import torch

    shipped = f"{SHIPPED_RECONFIG}/model.zip"
    (tmp_path / "same").mkdir()
    _rewrite(shipped, tmp_path / "same" / "model.zip",
             lambda n, d: d.replace(b'"start_time"', b'"start_time" ') if n == "data" else d)
    shutil.copy(f"{SHIPPED_RECONFIG}/vecnormalize.pkl", tmp_path / "same" / "vecnormalize.pkl")
    assert file_sha256(tmp_path / "same" / "model.zip") != file_sha256(shipped)
    assert policy_sha256(tmp_path / "same" / "model.zip") == policy_sha256(shipped)

    def nudge(name, data):
        if name != "policy.pth":
            return data
        state = torch.load(io.BytesIO(data), weights_only=True)
        key = sorted(state)[0]
        state[key] = state[key] + 1e-3
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()

    (tmp_path / "other").mkdir()
    _rewrite(shipped, tmp_path / "other" / "model.zip", nudge)
    shutil.copy(f"{SHIPPED_RECONFIG}/vecnormalize.pkl", tmp_path / "other" / "vecnormalize.pkl")
    assert policy_sha256(tmp_path / "other" / "model.zip") != policy_sha256(shipped)
    (tmp_path / "same" / "vecnormalize.pkl").unlink()  # the observation statistics are part of the policy
    assert policy_sha256(tmp_path / "same" / "model.zip") != policy_sha256(shipped)


def test_a_json_model_is_hashed_by_its_bytes_and_a_zip_without_a_policy_is_refused(tmp_path):
    assert policy_sha256(SHIPPED_ARMS) == file_sha256(SHIPPED_ARMS)
    with zipfile.ZipFile(tmp_path / "m.zip", "w") as z:
        z.writestr("data", "{}")
    with pytest.raises(ValueError, match=r"m.zip: no policy.pth member"):
        policy_sha256(tmp_path / "m.zip")


def test_committed_entries_carry_the_policy_hash():
    from benchmark.leaderboard import read_entry
    from benchmark.tasks import get_task
    from experiments.benchmark_specs import resolve_spec

    for task_id in ("reconfig/matched-phases-v1", "reconfig/production-day-v1", "routing/conversation-0.9-v1"):
        task = get_task(task_id)
        (entry,) = [e for e in read_entry(f"results/benchmark/entries/{task_id.replace('/', '__')}.json.gz")
                    if e["spec"] == "shipped"]
        assert resolve_spec("shipped", task).checkpoint_sha256 == entry["checkpoint_sha256"]
    assert policy_sha256(f"{SHIPPED_RECONFIG}/model.zip") == resolve_spec(
        "shipped", get_task("reconfig/matched-phases-v1")).checkpoint_sha256
