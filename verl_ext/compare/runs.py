"""Reading training runs: verl's file-logger JSON lines, wandb offline run folders, or the wandb API.

Every reader returns ``Run``s: a name, the method and seed (from the name, or wandb tags/config), and the
scalar metrics merged per step (a step logged twice — verl logs validation separately — keeps both; a key
logged twice keeps the later value). Non-numeric values (verl's DAPO value->count dict) are skipped.

Sources (``load_runs``): a ``.jsonl`` file; a folder with ``metrics*.jsonl`` (the CPU launcher writes
``outputs/<exp>/metrics.jsonl`` and moves a resumed run's earlier log to ``metrics.attempt-<k>.jsonl``; all are
merged, oldest first); a wandb
offline folder (``offline-run-*`` with a ``run-*.wandb`` file, or a ``wandb/`` folder holding several: the CPU
launcher writes ``outputs/<exp>/wandb``; runs of one name there are a resumed run's attempts and merge, oldest first);
``wandb:<entity>/<project>/<run_id>`` through the wandb API (network and a login needed).
A step logged by two attempts of a resumed run (the steps after its last checkpoint are trained again) is taken
from the later attempt.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import verl_ext.compare.wandb_offline as wandb_offline

logger = logging.getLogger(__name__)

# "<method>_s<seed>" / "<method>-seed3": the names examples/cpu_compare.sh gives its runs.
NAME_RE = re.compile(r"^(?P<method>.+?)[_-]s(?:eed)?(?P<seed>\d+)$")


class RunError(ValueError):
    """A source that cannot be read; the message names the file and line."""


@dataclass
class Run:
    name: str
    method: str
    seed: str | None
    source: str
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    skipped_values: int = 0  # non-numeric values left out
    started_us: int | None = None  # wandb runs: start time (orders the attempts of a resumed run)

    def sorted_steps(self) -> list[int]:
        return sorted(self.steps)

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) for every step that logged ``key``."""
        return [(s, self.steps[s][key]) for s in self.sorted_steps() if key in self.steps[s]]

    def keys(self) -> set[str]:
        return {k for metrics in self.steps.values() for k in metrics}


def method_and_seed(name: str, pattern: re.Pattern[str] = NAME_RE) -> tuple[str, str | None]:
    m = pattern.match(name)
    if not m:
        return name, None
    groups = m.groupdict()
    return groups.get("method") or name, groups.get("seed")


def add_scalars(run: Run, step: int, data: Mapping[str, Any], steps: dict[int, dict[str, float]] | None = None) -> None:
    """Numeric, finite values of ``data`` into ``steps`` (default ``run.steps``) at ``step``."""
    metrics = (run.steps if steps is None else steps).setdefault(int(step), {})
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            run.skipped_values += 1
            continue
        value = float(value)
        if math.isfinite(value):
            metrics[key] = value


def logger_lines(path: str | os.PathLike) -> list[dict]:
    """verl's ``FileLogger`` lines ``{"step": int, "data": {...}}`` of one file (``.gz`` read compressed); a torn
    last line (a killed run) is skipped, any other bad line is an error naming the file and line."""
    name = os.fspath(path)
    opener = gzip.open if name.endswith(".gz") else open  # kept runs are stored compressed
    with opener(name, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines):
                logger.warning("%s line %d: incomplete last line skipped (run killed mid-write?)", name, lineno)
                continue
            raise RunError(f"{name} line {lineno}: not valid JSON ({err.msg})") from err
        shaped = isinstance(obj, dict) and isinstance(obj.get("step"), int) and isinstance(obj.get("data"), dict)
        if not shaped:
            raise RunError(f"{name} line {lineno}: expected {{\"step\": int, \"data\": {{...}}}} (verl's file "
                           "logger format)")
        rows.append(obj)
    return rows


def merged_lines(paths: Iterable[str | os.PathLike]) -> dict[int, dict[str, Any]]:
    """step -> data over verl's ``FileLogger`` files, oldest first (a resumed run's attempts): within a file the
    lines of one step merge key by key; a step that a later file logs again is replaced whole (the steps after a
    run's last checkpoint are trained again by the next attempt)."""
    steps: dict[int, dict[str, Any]] = {}
    for path in paths:
        file_steps: dict[int, dict[str, Any]] = {}
        for obj in logger_lines(path):
            file_steps.setdefault(obj["step"], {}).update(obj["data"])
        steps.update(file_steps)
    return dict(sorted(steps.items()))


def read_file_logger(paths: Iterable[str | os.PathLike], run: Run) -> Run:
    """verl's ``FileLogger`` files (``merged_lines``) into ``run``."""
    for step, data in merged_lines(paths).items():
        add_scalars(run, step, data)
    return run


def _named(name: str | None, default: str, source: str, pattern: re.Pattern[str]) -> Run:
    run_name = name or default
    method, seed = method_and_seed(run_name, pattern)
    return Run(run_name, method, seed, source)


_ATTEMPT_RE = re.compile(r"^metrics\.attempt-(\d+)\.jsonl(\.gz)?$")
_MAIN_FILES = ("metrics.jsonl", "metrics.jsonl.gz")


def file_logger_files(folder: Path) -> list[Path]:
    """Oldest first, so later attempts' values win: ``metrics.attempt-<k>.jsonl`` (the launcher moves a resumed
    run's earlier log aside) by k, other ``metrics*.jsonl`` by modification time, ``metrics.jsonl`` last. Each may
    be gzipped (``.jsonl.gz``: how ``python -m verl_ext.compare.keep`` stores kept runs)."""
    def order(p: Path) -> tuple:
        m = _ATTEMPT_RE.match(p.name)
        if m:
            return (0, int(m.group(1)), 0, p.name)
        return (2, 0, 0, p.name) if p.name in _MAIN_FILES else (1, 0, p.stat().st_mtime_ns, p.name)

    return sorted([*folder.glob("metrics*.jsonl"), *folder.glob("metrics*.jsonl.gz")], key=order)


def load_runs(spec: str, pattern: re.Pattern[str] = NAME_RE) -> list[Run]:
    """Runs from ``[NAME=]SOURCE`` (see module docstring). A wandb folder may hold several runs."""
    name, sep, source = spec.partition("=")
    if not sep or os.path.exists(spec):
        name, source = None, spec
    if source.startswith("wandb:"):
        return [read_wandb_api(source[len("wandb:"):], name, pattern)]
    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"run source not found: {source}")
    if path.is_file():
        if path.suffix == ".wandb":
            return [read_wandb_run(path, name, pattern)]
        default = path.parent.name if path.name.startswith("metrics") else Path(path.name.removesuffix(".gz")).stem
        return [read_file_logger([path], _named(name, default, str(path), pattern))]
    files = file_logger_files(path)
    if files:
        return [read_file_logger(files, _named(name, path.name, str(path), pattern))]
    wandb_files = wandb_offline.find_run_files(path)
    if wandb_files:
        runs = merge_attempts([read_wandb_run(f, None, pattern) for f in wandb_files])
        if name:
            if len(runs) > 1:
                raise RunError(f"{source}: NAME= given but the folder holds {len(runs)} wandb runs "
                               f"({', '.join(r.name for r in runs)})")
            runs[0].name = name
            runs[0].method, runs[0].seed = method_and_seed(name, pattern)
        return runs
    raise RunError(f"{source}: no metrics*.jsonl[.gz] (verl file logger) and no wandb run-*.wandb file found")


def merge_attempts(runs: list[Run]) -> list[Run]:
    """Runs of one name become one run: the attempts of a resumed run (verl starts a new wandb run each time).

    Attempts are taken oldest first (by their recorded start time, else in the given order: offline folders are
    named by start time); a step a later attempt logs again is taken from it whole, as for the file logger's
    ``metrics.attempt-<k>.jsonl``.
    """
    merged: dict[str, Run] = {}
    order = sorted(range(len(runs)), key=lambda i: (runs[i].started_us is None, runs[i].started_us or 0, i))
    for run in (runs[i] for i in order):
        kept = merged.get(run.name)
        if kept is None:
            merged[run.name] = run
            continue
        kept.steps.update(run.steps)
        kept.config = run.config or kept.config
        kept.skipped_values += run.skipped_values
        kept.source = f"{kept.source}; {run.source}"
        logger.info("wandb run %s continues in %s (a resumed attempt): merged", run.name, run.source)
    return list(merged.values())


def read_wandb_api(path: str, name: str | None, pattern: re.Pattern[str]) -> Run:
    """A run from the wandb service: ``entity/project/run_id`` (needs network and ``wandb login``)."""
    try:
        import wandb
    except ImportError as err:
        raise RunError("reading wandb:<entity>/<project>/<run_id> needs the wandb package") from err
    api_run = wandb.Api().run(path)
    run = _named(name, api_run.name or path.rsplit("/", 1)[-1], f"wandb:{path}", pattern)
    run.config = dict(api_run.config or {})
    apply_wandb_labels(run, list(api_run.tags or []), run.config, explicit_name=name is not None)
    for row in _scan(api_run.scan_history()):
        step = row.pop("_step", None)
        if step is not None:
            add_scalars(run, int(step), {k: v for k, v in row.items() if not k.startswith("_")})
    return run


def _scan(rows: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    for row in rows:
        yield dict(row)


def apply_wandb_labels(run: Run, tags: list[str], config: Mapping[str, Any], explicit_name: bool) -> None:
    """The recipe tags runs ``method:<preset>``; the seed is ``heapa.seed`` in the logged config."""
    if explicit_name:
        return
    for tag in tags:
        if tag.startswith("method:"):
            run.method = tag.split(":", 1)[1]
    heapa = config.get("heapa")
    if run.seed is None and isinstance(heapa, Mapping) and heapa.get("seed") is not None:
        run.seed = str(heapa["seed"])


def read_wandb_run(path: Path, name: str | None, pattern: re.Pattern[str]) -> Run:
    """A ``Run`` from one wandb offline run file (name: NAME=, else the run's display name, else its id)."""
    info, rows = wandb_offline.read_records(path)
    run_name = name or info["name"] or info["id"] or path.stem
    method, seed = method_and_seed(run_name, pattern)
    run = Run(run_name, method, seed, str(path), config=info["config"], started_us=info["start_us"])
    apply_wandb_labels(run, info["tags"], info["config"], explicit_name=name is not None)
    for row in rows:
        step = row.get("_step")
        if step is None:
            continue
        add_scalars(run, int(step), {k: v for k, v in row.items() if not k.startswith("_")})
    return run
