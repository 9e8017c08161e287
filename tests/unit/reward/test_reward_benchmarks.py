"""The real benchmark files: every ground truth scores 1 (boxed, on an ``Answer:`` line, and through math-verify
alone, bypassing the fast path); mechanically generated equivalent renderings score 1 and perturbed wrong answers
score 0 (on a sample; ``python -m verl_ext.bench.reward`` runs all of them)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from verl_ext.reward import Scorer
from verl_ext.reward.variants import renderings, wrong_answers
from verl_ext.reward.verify import answers_equal

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


@pytest.fixture(scope="module")
def scorer() -> Scorer:
    s = Scorer()
    assert s.warm_up(120)
    return s


def _accs(scorer: Scorer, items: list[tuple[str, str]]) -> list[float]:
    with ThreadPoolExecutor(max_workers=8) as ex:
        return list(ex.map(lambda it: scorer.score("bench", _response(it[0]), it[1])["acc"], items))


@pytest.mark.parametrize("name", FILES)
def test_ground_truths_score_one(name: str, scorer: Scorer) -> None:
    golds = [str(r["answer"]) for r in _rows(name)]
    assert [g for g, acc in zip(golds, _accs(scorer, [(g, g) for g in golds])) if acc != 1.0] == []
    dapo = Scorer(scorer.config.__class__(format="dapo"))
    assert [g for g in golds if dapo.score(name, f"work\nAnswer: {g}", g)["score"] != 1.0] == []


def _sample() -> list[str]:
    return [str(r["answer"]) for r in _rows("aime24") + _rows("aime25") + _rows("math500")[:120]]


def test_ground_truths_pass_math_verify_alone() -> None:
    assert [g for g in _sample() if not answers_equal(g, g, timeout_s=5)[0]] == []


def test_equivalent_renderings_score_one(scorer: Scorer) -> None:
    items = [(r, g) for g in _sample() for r in renderings(g)]
    assert len(items) > 300
    assert [it for it, acc in zip(items, _accs(scorer, items)) if acc != 1.0] == []


def test_wrong_answers_score_zero(scorer: Scorer) -> None:
    items = [(w, g) for g in _sample() for w in wrong_answers(g)]
    assert len(items) > 300
    assert [it for it, acc in zip(items, _accs(scorer, items)) if acc != 0.0] == []
