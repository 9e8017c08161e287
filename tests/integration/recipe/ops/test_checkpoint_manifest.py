"""Checkpoint completeness, fallback and pruning (recipe/heapa/ops/checkpoint_manifest.py), on checkpoint-shaped folders."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.heapa.ops.checkpoint_manifest import MANIFEST, choose_resume, damage, prune, step_folders, write_manifest

PARTS = ("actor/model_world_size_1_rank_0.pt", "actor/optim_world_size_1_rank_0.pt", "data.pt", "pool_state.pkl",
         "heapa_state.json")


def fake_checkpoint(root: Path, step: int, manifest: bool = True) -> Path:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    for part in PARTS:
        (folder / part).write_bytes(b"x" * 1000 if part != "heapa_state.json" else json.dumps({"step": step}).encode())
    if manifest:
        write_manifest(folder)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def config(root: Path, mode: str = "auto", path: str | None = None):
    return OmegaConf.create({"trainer": {"resume_mode": mode, "resume_from_path": path,
                                         "default_local_dir": str(root)}})


@pytest.mark.parametrize("part", PARTS)
def test_a_truncated_part_is_named(tmp_path, part):
    folder = fake_checkpoint(tmp_path, 3)
    assert damage(folder) is None
    target = folder / part
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
    assert str(target) in damage(folder) and ("truncated" in damage(folder) or "unreadable" in damage(folder))


def test_a_missing_part_and_a_checkpoint_from_before_manifests(tmp_path):
    folder = fake_checkpoint(tmp_path, 2)
    (folder / "data.pt").unlink()
    assert "data.pt: missing" in damage(folder)
    old = fake_checkpoint(tmp_path / "old", 5, manifest=False)
    assert damage(old) is None
    (old / "heapa_state.json").write_text("{not json")
    assert "heapa_state.json: unreadable" in damage(old)


def test_a_damaged_latest_falls_back_to_the_newest_complete_one(tmp_path, caplog):
    for step in (1, 2, 3):
        fake_checkpoint(tmp_path, step)
    cfg = config(tmp_path)
    assert choose_resume(cfg) == tmp_path / "global_step_3" and cfg.trainer.resume_mode == "auto"
    (tmp_path / "global_step_3" / "pool_state.pkl").write_bytes(b"x" * 10)
    (tmp_path / "global_step_2" / MANIFEST).write_text("{")
    with caplog.at_level(logging.WARNING):
        assert choose_resume(cfg) == tmp_path / "global_step_1"
    assert cfg.trainer.resume_mode == "resume_path" and cfg.trainer.resume_from_path == str(tmp_path / "global_step_1")
    text = caplog.text
    assert "global_step_3/pool_state.pkl: 10 bytes, 1000 when it was saved" in text
    assert "global_step_2" in text and "resuming from the newest complete checkpoint instead" in text


def test_nothing_complete_is_an_error_and_an_explicit_damaged_path_too(tmp_path):
    folder = fake_checkpoint(tmp_path, 1)
    (folder / "data.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="no complete checkpoint .* trainer.resume_mode=disable starts over"):
        choose_resume(config(tmp_path))
    with pytest.raises(ValueError, match="trainer.resume_from_path=.* is not a complete checkpoint"):
        choose_resume(config(tmp_path, "resume_path", str(folder)))
    assert choose_resume(config(tmp_path, "disable")) is None
    assert choose_resume(config(tmp_path / "empty")) is None


def test_prune_keeps_the_newest_complete_ones(tmp_path):
    for step in (1, 2, 3, 4):
        fake_checkpoint(tmp_path, step)
    (tmp_path / "global_step_4" / "data.pt").write_bytes(b"")  # the newest is damaged: 3 is the newest complete
    removed = prune(tmp_path, 1)
    assert sorted(p.name for p in removed) == ["global_step_1", "global_step_2"]
    assert [f.name for _, f in step_folders(tmp_path)] == ["global_step_4", "global_step_3"]
    assert prune(tmp_path, None) == [] and prune(tmp_path, 0) == []
