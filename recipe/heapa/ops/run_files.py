"""Run files that outlive one attempt: verl's JSONL metrics (the ``file`` logger) and ``heapa.trace_file``.

A run that is killed and resumed is several attempts writing the same files. verl's file logger opens its file
with "wb", so each attempt would erase the metrics of the one before, and the trace (appended) would repeat the
steps between the last checkpoint and the kill. At the start of every attempt, in the process that will write
the files (the task runner), ``start_attempt``:

1. moves the existing file aside to ``<stem>.attempt-<k><suffix>`` (k = 1, 2, ...: the file exactly as attempt k
   left it, including the steps it trained after its last checkpoint);
2. starts the file afresh with the lines of steps <= the step being resumed from (none on a fresh start), so the
   live file is one duplicate-free history of the run that the checkpoints continue.

verl's ``FileLogger`` opens the metrics file with "wb" when ``fit`` builds its ``Tracking``. So the trainer reads
the carried-over lines when it is built (``MetricsHistory.read``) and, at its first hook after ``Tracking`` exists
and before verl logs anything, logs them again through that ``Tracking``, to its ``file`` backend only
(``MetricsHistory.replay``): same path, same line format, verl's logger untouched. Until then the lines are in the
live file too, so an attempt that dies before training loses none of them.

A line that does not parse (the last line of an attempt killed mid-write) is dropped from the live file and kept
in the attempt file.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from verl_ext.checkpoint_layout import step_of

logger = logging.getLogger(__name__)
_ATTEMPT_RE = r"\.attempt-(\d+)"


def resumed_step(trainer: Any) -> int:
    """The global step verl will resume from (0 = a fresh start), decided exactly as verl's ``_load_checkpoint``."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    mode = trainer.get("resume_mode", "auto")
    if mode == "disable":
        return 0
    if mode == "resume_path":
        folder = str(trainer.get("resume_from_path") or "")
    else:
        folder = find_latest_ckpt_path(os.path.abspath(str(trainer.default_local_dir))) or ""
    return step_of(folder) or 0


def file_logger_path(project_name: str, experiment_name: str) -> str:
    """Where verl's ``FileLogger`` writes: ``$VERL_FILE_LOGGER_PATH``, else ``<root>/<project>/<experiment>.jsonl``."""
    path = os.getenv("VERL_FILE_LOGGER_PATH")
    if path is None:
        root = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
        path = os.path.join(root, project_name, f"{experiment_name}.jsonl")
    return path


def attempt_files(path: str | os.PathLike) -> list[Path]:
    """Earlier attempts of ``path``, oldest first."""
    path = Path(path)
    pattern = re.compile(re.escape(path.stem) + _ATTEMPT_RE + re.escape(path.suffix) + "$")
    found = [(int(m.group(1)), p) for p in path.parent.glob(f"{path.stem}.attempt-*{path.suffix}")
             if (m := pattern.match(p.name))]
    return [p for _, p in sorted(found)]


def start_attempt(path: str | os.PathLike, keep_through_step: int) -> Path | None:
    """Move ``path`` aside as the next attempt file and restart it with its lines of steps <= ``keep_through_step``.

    Returns the attempt file, or None when there was nothing to keep (no file, or an empty one).
    """
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return None
    done = attempt_files(path)
    number = 1 + (int(re.search(_ATTEMPT_RE, done[-1].name).group(1)) if done else 0)
    attempt = path.with_name(f"{path.stem}.attempt-{number}{path.suffix}")
    os.replace(path, attempt)
    kept, dropped = _lines_through(attempt, keep_through_step) if keep_through_step > 0 else ([], 0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(kept))
    os.replace(tmp, path)
    logger.info("%s: attempt %d kept as %s; %d line(s) through step %d carried over, %d left out", path, number,
                attempt.name, len(kept), keep_through_step, dropped)
    return attempt


def _lines_through(path: Path, step: int) -> tuple[list[bytes], int]:
    kept, dropped = [], 0
    with open(path, "rb") as f:
        for line in f:
            try:
                row_step = int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):  # a torn last line, or not a step record
                dropped += 1
                continue
            if row_step <= step:
                kept.append(line if line.endswith(b"\n") else line + b"\n")
            else:
                dropped += 1
    return kept, dropped


def prepare_run_files(config: Any) -> dict[str, Any]:
    """Start a new attempt of the metrics file (when the ``file`` logger is on) and of the trace file."""
    step = resumed_step(config.trainer)
    report: dict[str, Any] = {"resumed_step": step}
    if "file" in list(config.trainer.get("logger") or []):
        metrics = file_logger_path(config.trainer.project_name, config.trainer.experiment_name)
        report["metrics_attempt"] = start_attempt(metrics, step)
    trace = config.heapa.get("trace_file")
    if trace:
        report["trace_attempt"] = start_attempt(trace, step)
    return report


class MetricsHistory:
    """The metrics lines this attempt continues (see the module docstring): read before verl's ``Tracking``
    truncates the file, logged again through it once."""

    def __init__(self, rows: list[tuple[int, Any]]) -> None:
        self.rows = rows
        self.replayed = False

    @classmethod
    def read(cls, config: Any) -> "MetricsHistory":
        """The live metrics file's lines (``prepare_run_files`` has cut it at the resumed step); none without the
        ``file`` logger."""
        if "file" not in list(config.trainer.get("logger") or []):
            return cls([])
        path = Path(file_logger_path(config.trainer.project_name, config.trainer.experiment_name))
        rows = []
        if path.exists():
            with open(path, "rb") as f:
                for n, line in enumerate(f, 1):
                    try:
                        row = json.loads(line)
                        rows.append((int(row["step"]), row["data"]))
                    except (ValueError, KeyError, TypeError) as err:
                        raise ValueError(f"{path}: line {n} is not a metrics record ({err}); the run files are cut "
                                         "at the start of every attempt, so this file was written by something "
                                         "else") from err
        return cls(rows)

    def replay(self, tracking: Any) -> int:
        """Log the lines through verl's ``Tracking`` (its ``file`` backend), once; returns how many."""
        if self.replayed:
            return 0
        self.replayed = True
        for step, data in self.rows:
            tracking.log(data=data, step=step, backend=["file"])
        if self.rows:
            logger.info("metrics: %d line(s) of earlier attempts logged again", len(self.rows))
        return len(self.rows)
