"""Checkpoints a restart can rely on: marked complete only when every part is written, checked before resuming,
the newest complete one used when the latest is damaged, and old ones pruned without losing the last good one.

verl marks a step as the latest (``latest_checkpointed_iteration.txt``) as soon as its own parts are written and
never looks at them again until the next start, where a damaged part (a full disk, a partial copy to or from
shared storage) fails minutes into start-up (``_pickle.UnpicklingError: pickle data was truncated`` after 2 min 23 s,
with a complete checkpoint twenty steps earlier unused). Here:

- after a save, ``write_manifest`` lists every file of ``global_step_N`` with its size in ``heapa_manifest.json``
  (written last, atomically): a folder with a manifest whose files all match is complete;
- before the trainer starts (in the task runner, before the run files are prepared, so the metrics history is cut
  at the step actually resumed), ``choose_resume`` checks the checkpoint verl would resume from; when it is
  damaged it says which file and why, and resumes from the newest complete one instead (``resume_mode=
  resume_path``); an explicitly requested ``resume_from_path`` that is damaged is an error;
- checkpoints written before manifests existed are checked by structure (``data.pt``, a readable
  ``heapa_state.json``, a non-empty ``actor/``);
- ``prune`` keeps the newest ``trainer.max_actor_ckpt_to_keep`` complete folders (verl's own knob, which prunes
  only the actor part) and never the newest complete one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from verl_ext.checkpoint_layout import STEP_RE

logger = logging.getLogger(__name__)

MANIFEST = "heapa_manifest.json"
STATE_FILE = "heapa_state.json"


def write_manifest(folder: str | os.PathLike) -> Path:
    """List every file under ``folder`` (relative path -> size in bytes); written last and atomically."""
    folder = Path(folder)
    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name not in (MANIFEST, MANIFEST + ".tmp")}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps({"schema_version": 1, "files": files}, indent=0) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)
    return folder / MANIFEST


def damage(folder: str | os.PathLike) -> str | None:
    """None when ``folder`` is a complete checkpoint, else which file is wrong and how."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder}: no such folder"
    manifest = folder / MANIFEST
    if manifest.exists():
        try:
            files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            return f"{manifest}: unreadable ({err})"
        for rel, size in files.items():
            path = folder / rel
            if not path.is_file():
                return f"{path}: missing (listed in {MANIFEST})"
            if path.stat().st_size != size:
                return f"{path}: {path.stat().st_size} bytes, {size} when it was saved (truncated or overwritten)"
    else:  # written before manifests: its structure is all there is to check
        if not (folder / "data.pt").is_file():
            return f"{folder / 'data.pt'}: missing"
        actor = folder / "actor"
        if not actor.is_dir() or not any(actor.iterdir()):
            return f"{actor}: missing or empty"
    try:
        json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"{folder / STATE_FILE}: unreadable ({err})"
    return None


def step_folders(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``global_step_N`` under ``root``, newest first."""
    root = Path(root)
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_RE.match(p.name))] \
        if root.is_dir() else []
    return sorted(found, reverse=True)


def _latest(root: Path) -> Path | None:
    """The folder verl's ``resume_mode=auto`` would load (its tracker file), if any."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    found = find_latest_ckpt_path(str(root))
    return Path(found) if found else None


def choose_resume(config) -> Path | None:
    """Check the checkpoint the run would resume from and fall back to the newest complete one; returns the folder
    resumed from (None: a fresh start). Changes ``trainer.resume_mode``/``resume_from_path`` only on a fallback."""
    from omegaconf import open_dict

    trainer = config.trainer
    if trainer.resume_mode == "disable":
        return None
    if trainer.resume_mode == "resume_path":
        folder = Path(os.path.abspath(str(trainer.resume_from_path)))
        problem = damage(folder)
        if problem:
            raise ValueError(f"trainer.resume_from_path={trainer.resume_from_path} is not a complete checkpoint: "
                             f"{problem}")
        return folder
    root = Path(os.path.abspath(str(trainer.default_local_dir)))
    latest = _latest(root)
    if latest is None:
        return None
    problem = damage(latest)
    if problem is None:
        return latest
    logger.error("the latest checkpoint %s is damaged: %s", latest, problem)
    step = int(STEP_RE.match(latest.name).group(1)) if STEP_RE.match(latest.name) else None
    for older_step, folder in step_folders(root):
        if step is not None and older_step >= step:
            continue
        older_problem = damage(folder)
        if older_problem is None:
            logger.warning("resuming from the newest complete checkpoint instead: %s", folder)
            with open_dict(config):
                trainer.resume_mode = "resume_path"
                trainer.resume_from_path = str(folder)
            return folder
        logger.error("checkpoint %s is damaged too: %s", folder, older_problem)
    raise ValueError(f"no complete checkpoint under {root} (the latest, {latest}, is damaged: {problem}); "
                     f"trainer.resume_mode=disable starts over")


def prune(root: str | os.PathLike, max_keep: int | None) -> list[Path]:
    """Delete all but the newest ``max_keep`` complete step folders (and damaged ones older than the newest
    complete one); the newest complete folder is never deleted. Returns what was deleted."""
    if not max_keep or max_keep < 1:
        return []
    folders = step_folders(root)
    complete = [f for _, f in folders if damage(f) is None]
    if not complete:
        return []
    keep = set(complete[:max_keep])
    newest_step = int(STEP_RE.match(complete[0].name).group(1))
    removed = []
    for step, folder in folders:
        if folder in keep or step > newest_step:  # a newer folder may still be being written
            continue
        shutil.rmtree(folder, ignore_errors=False)
        removed.append(folder)
    if removed:
        logger.info("pruned %d old checkpoint(s) (max_actor_ckpt_to_keep=%d): %s", len(removed), max_keep,
                    ", ".join(p.name for p in removed))
    return removed
