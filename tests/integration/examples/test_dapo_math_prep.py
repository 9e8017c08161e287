"""examples/data_preprocess/dapo_math.py: DAPO-Math-17k's hub layout (verl rows in DAPO's wording, each problem
repeated), flat rows, deduplication by normalised problem, non-English rows, re-templating, bad-row reports."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _common
import dapo_math


def hub_row(problem: str, answer: str, uid: str) -> dict:
    """A row as BytedTsinghua-SIA/DAPO-Math-17k stores it."""
    return {"data_source": "math_dapo", "ability": "MATH",
            "prompt": [{"role": "user", "content": _common.DAPO_PREFIX + problem + _common.DAPO_SUFFIX}],
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": uid}}


ROWS = [
    hub_row("Find $x$ if $2x = 6$.", "3", "u0"),
    hub_row("Find $x$ if $2x = 6$.", "3", "u0"),                 # exact repeat (the hub has ~100 of each)
    hub_row("find  $x$ if $2x = 6$. ", "3", "u0b"),              # same after normalisation
    hub_row("Compute $1+1$.", "2", "u1"),
    hub_row("Compute $1 + 1$.", "2", "u1b"),                     # different text: kept
    hub_row("求 $x$ 的值，若 $x+1=2$。", "1", "u2"),                 # Chinese: dropped
    hub_row("Find $x$ if $2x = 6$.", "4", "u3"),                 # duplicate with another answer: conflict
    {"prompt": [], "reward_model": {"ground_truth": "1"}},          # bad: no user message
    hub_row("What is $\\frac{1}{2}$ as a decimal?", "0.5", "u4") | {"reward_model": {"style": "rule"}},  # bad
]


@pytest.fixture
def hub_parquet(tmp_path):
    path = tmp_path / "dapo.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    return path


def test_dedup_language_filter_and_reports(hub_parquet, tmp_path):
    assert dapo_math.main(["--local", str(hub_parquet), "--out-dir", str(tmp_path / "o")]) == 0
    rows = pq.read_table(tmp_path / "o" / "train.parquet").to_pylist()
    assert [r["extra_info"]["index"] for r in rows] == [0, 3, 4]  # first occurrences, source row numbers
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["3", "2", "2"]
    assert [r["extra_info"]["source_index"] for r in rows] == ["u0", "u1", "u1b"]
    assert rows[0]["data_source"] == "math_dapo" and rows[0]["extra_info"]["problem"] == "Find $x$ if $2x = 6$."
    assert rows[0]["prompt"][0]["content"] == f"Find $x$ if $2x = 6$. {_common.BOXED_INSTRUCTION}"
    report = json.loads((tmp_path / "o" / "train.report.json").read_text())
    assert report["rows_read"] == 9 and report["rows_written"] == 3 and report["bad_count"] == 2
    assert report["dropped"] == {"duplicate": 2, "non_english": 1, "duplicate_conflicting_answer": 1}
    assert report["conflicts"] == [{"file": str(hub_parquet), "row": 6, "kept_row": 0, "answer": "4",
                                    "kept_answer": "3"}]
    assert [(b["row"], b["reason"]) for b in report["bad_rows"]] == [
        (7, "field 'prompt' has no non-empty user message"), (8, "field 'reward_model.ground_truth' missing")]


def test_dapo_template_round_trips_the_hub_prompt(hub_parquet, tmp_path):
    dapo_math.main(["--local", str(hub_parquet), "--out-dir", str(tmp_path), "--template", "dapo"])
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert rows[0]["prompt"][0]["content"] == ROWS[0]["prompt"][0]["content"]


def test_flat_rows_and_limit(write_jsonl, tmp_path):
    src = write_jsonl([{"prompt": "Compute $2^3$.", "solution": "8"}, {"problem": "Compute $3^2$.", "answer": 9},
                       {"problem": "Compute $2^3$.", "answer": "8"}, {"problem": "x", "answer": "1"}], "flat.jsonl")
    dapo_math.main(["--local", str(src), "--out-dir", str(tmp_path / "a"), "--template", "raw"])
    rows = pq.read_table(tmp_path / "a" / "train.parquet").to_pylist()
    assert [(r["prompt"][0]["content"], r["reward_model"]["ground_truth"]) for r in rows] == [
        ("Compute $2^3$.", "8"), ("Compute $3^2$.", "9"), ("x", "1")]
    assert json.loads((tmp_path / "a" / "train.report.json").read_text())["template_not_found"] == 4
    dapo_math.main(["--local", str(src), "--out-dir", str(tmp_path / "b"), "--limit", "2"])
    assert pq.read_table(tmp_path / "b" / "train.parquet").num_rows == 2


def test_strict_and_hub_defaults(hub_parquet, tmp_path, monkeypatch):
    assert dapo_math.main(["--local", str(hub_parquet), "--out-dir", str(tmp_path / "s"), "--strict"]) == 2
    assert not (tmp_path / "s" / "train.parquet").exists()
    import datasets

    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config=None, split=None: calls.append(
        (name, config, split)) or ROWS[:4])
    assert dapo_math.main(["--out-dir", str(tmp_path / "h")]) == 0
    assert calls == [("BytedTsinghua-SIA/DAPO-Math-17k", None, "train")]


@pytest.mark.parametrize("text,expected", [("What is 2+2?", False), ("Café au lait — naïve π", False), ("求值", True),
                                           ("テスト", True), ("한국어", True), ("（１）", True)])
def test_non_english_detection(text, expected):
    assert dapo_math.is_non_english(text) is expected


def test_normalisation_is_cosmetic_only():
    assert dapo_math.normalise_problem("  Find  X\n") == dapo_math.normalise_problem("find x")
    assert dapo_math.normalise_problem("x+1") != dapo_math.normalise_problem("x + 1")
