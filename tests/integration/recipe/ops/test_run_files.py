"""Run files across attempts: the metrics and trace of a killed attempt are kept, the live files never repeat a step.

The e2e twin (``tests/e2e/test_interrupted_launcher.py``) kills a real launcher run with SIGKILL, preempts the
resumed one with SIGTERM and finishes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.heapa.ops.run_files import MetricsHistory, attempt_files, prepare_run_files, resumed_step, start_attempt


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write_steps(path: Path, steps, torn: bool = False) -> None:
    text = "".join(json.dumps({"step": s, "data": {"x": s}}, separators=(",", ":")) + "\n" for s in steps)  # verl's format
    path.write_text(text + ('{"step": 9, "da' if torn else ""))


def _checkpoint(folder: Path, step: int) -> None:
    (folder / f"global_step_{step}").mkdir(parents=True)
    (folder / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_resumed_step_follows_verls_rules(tmp_path):
    ckpt = tmp_path / "ckpt"
    trainer = OmegaConf.create({"resume_mode": "auto", "default_local_dir": str(ckpt), "resume_from_path": None})
    assert resumed_step(trainer) == 0  # nothing saved yet
    _checkpoint(ckpt, 4)
    assert resumed_step(trainer) == 4
    trainer.resume_mode = "disable"
    assert resumed_step(trainer) == 0
    trainer.resume_mode = "resume_path"
    trainer.resume_from_path = str(tmp_path / "other" / "global_step_7")
    assert resumed_step(trainer) == 7


def test_each_attempt_is_kept_and_the_live_file_continues_the_resumed_history(tmp_path):
    live = tmp_path / "metrics.jsonl"
    assert start_attempt(live, 3) is None  # no file yet: nothing to keep
    _write_steps(live, [0, 1, 2, 3, 4, 5], torn=True)  # attempt 1 checkpointed step 3, died writing step 9
    first = start_attempt(live, 3)
    assert first == tmp_path / "metrics.attempt-1.jsonl"
    assert first.read_text().endswith('{"step": 9, "da')  # the killed attempt's file, byte for byte
    assert [r["step"] for r in _lines(live)] == [0, 1, 2, 3]
    with open(live, "a") as f:  # attempt 2 resumes at 4 and gets to 6
        f.writelines(json.dumps({"step": s, "data": {}}) + "\n" for s in (4, 5, 6))
    second = start_attempt(live, 5)
    assert attempt_files(live) == [first, second] and second.name == "metrics.attempt-2.jsonl"
    assert [r["step"] for r in _lines(second)] == [0, 1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in _lines(live)] == [0, 1, 2, 3, 4, 5]
    start_attempt(live, 0)  # a fresh start (resume disabled): nothing carried over, the old run kept
    assert live.read_text() == "" and len(attempt_files(live)) == 3


def test_prepare_run_files_handles_metrics_and_trace(tmp_path, monkeypatch):
    from verl.utils import tracking

    metrics, trace, ckpt = tmp_path / "m.jsonl", tmp_path / "trace.jsonl", tmp_path / "ckpt"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics))
    _write_steps(metrics, [0, 1, 2, 3])
    trace.write_text("".join(json.dumps({"step": s, "trained": [s], "children": []}) + "\n" for s in (1, 2, 3)))
    _checkpoint(ckpt, 2)
    config = OmegaConf.create({
        "trainer": {"logger": ["console", "file"], "project_name": "p", "experiment_name": "e",
                    "resume_mode": "auto", "default_local_dir": str(ckpt)},
        "heapa": {"trace_file": str(trace)},
    })
    report = prepare_run_files(config)
    assert report["resumed_step"] == 2
    assert report["metrics_attempt"].name == "m.attempt-1.jsonl" and report["trace_attempt"].name == \
        "trace.attempt-1.jsonl"
    assert [r["step"] for r in _lines(trace)] == [1, 2]
    assert [r["step"] for r in _lines(metrics)] == [0, 1, 2]  # kept in the live file until verl truncates it
    kept = metrics.read_bytes()
    # the trainer: read when built; verl's Tracking truncates the file; replayed before verl logs
    history = MetricsHistory.read(config)
    tracker = tracking.Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    assert metrics.read_bytes() == b""
    assert history.replay(tracker) == 3 and history.replay(tracker) == 0  # once
    tracker.log({"y": 1.0}, step=3)
    tracker.finish()
    assert metrics.read_bytes().startswith(kept)  # byte for byte
    assert [r["step"] for r in _lines(metrics)] == [0, 1, 2, 3] and _lines(metrics)[-1]["data"] == {"y": 1.0}


def test_history_follows_verls_default_path_and_the_file_logger_switch(tmp_path, monkeypatch):
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    (tmp_path / "proj").mkdir()
    _write_steps(tmp_path / "proj" / "exp.jsonl", [1, 2])
    trainer = {"project_name": "proj", "experiment_name": "exp"}
    on = OmegaConf.create({"trainer": {**trainer, "logger": ["console", "file"]}})
    assert [s for s, _ in MetricsHistory.read(on).rows] == [1, 2]
    off = OmegaConf.create({"trainer": {**trainer, "logger": ["console"]}})
    assert MetricsHistory.read(off).rows == []
    (tmp_path / "proj" / "exp.jsonl").write_text("not json\n")
    with pytest.raises(ValueError, match=r"exp\.jsonl: line 1"):
        MetricsHistory.read(on)


@pytest.mark.parametrize("name", ["trace.jsonl", "trace"])
def test_attempt_names_keep_the_suffix(tmp_path, name):
    live = tmp_path / name
    _write_steps(live, [1])
    assert start_attempt(live, 1).name == name.replace("trace", "trace.attempt-1")
