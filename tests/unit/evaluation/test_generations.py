"""The generations file schema: both line shapes, merging, ground-truth matching, errors naming file/line/field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_ext.evaluation.generations import (GenerationsError, attach_ground_truth, load_eval_data,
                                             read_generations, write_generations)


def write_lines(path, objs):
    path.write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n", encoding="utf-8")
    return path


def eval_rows(path, rows):
    pq.write_table(pa.Table.from_pylist([
        {"data_source": ds, "prompt": [{"role": "user", "content": f"q{idx}"}], "ability": "math",
         "reward_model": {"style": "rule", "ground_truth": gt}, "extra_info": {"index": idx}}
        for ds, idx, gt in rows]), path)
    return path


def test_grouped_and_per_response_lines_merge_in_order(tmp_path):
    f = write_lines(tmp_path / "g.jsonl", [
        {"data_source": "aime24", "index": 7, "responses": ["a", "b"], "ground_truth": "025"},
        {"data_source": "aime24", "index": "7", "response": "c"},
        {"data_source": "math500", "index": 0, "response": "x", "ground_truth": "1"},
        "",
    ])
    problems = read_generations(f)
    assert [p.key for p in problems] == [("aime24", "7"), ("math500", "0")]
    assert problems[0].responses == ["a", "b", "c"] and problems[0].ground_truth == "025"


@pytest.mark.parametrize("obj,field", [
    ({"index": 1, "response": "x"}, "data_source"),
    ({"data_source": "a", "response": "x"}, "index"),
    ({"data_source": "a", "index": 1.5, "response": "x"}, "index"),
    ({"data_source": "a", "index": 1}, "responses"),
    ({"data_source": "a", "index": 1, "responses": ["x", 3]}, "responses"),
    ({"data_source": "a", "index": 1, "response": "x", "ground_truth": [1]}, "ground_truth"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, obj, field):
    f = write_lines(tmp_path / "g.jsonl", [{"data_source": "a", "index": 0, "response": "ok"}, obj])
    with pytest.raises(GenerationsError, match=rf"g\.jsonl row 1 \(line 2\): .*'?{field}"):
        read_generations(f)


def test_invalid_json_and_conflicting_ground_truth(tmp_path):
    with pytest.raises(GenerationsError, match=r"row 0 \(line 1\): invalid JSON"):
        read_generations(write_lines(tmp_path / "a.jsonl", ["{oops"]))
    f = write_lines(tmp_path / "b.jsonl", [{"data_source": "a", "index": 0, "response": "x", "ground_truth": "1"},
                                           {"data_source": "a", "index": 0, "response": "y", "ground_truth": "2"}])
    with pytest.raises(GenerationsError, match=r"\(line 2\): ground_truth '2' differs"):
        read_generations(f)
    with pytest.raises(GenerationsError, match="no generations"):
        read_generations(write_lines(tmp_path / "c.jsonl", [""]))


def test_ground_truth_from_eval_data(tmp_path):
    data = load_eval_data(eval_rows(tmp_path / "d.parquet", [("aime24", 7, "025"), ("aime24", 8, "100")]))
    problems = read_generations(write_lines(tmp_path / "g.jsonl", [{"data_source": "aime24", "index": 7,
                                                                      "responses": ["\\boxed{25}"]}]))
    attach_ground_truth(problems, data)
    assert problems[0].ground_truth == "025" and problems[0].extra_info == {"index": 7}
    missing = read_generations(write_lines(tmp_path / "h.jsonl", [{"data_source": "aime24", "index": 99,
                                                                     "response": "x"}]))
    with pytest.raises(GenerationsError, match=r"h\.jsonl row 0 \(line 1\): problem \('aime24', '99'\) has no"):
        attach_ground_truth(missing, data)
    clash = read_generations(write_lines(tmp_path / "i.jsonl", [{"data_source": "aime24", "index": 7,
                                                                   "response": "x", "ground_truth": "25"}]))
    with pytest.raises(GenerationsError, match="differs from the evaluation data's '025'"):
        attach_ground_truth(clash, data)


def test_eval_data_errors_name_the_row(tmp_path):
    dup = eval_rows(tmp_path / "dup.parquet", [("a", 1, "x"), ("a", 1, "y")])
    with pytest.raises(GenerationsError, match=r"dup\.parquet row 1: duplicate"):
        load_eval_data(dup)
    path = tmp_path / "noidx.parquet"
    pq.write_table(pa.Table.from_pylist([{"data_source": "a", "prompt": "q", "reward_model": {"ground_truth": "1"},
                                          "extra_info": {"split": "test"}}]), path)
    with pytest.raises(GenerationsError, match=r"noidx\.parquet row 0: field 'extra_info.index' missing"):
        load_eval_data(path)


def test_write_then_read_round_trips(tmp_path):
    problems = read_generations(write_lines(tmp_path / "g.jsonl", [
        {"data_source": "a", "index": 0, "responses": ["r1", "r2"], "ground_truth": "5", "prompt": "q"}]))
    write_generations(problems, tmp_path / "out.jsonl")
    again = read_generations(tmp_path / "out.jsonl")
    assert [(p.key, p.responses, p.ground_truth, p.prompt) for p in again] == [(("a", "0"), ["r1", "r2"], "5", "q")]
