"""``cpgym dynamic`` end to end on a short phases workload (JSON output and the plot)."""

import argparse
import json

from experiments.commands import dynamic


def test_dynamic_json_and_plot(tmp_path, capsys):
    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    png = tmp_path / "dyn.png"
    args = p.parse_args(["--num-phases", "2", "--phase-duration-s", "60", "--rate-scale", "0.3", "--window-s", "10",
                         "--compositions", "cp4x10;cp2x20", "--initial", "cp2x20", "--format", "json", "--plot", str(png)])
    assert dynamic.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["policies"]] == ["vertumnus-adaptive", "fixed cp4x10", "fixed cp2x20"]
    assert all(len(r["phase_mean_ttft_s"]) == 2 for r in out["policies"])
    assert [ph["kind"] for ph in out["phases"]] == ["short", "long"]
    assert out["best_fixed_composition"] in ("cp4x10", "cp2x20")
    for o in out["operations"]:
        assert o["kind"] in ("split", "merge") and o["switch_s"] == 0.5 and o["drain_s"] >= 0
    assert png.stat().st_size > 10_000


def test_dynamic_rejects_bad_rate_scale():
    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    try:
        dynamic.run(p.parse_args(["--rate-scale", "0"]))
    except ValueError as exc:
        assert "--rate-scale" in str(exc)
    else:
        raise AssertionError("expected ValueError")
