"""Kept runs: trimmed metrics that still make the same comparison table."""

from __future__ import annotations

import json

import pytest

from verl_ext.compare.cli import main as compare
from verl_ext.compare.keep import keep_run, main, trim_line


def test_trim_keeps_what_a_comparison_reads():
    line = json.dumps({"step": 3, "data": {"val-core/arith/acc/mean@1": 0.3, "rollout/gen_responses_cum": 384.0,
                                           "actor/pg_loss": 0.1, "timing_per_token_ms/gen": 2.0,
                                           "diag/effective_loss_scale": 0.5}})
    assert json.loads(trim_line(line)) == {"step": 3, "data": {"val-core/arith/acc/mean@1": 0.3,
                                                               "rollout/gen_responses_cum": 384.0,
                                                               "diag/effective_loss_scale": 0.5}}
    assert trim_line('{"step": 4, "da') is None


def test_kept_runs_make_the_same_table(tmp_path, make_run_dir):
    runs = [make_run_dir(f"{m}_s{s}", grpo=(m == "grpo"), val_shift=0.01 * (s + 1)) for m in ("grpo", "heapa_dapo")
            for s in range(2)]
    assert compare([*map(str, runs), "--out", str(tmp_path / "a"), "--no-plots"]) == 0
    assert main([*map(str, runs), "--into", str(tmp_path / "kept")]) == 0
    kept = sorted((tmp_path / "kept").iterdir())
    assert [k.name for k in kept] == ["grpo_s0", "grpo_s1", "heapa_dapo_s0", "heapa_dapo_s1"]
    assert json.loads((kept[0] / "run.json").read_text())["source"] == str(runs[0].resolve())
    assert compare([*map(str, kept), "--out", str(tmp_path / "b"), "--no-plots"]) == 0
    assert (tmp_path / "a" / "table.md").read_text() == (tmp_path / "b" / "table.md").read_text()


def test_a_folder_without_metrics_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        keep_run(tmp_path, tmp_path / "kept")


def test_a_resumed_runs_attempts_are_kept_and_merge(tmp_path):
    """The launcher moves a resumed run's earlier log to metrics.attempt-<k>.jsonl: keep copies every attempt, so
    the kept run still has its first steps, and a re-keep drops attempt files the source no longer has."""
    from verl_ext.compare.runs import load_runs

    run = tmp_path / "grpo_s0"
    run.mkdir()
    row = lambda step, acc: json.dumps({"step": step, "data": {"val-core/arith/acc/mean@1": acc}})  # noqa: E731
    (run / "metrics.attempt-1.jsonl").write_text(row(0, 0.1) + "\n" + row(40, 0.2) + "\n")
    (run / "metrics.jsonl").write_text(row(40, 0.25) + "\n" + row(80, 0.3) + "\n")
    kept = keep_run(run, tmp_path / "kept")
    assert sorted(p.name for p in kept.glob("metrics*")) == ["metrics.attempt-1.jsonl.gz", "metrics.jsonl.gz"]
    (merged,) = load_runs(str(kept))
    accs = {step: data["val-core/arith/acc/mean@1"] for step, data in merged.steps.items()}
    assert accs == {0: 0.1, 40: 0.25, 80: 0.3}
    (run / "metrics.attempt-1.jsonl").unlink()
    keep_run(run, tmp_path / "kept")
    assert [p.name for p in kept.glob("metrics*")] == ["metrics.jsonl.gz"]


def test_a_kept_file_is_gzipped_the_same_bytes_each_time_and_replaces_an_uncompressed_copy(tmp_path, make_run_dir):
    import gzip

    run = make_run_dir("grpo_s0", grpo=True, val_shift=0.0)
    kept = keep_run(run, tmp_path / "kept")
    (kept / "metrics.jsonl").write_text("{}\n")  # what an older version kept
    first = (kept / "metrics.jsonl.gz").read_bytes()
    keep_run(run, tmp_path / "kept")
    assert (kept / "metrics.jsonl.gz").read_bytes() == first
    assert sorted(p.name for p in kept.glob("metrics*")) == ["metrics.jsonl.gz"]
    lines = gzip.decompress(first).decode().splitlines()
    assert lines == [t for t in map(trim_line, (run / "metrics.jsonl").read_text().splitlines()) if t is not None]


def test_a_gzipped_file_given_alone_is_named_by_its_stem(tmp_path, make_run_dir):
    import gzip

    from verl_ext.compare.runs import load_runs

    run = make_run_dir("grpo_s0", grpo=True, val_shift=0.0)
    single = tmp_path / "heapa_dapo_s3.jsonl.gz"
    single.write_bytes(gzip.compress((run / "metrics.jsonl").read_bytes()))
    (loaded,) = load_runs(str(single))
    (plain,) = load_runs(str(run / "metrics.jsonl"))
    assert (loaded.method, loaded.seed) == ("heapa_dapo", "3") and loaded.steps == plain.steps
