"""Errors early: bad data, a bad teacher setting or an unreachable teacher fail in the driver, before Ray starts,
naming the file, row, field or key; ``~`` in paths is expanded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from recipe.heapa.main_heapa import read_settings
from recipe.heapa.ops.preflight import check_data, check_teacher, expand_paths
from recipe.heapa.settings import HeapaConfigError
from verl_ext.adapters.rows import RowError
from verl_ext.augment.teacher import TeacherUnreachableError

REPO = Path(__file__).resolve().parents[4]
CONFIG_DIR = str(REPO / "recipe" / "heapa" / "config")


def _rows(n: int, start: int = 0) -> list[dict]:
    return [{"data_source": "arith", "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
             "reward_model": {"style": "rule", "ground_truth": str(i + 1)}} for i in range(start, start + n)]


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _config(tmp_path: Path, *overrides: str):
    val = _jsonl(tmp_path / "val.jsonl", _rows(4))
    base = ["method=grpo", "platform=cpu", "heapa.teacher.backend=programmatic", f"data.val_files={val}",
            f"data.train_files={_jsonl(tmp_path / 'seeds.jsonl', _rows(20))}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=base + list(overrides))
    cfg.heapa.method = "grpo"  # `${hydra:...}` resolves only inside a running Hydra app
    return cfg


def _check(cfg) -> int:
    return check_data(cfg, read_settings(cfg))


def test_valid_data_passes_and_counts_seeds(tmp_path):
    assert _check(_config(tmp_path)) == 20
    assert _check(_config(tmp_path, "data.train_max_samples=5")) == 5


def test_tilde_is_expanded_in_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    # Hydra's grammar needs quotes around a leading ~ (the launchers expand it in the shell instead)
    cfg = _config(tmp_path, "data.train_files='~/seeds.jsonl'", "data.val_files=['~/val.jsonl','~/val.jsonl']",
                  "trainer.default_local_dir='~/ckpt'", "heapa.trace_file='~/trace.jsonl'")
    expand_paths(cfg)
    assert cfg.data.train_files == f"{tmp_path}/seeds.jsonl"
    assert list(cfg.data.val_files) == [f"{tmp_path}/val.jsonl"] * 2
    assert cfg.trainer.default_local_dir == f"{tmp_path}/ckpt" and cfg.heapa.trace_file == f"{tmp_path}/trace.jsonl"
    assert _check(cfg) == 20  # and the expanded files are the ones read


def test_empty_train_file(tmp_path):
    empty = _jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(ValueError, match=r"data\.train_files \[.*empty\.jsonl'\]: no rows"):
        _check(_config(tmp_path, f"data.train_files={empty}"))


def test_missing_val_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data\.val_files: \[.*nope\.parquet'\] not found"):
        _check(_config(tmp_path, f"data.val_files={tmp_path / 'nope.parquet'}"))


def test_more_seeds_than_the_pool_names_key_and_file(tmp_path):
    with pytest.raises(ValueError, match=r"heapa\.pool\.max_pool_size=10 is smaller than the 20 seed rows of "
                                         r"data\.train_files \[.*seeds\.jsonl"):
        _check(_config(tmp_path, "heapa.pool.max_pool_size=10"))


def test_every_bad_row_is_reported(tmp_path):
    rows: list = _rows(30)
    rows[3] = "{not json"
    rows[7]["prompt"] = [{"role": "system", "content": "Be brief."}]
    rows[11]["prompt"][0]["content"] = "   "
    for i in range(12, 30):
        del rows[i]["reward_model"]
    train = _jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(RowError) as err:
        _check(_config(tmp_path, f"data.train_files={train}"))
    text = str(err.value)
    assert text.startswith("21 bad row(s)") and "... and 1 more" in text
    assert "train.jsonl row 3 (line 4): invalid JSON" in text
    assert "train.jsonl row 7 (line 8): field 'prompt' has no user message" in text
    assert "train.jsonl row 11 (line 12): field 'prompt[0].content' is empty or whitespace" in text


def test_duplicates_refused_on_request(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", _rows(5) + _rows(2))
    with pytest.raises(RowError, match=r"(?s)2 of 7 rows repeat .*train\.jsonl row 5 repeats .*train\.jsonl row 0"):
        _check(_config(tmp_path, f"data.train_files={train}", "heapa.rows.duplicates=error"))
    assert _check(_config(tmp_path, f"data.train_files={train}", "heapa.rows.duplicates=drop")) == 5


def test_teacher_setting_of_the_wrong_type_names_the_field(tmp_path):
    with pytest.raises(HeapaConfigError, match=r"heapa\.teacher\.timeout_s must be a number > 0, got 'abc'"):
        read_settings(_config(tmp_path, "method=heapa_grpo", "heapa.teacher.timeout_s=abc"))
    # A run without augmentation never calls the teacher, so its block is not read (GRPO needs no TEACHER_MODEL).
    assert read_settings(_config(tmp_path, "heapa.teacher.timeout_s=abc")).teacher.timeout_s != "abc"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_teacher_fails_naming_teacher_base_url(tmp_path, monkeypatch):
    monkeypatch.delenv("TEACHER_API_KEY", raising=False)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    cfg = _config(tmp_path, "method=heapa_grpo", "heapa.teacher.backend=openai", f"heapa.teacher.base_url={url}",
                  "heapa.teacher.model=judge", "heapa.teacher.probe_timeout_s=2")
    cfg.heapa.method = "heapa_grpo"
    settings = read_settings(cfg)
    with pytest.raises(TeacherUnreachableError, match=f"TEACHER_BASE_URL.*|{url}"):
        check_teacher(settings)
    settings.teacher.probe_timeout_s = 0.0
    check_teacher(settings)  # 0 skips the check
    settings.teacher.probe_timeout_s = 2.0
    settings.augmentation.enabled = False
    check_teacher(settings)  # no augmentation, no teacher needed


def test_the_command_fails_before_ray_starts(tmp_path):
    """The whole entry point on an empty train file: the error, not a Ray start-up, in seconds."""
    empty = _jsonl(tmp_path / "empty.jsonl", [])
    cfg = [f"data.train_files={empty}", f"data.val_files={_jsonl(tmp_path / 'val.jsonl', _rows(2))}",
           "method=grpo", "platform=cpu", "heapa.teacher.backend=programmatic", f"hydra.run.dir={tmp_path / 'h'}"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "recipe.heapa.main_heapa", *cfg], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - start
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "no rows (the file is empty)" in text and "empty.jsonl" in text
    assert "Started a local Ray instance" not in text and "ray.init" not in text, text[-2000:]
    print(f"empty train file: error after {took:.1f} s")
