"""`python -m verl_ext.evaluation levels`: accuracy per extra_info group, and runs paired by seed."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from verl_ext.evaluation import levels
from verl_ext.evaluation.cli import main
from verl_ext.evaluation.generations import GenerationsError, load_eval_data

LEVEL = {0: "easy", 1: "easy", 2: "hard", 3: "hard"}


def write_data(path, field="level"):
    rows = [{"data_source": "arith", "prompt": [{"role": "user", "content": f"q{i}"}],
             "reward_model": {"ground_truth": str(i)}, "extra_info": {"index": i, field: LEVEL[i]}}
            for i in LEVEL]
    pd.DataFrame(rows).to_parquet(path)
    return path


def write_run(folder, correct):
    """``correct``: per problem index, its list of 0/1 scores."""
    folder.mkdir(parents=True)
    with open(folder / "scored.jsonl", "w") as f:
        for i, c in correct.items():
            f.write(json.dumps({"data_source": "arith", "index": str(i), "correct": c}) + "\n")
    return folder


def test_groups_are_averaged_per_run_and_paired_by_seed(tmp_path):
    data = write_data(tmp_path / "val.parquet")
    groups = levels.group_of(load_eval_data([data]), "level")
    runs = [
        levels.read_run(write_run(tmp_path / "base_s0", {0: [1, 1], 1: [1, 0], 2: [0, 0], 3: [0, 1]}), groups),
        levels.read_run(write_run(tmp_path / "base_s1", {0: [1, 0], 1: [0, 0], 2: [0, 0], 3: [0, 0]}), groups),
        levels.read_run(write_run(tmp_path / "new_s0", {0: [1, 1], 1: [1, 1], 2: [0, 0], 3: [0, 0]}), groups),
        levels.read_run(write_run(tmp_path / "new_s1", {0: [1, 1], 1: [0, 0], 2: [1, 0], 3: [0, 0]}), groups),
        levels.read_run(write_run(tmp_path / "unpaired", {0: [1], 1: [1], 2: [1], 3: [1]}), groups),
    ]
    assert runs[0].accuracy == {"easy": 0.75, "hard": 0.25} and runs[0].counts == {"easy": 2, "hard": 2}
    assert runs[0].overall == pytest.approx(0.5) and runs[4].method_seed is None
    diffs = levels.paired(runs, "base")
    assert set(diffs) == {"new"}
    # easy: s0 +0.25, s1 +0.25; hard: s0 -0.25, s1 +0.25; all: 0.0 and +0.25
    assert diffs["new"]["easy"] == pytest.approx((0.25, 0.0, 2))
    assert diffs["new"]["hard"][0] == pytest.approx(0.0) and diffs["new"]["hard"][1] > 0.3
    assert diffs["new"]["all"][0] == pytest.approx(0.125)


def test_cli_prints_both_tables(tmp_path, capsys):
    data = write_data(tmp_path / "val.parquet")
    write_run(tmp_path / "a_s3", {0: [1], 1: [1], 2: [0], 3: [0]})
    write_run(tmp_path / "b_s3", {0: [1], 1: [0], 2: [1], 3: [1]})
    assert main(["levels", str(tmp_path / "a_s3"), str(tmp_path / "b_s3"), "--data", str(data),
                 "--baseline", "a", "--out", str(tmp_path / "levels.md")]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "levels.md").read_text() == printed
    out = re.sub(r" +", " ", printed)
    assert "| a_s3 | 50.0 | 100.0 | 0.0 |" in out
    assert "| b | 1 | +25.0 ± 0.0 | -50.0 ± 0.0 | +100.0 ± 0.0 |" in out


def test_errors_name_the_file_and_field(tmp_path):
    data = load_eval_data([write_data(tmp_path / "val.parquet", field="other")])
    with pytest.raises(GenerationsError, match=r"val.parquet.*extra_info.level"):
        levels.group_of(data, "level")
    groups = levels.group_of(data, "other")
    with pytest.raises(FileNotFoundError, match="no scored.jsonl"):
        levels.read_run(tmp_path / "nowhere", groups)
    run = write_run(tmp_path / "x_s0", {0: [1], 9: [1]})
    with pytest.raises(GenerationsError, match=r"scored.jsonl:2: problem \('arith', '9'\)"):
        levels.read_run(run, groups)
