"""verl's checkpoint folder layout, in one place: ``<root>/global_step_<N>/`` folders and the tracker file
``latest_checkpointed_iteration.txt`` that names the latest step. The recipe's resume, manifest and supervisor
code and the evaluation CLI all read checkpoints through these names. Framework-free.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
STUCK_STEP_REPORT = "stuck_step_{step}.txt"  # the recipe's stuck-step watchdog writes it beside the step folders
STEP_RE = re.compile(r"^global_step_(\d+)$")


def step_of(path: str | os.PathLike) -> int | None:
    """N of the innermost ``global_step_N`` folder on ``path`` (``.../global_step_4/actor`` is step 4); None when
    there is none."""
    for part in reversed(Path(path).parts):
        if match := STEP_RE.match(part):
            return int(match.group(1))
    return None


def step_folder(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"global_step_{int(step)}"


def checkpoint_root(folder: str | os.PathLike) -> str:
    """``trainer.default_local_dir`` as an absolute path (``~`` expanded, relative to the working directory)."""
    return os.path.abspath(os.path.expanduser(str(folder)))
