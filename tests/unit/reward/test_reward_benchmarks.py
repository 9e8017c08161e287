"""Every ground truth of the real benchmark files, written as ``\\boxed{answer}``, scores 1 (also through
math-verify alone, bypassing the fast path); a wrong number scores 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from verl_ext.reward.extract import extract_answer
from verl_ext.reward.math_score import compute_score, math_verify_equal

# The project's shared/ sits beside the checkout (../shared), in CI too; VERL_EXT_SHARED overrides.
SHARED = Path(os.environ.get("VERL_EXT_SHARED") or Path(__file__).resolve().parents[3].parent / "shared")
BENCH_DIR = SHARED / "data" / "benchmarks"
FILES = ("math500", "aime24", "aime25")


def _rows(name: str) -> list[dict]:
    path = BENCH_DIR / f"{name}.jsonl"
    if not path.exists():
        pytest.skip(f"benchmark file {path} not present")
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _response(answer: object) -> str:
    return "Let me think step by step.\nTherefore the final answer is $\\boxed{" + str(answer) + "}$."


@pytest.mark.parametrize("name", FILES)
def test_boxed_ground_truth_scores_one(name: str) -> None:
    failures = []
    for i, row in enumerate(_rows(name)):
        response = _response(row["answer"])
        out = compute_score(name, response, row["answer"])
        if out["score"] != 1.0:
            failures.append((i, row["answer"], out))
            continue
        pred, _ = extract_answer(response)
        if not math_verify_equal(pred, str(row["answer"])):
            failures.append((i, row["answer"], "math-verify alone disagrees"))
    assert failures == []


@pytest.mark.parametrize("name", ("aime24", "aime25"))
def test_wrong_number_scores_zero(name: str) -> None:
    for row in _rows(name):
        wrong = int(row["answer"]) + 1
        assert compute_score(name, _response(wrong), row["answer"])["score"] == 0.0
        assert compute_score(name, f"Answer: {wrong}", row["answer"], format="dapo")["score"] == -1.0


def test_wrong_answers_score_zero_on_math500_sample() -> None:
    rows = _rows("math500")[:60]
    for row in rows:
        assert compute_score("math500", _response("123456.789"), row["answer"])["score"] == 0.0


@pytest.mark.parametrize("name", FILES)
def test_guard_never_refuses_a_real_ground_truth(name: str) -> None:
    from verl_ext.reward.math_score import is_risky

    assert [row["answer"] for row in _rows(name) if is_risky(str(row["answer"]))] == []
