"""The benchmark CLI and its summaries."""

import json
import re

import pytest
import yaml

from verl_ext.sim import bench
from verl_ext.sim.report import mean_ci


def test_mean_ci():
    assert mean_ci([2.0]) == (2.0, 2.0, 2.0)
    mean, low, high = mean_ci([1.0, 3.0])
    assert mean == 2.0 and low == pytest.approx(2.0 - 12.706) and high == pytest.approx(2.0 + 12.706)


def test_cli_prints_table_and_writes_plot_and_json(tmp_path, capsys):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "tiny", "description": "test",
        "prompts": {"n_train": 200, "n_test": 100},
        "train": {"batch_size": 8, "n": 4, "budget_rollouts": 8 * 4 * 10, "target_accuracy": 0.99},
        "pool": {"max_pool_size": 300, "reinsertion": {"trigger": "always"}},
    }))
    png, js = tmp_path / "plot.png", tmp_path / "runs.json"
    assert bench.main(["--scenario", str(scenario), "--strategies", "uniform,heapa", "--seeds", "2",
                       "--out", str(png), "--json", str(js), "--quiet"]) == 0
    out = re.sub(r" +", " ", capsys.readouterr().out)  # tabulate pads columns: compare the cells
    assert "scenario 'tiny'" in out and "| uniform | >" in out and "| heapa |" in out  # 0.99 never reached
    assert "0/2" in out
    runs = json.loads(js.read_text())
    assert [r["strategy"] for r in runs] == ["uniform", "uniform", "heapa", "heapa"]
    assert {r["scenario"] for r in runs} == {"tiny"}  # what verl_ext.sim.paired groups by
    pytest.importorskip("matplotlib")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_rejects_unknown_strategies():
    with pytest.raises(SystemExit):
        bench.parse_args(["--strategies", "uniform,nope"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--seeds", "0"])
