"""Scoring with the project's scorer, the `score` / `table` CLI and the paper-shaped markdown table."""

from __future__ import annotations

import json
import re

import pytest

from verl_ext.evaluation import report
from verl_ext.evaluation.cli import default_ks, main
from verl_ext.evaluation.generations import Problem
from verl_ext.evaluation.scoring import Progress, score_problems


def squash(text: str) -> str:
    """A tabulate table with its column padding collapsed, so cells read '| a | b |' whatever the widths."""
    return re.sub(r" +", " ", text)


def result(run, benches, n=16):
    return {"schema_version": 1, "run": run,
            "benchmarks": {ds: {"avg": v, "samples_per_problem": n, "pass_at": {"1": v, "16": min(1.0, 2 * v)}}
                           for ds, v in benches.items()}}


def test_table_rows_are_runs_columns_are_benchmarks_in_paper_order():
    table = squash(report.markdown_table([result("grpo", {"math500": 0.5, "aime24": 0.1, "zeta": 0.3}),
                                          result("heapa", {"math500": 0.6, "aime24": 0.2, "zeta": 0.2})]))
    lines = table.splitlines()
    assert lines[0] == "avg@16 (%)"
    assert lines[2] == "| run | AIME24 | MATH500 | zeta | Avg |"
    assert lines[4] == "| grpo | 10.0 | 50.0 | **30.0** | 30.0 |"
    assert lines[5] == "| heapa | **20.0** | **60.0** | 20.0 | **33.3** |"


def test_table_missing_benchmark_gets_no_avg_and_pass_metric():
    table = squash(report.markdown_table([result("a", {"aime24": 0.25, "math500": 0.5}),
                                          result("b", {"aime24": 0.5})], metric="pass@16"))
    assert table.startswith("pass@16 (%)")
    assert "| b | **100.0** | – | – |" in table
    with pytest.raises(ValueError, match="metric"):
        report.markdown_table([result("a", {"x": 1.0})], metric="best")


def test_score_problems_uses_the_project_scorer():
    problems = [Problem("aime24", "7", "025", responses=["so \\boxed{25}", "\\boxed{24}", "Answer: 25"]),
                Problem("math500", "0", "\\frac{14}{3}", responses=["\\boxed{\\dfrac{14}{3}}"])]
    results, records = score_problems(problems, fmt="auto")
    assert results[0].correct == (1.0, 0.0, 1.0) and results[1].correct == (1.0,)
    assert records[0]["preds"][:2] == ["25", "24"]
    boxed_only, _ = score_problems(problems[:1], fmt="boxed")
    assert boxed_only[0].correct == (1.0, 0.0, 0.0)  # the Answer: line is not read in boxed mode
    with pytest.raises(ValueError, match="has 3 responses, k=4"):
        score_problems(problems[:1], k=4)
    with pytest.raises(ValueError, match="format="):
        score_problems(problems, fmt="latex")


def test_progress_logs_on_time_and_at_the_end(caplog):
    ticks = iter([0.0, 1.0, 20.0, 21.0])
    progress = Progress("work", total=3, every_s=10.0, clock=lambda: next(ticks))
    with caplog.at_level("INFO"):
        for _ in range(3):
            progress.advance()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and messages[0].startswith("work: 2/3") and messages[1].startswith("work: 3/3")


def test_default_ks():
    assert default_ks(16) == [1, 2, 4, 8, 16] and default_ks(6) == [1, 2, 4, 6] and default_ks(1) == [1]


def test_score_cli_writes_result_table_and_scored_file(tmp_path, capsys):
    gens = tmp_path / "gens.jsonl"
    lines = [{"data_source": "aime24", "index": i, "ground_truth": str(i),
              "responses": [f"\\boxed{{{i}}}", "\\boxed{-1}", f"Answer: {i}", "nothing"]} for i in range(3)]
    gens.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    assert main(["score", "--generations", str(gens), "--out", str(tmp_path / "run_a"), "--pass-k", "1,4"]) == 0
    res = json.loads((tmp_path / "run_a" / "result.json").read_text())
    assert res["run"] == "run_a" and res["benchmarks"]["aime24"]["avg@4"] == pytest.approx(0.5)
    assert res["benchmarks"]["aime24"]["pass_at"] == {"1": pytest.approx(0.5), "4": 1.0}
    assert res["overall"]["avg_macro"] == pytest.approx(0.5) and res["scorer_flags"]["timeout"] == 0
    scored = [json.loads(x) for x in (tmp_path / "run_a" / "scored.jsonl").read_text().splitlines()]
    assert scored[0]["correct"] == [1.0, 0.0, 1.0, 0.0]
    assert "| run_a | 50.0 | 50.0 |" in squash((tmp_path / "run_a" / "table.md").read_text())
    # first two responses only, under another name; then the two runs side by side
    assert main(["score", "--generations", str(gens), "--out", str(tmp_path / "b"), "--run", "first2",
                 "--k", "2", "--format", "boxed"]) == 0
    capsys.readouterr()
    assert main(["table", str(tmp_path / "run_a" / "result.json"), str(tmp_path / "b" / "result.json"),
                 "--out", str(tmp_path / "t.md")]) == 0
    table = squash((tmp_path / "t.md").read_text())
    assert table.startswith("avg@n (%), n = samples per problem: run_a 4, first2 2")
    assert "| first2 | **50.0** | **50.0** |" in table  # ties are all bold
    with pytest.raises(ValueError, match="not an evaluation result"):
        report.read_result(gens)
