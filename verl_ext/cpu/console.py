"""The CPU run's console: one readable line per validation, and the repeated notices of verl, Ray and
transfer_queue kept off it.

A 40-step CPU run printed ~520 lines besides verl's per-step metric line; where the repeats came from and what
answers each (all applied only with ``VERL_PLATFORM=cpu``, in the driver and, through the environment the recipe
forwards to Ray, in every worker):

- ``target_num_threads 8 should not exceed total physical CPU cores 2`` (~250 lines): transfer_queue clamps its
  torch thread count on every put/get (``transfer_queue/utils/common.py``) and warns each time; the count comes
  from ``TQ_NUM_THREADS`` (default 8) -> set to the physical core count (:func:`env_defaults`).
- ``<x> engine is not available`` (5 optional engines x 2 lines x every process importing
  ``verl.workers.engine``), ``Disabled critic as algorithm.adv_estimator != gae`` (GRPO-family presets never use a
  critic), torchdata's ``'set_vital' is deprecated``: UserWarnings filtered (:func:`quiet_warnings`).
- ``Platform override from VERL_PLATFORM``, worker-group and checkpoint INFO lines of verl in every worker:
  ``VERL_LOGGING_LEVEL=WARN`` (verl's own default outside ``configure_verl_logging``).
- ``Training Progress`` tqdm refreshes, one line each through Ray's log forwarding: at most one a minute
  (``TQDM_MININTERVAL``/``TQDM_MAXINTERVAL``, read by tqdm itself); hub/datasets progress bars off.
- Ray's ``Using blocking ray.get inside async actor`` (verl's pattern, not the user's): its own switch.
- wandb's ``ConnectionResetError`` traceback when a Ray actor exits after ``wandb.finish``: its service is torn
  down with the tracker instead (:func:`install_tracking_hook`).
- verl's multi-line ``Initial/Final validation metrics`` dump (the same numbers are on the step's metric line):
  replaced by :func:`validation_line`, printed after the step's line whenever the step validated, e.g.
  ``[verl-heapa] step 10: val acc 0.213 (+0.081 since step 0; arith, 512 problems)``.
- verl's per-step console line (the whole metric dict, ~230 keys, 8-12 kB a step): replaced by :func:`step_line`,
  one compact line a step (``[verl-heapa] step 12/40 | reward 0.412 | zero-signal 38% | frontier 213 | rollouts
  1,536 | 11.8 s/step | 5m31s left``); the full dict still goes to the file logger and wandb, and
  ``VERL_EXT_CONSOLE=full`` puts verl's line back on the console.

Every variable is a default: one set by the user wins.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

PREFIX = "[verl-heapa]"
# val-core/<data_source>/<metric>/mean@<n>: verl's headline validation numbers (one per data source)
_VAL_KEY = re.compile(r"^val-core/(?P<source>[^/]+)/(?P<metric>[^/]+)/mean@(?P<n>\d+)$")
_QUIET_WARNINGS = (  # (message regex, module regex) of UserWarnings that repeat in every process
    (r".* engine is not available", r"verl\.workers\.engine"),
    (r"Disabled critic as algorithm\.adv_estimator != gae", ""),
    (r"'set_vital' is deprecated", ""),
)


def physical_cores() -> int:
    """What transfer_queue caps its thread count at (psutil's physical count), else the logical count."""
    try:
        import psutil

        count = psutil.cpu_count(logical=False)
    except ImportError:  # pragma: no cover - ray[default] brings psutil
        count = None
    return int(count or os.cpu_count() or 1)


def env_defaults() -> dict[str, str]:
    """Environment for every process of a CPU run (forwarded to Ray workers with the platform's other defaults)."""
    return {
        "TQ_NUM_THREADS": str(physical_cores()),
        "VERL_LOGGING_LEVEL": "WARN",
        "RAY_WARN_BLOCKING_GET_INSIDE_ASYNC": "0",
        "TQDM_MININTERVAL": "60",
        "TQDM_MAXINTERVAL": "60",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }


def quiet_warnings() -> None:
    """Filter the UserWarnings every verl process repeats on CPU (before verl's engine package is imported)."""
    for message, module in _QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning, module=module)
    # torch warns once per process that is_fx_tracing also covers torch.export (transformers asks it)
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


def validation_line(data: Mapping[str, Any], step: int, problems: int | None = None,
                    first: Mapping[str, float] | None = None, first_step: int = 0) -> str | None:
    """One readable line for a step's validation metrics, or None when ``data`` holds none.

    ``acc`` is shown when the reward reports it, else ``reward``; with several data sources their mean comes first.
    ``first`` (the values of the first validation, at ``first_step``; see :func:`source_values`) adds the change
    since then.
    """
    found: dict[str, dict[str, tuple[float, int]]] = {}
    for key, value in data.items():
        m = _VAL_KEY.match(key)
        if m and isinstance(value, (int, float)) and not isinstance(value, bool):
            found.setdefault(m["metric"], {})[m["source"]] = (float(value), int(m["n"]))
    metric = "acc" if "acc" in found else ("reward" if "reward" in found else None)
    if metric is None:
        return None
    per_source = found[metric]
    mean = sum(v for v, _ in per_source.values()) / len(per_source)
    n = max(k for _, k in per_source.values())
    head = f"{PREFIX} step {step}: val {metric}" + (f" (mean@{n})" if n > 1 else "") + f" {mean:.3f}"
    if len(per_source) > 1:
        head += " = mean of " + ", ".join(f"{s} {v:.3f}" for s, (v, _) in sorted(per_source.items()))
    notes = []
    if first:
        before = [first[s] for s in per_source if s in first]
        if len(before) == len(per_source):
            delta = mean - sum(before) / len(before)
            notes.append(f"{delta:+.3f} since step {first_step}")
    where = ", ".join(sorted(per_source)) if len(per_source) == 1 else f"{len(per_source)} sets"
    notes.append(f"{where}, {problems} problems" if problems else where)
    return f"{head} ({'; '.join(notes)})"


def source_values(data: Mapping[str, Any]) -> dict[str, float]:
    """data_source -> headline value (acc, else reward) of a validation's metrics: what ``first`` holds."""
    values: dict[str, dict[str, float]] = {}
    for key, value in data.items():
        m = _VAL_KEY.match(key)
        if m and isinstance(value, (int, float)) and not isinstance(value, bool):
            values.setdefault(m["metric"], {})[m["source"]] = float(value)
    return values.get("acc") or values.get("reward") or {}


def count_problems(config: Mapping[str, Any] | None) -> int | None:
    """Validation rows the trainer reads: the val files' row counts, capped by ``data.val_max_samples``.

    Parquet only (its footer holds the count); anything else, or a file that cannot be read, gives None.
    """
    data = (config or {}).get("data") or {}
    files = data.get("val_files")
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, Sequence) or not files:
        return None
    try:
        import pyarrow.parquet as pq

        total = sum(pq.ParquetFile(os.path.expanduser(str(f))).metadata.num_rows for f in files)
    except (OSError, ValueError, ImportError):  # remote paths, jsonl, a damaged footer: the line shows no count
        return None
    cap = data.get("val_max_samples")
    return min(total, int(cap)) if isinstance(cap, int) and cap > 0 else total


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")


def step_line(data: Mapping[str, Any], step: int, total: int | None = None,
              mean_step_s: float | None = None) -> str | None:
    """One compact line for a training step's metrics (None for a step that only validated): step / total, the
    training reward, the share of groups without signal (all right or all wrong), the frontier's size (HeaPA) or
    HIVE's prune rate, the rollouts so far, seconds per step and the time left at ``mean_step_s``."""
    step_s = _number(data, "timing_s/step")
    if step_s is None:
        return None
    parts = [f"{PREFIX} step {step}" + (f"/{total}" if total else "")]
    reward = _number(data, "critic/score/mean")
    if reward is not None:
        parts.append(f"reward {reward:.3f}")
    flat = [_number(data, "feedback/frac_all_correct"), _number(data, "feedback/frac_all_wrong")]
    if None not in flat:
        parts.append(f"zero-signal {100 * (flat[0] + flat[1]):.0f}%")
    frontier, pruned = _number(data, "pool/frontier_size"), _number(data, "hive/prune_rate")
    if frontier:  # the uniform baselines report an empty frontier: nothing to show
        parts.append(f"frontier {frontier:,.0f}")
    elif pruned is not None:
        parts.append(f"pruned {100 * pruned:.0f}%")
    rollouts = _number(data, "rollout/gen_responses_cum")
    if rollouts is not None:
        parts.append(f"rollouts {rollouts:,.0f}")
    parts.append(f"{step_s:.1f} s/step")
    if total and mean_step_s is not None and total > step:
        parts.append(f"{_duration((total - step) * mean_step_s)} left")
    return " | ".join(parts)


def total_steps(config: Mapping[str, Any] | None) -> int | None:
    """``trainer.total_training_steps`` when the config sets it (verl derives it from the epochs otherwise)."""
    value = ((config or {}).get("trainer") or {}).get("total_training_steps")
    return int(value) if isinstance(value, int) and value > 0 else None


class StepConsole:
    """Stands in for verl's console logger: :func:`step_line` each step and :func:`validation_line` whenever the
    step validated, to ``stream`` (stdout). On a terminal the step line is a progress line rewritten in place."""

    def __init__(self, problems: int | None, total: int | None, stream=None):
        self.validation = ValidationConsole(problems, stream)
        self.total = total
        self.stream = stream
        self.steps_timed = 0
        self.seconds = 0.0
        self._open_line = False

    def flush(self) -> None:
        (self.stream or sys.stdout).flush()

    def log(self, data: Mapping[str, Any], step: int) -> None:
        stream = self.stream or sys.stdout
        step_s = _number(data, "timing_s/step")
        if step_s is not None:
            self.steps_timed += 1
            self.seconds += step_s
        line = step_line(data, step, self.total, self.seconds / self.steps_timed if self.steps_timed else None)
        live = bool(getattr(stream, "isatty", lambda: False)())
        if line is not None:
            stream.write(("\r" + line + "\x1b[K") if live else line + "\n")
            self._open_line = live
        if self._open_line and any(_VAL_KEY.match(key) for key in data):  # end the progress line first
            stream.write("\n")
            self._open_line = False
        stream.flush()
        self.validation.log(data, step)


class ValidationConsole:
    """A console sink beside verl's own console logger: writes :func:`validation_line` to the terminal (stdout, or
    ``stream``) for each logged step that validated (attached to verl's ``Tracking``)."""

    def __init__(self, problems: int | None, stream=None):
        self.problems = problems
        self.first: dict[str, float] | None = None
        self.first_step = 0
        self.stream = stream

    def log(self, data: Mapping[str, Any], step: int) -> None:
        line = validation_line(data, step, self.problems, self.first, self.first_step)
        if line is None:
            return
        if self.first is None:
            self.first, self.first_step = source_values(data), step
        stream = self.stream or sys.stdout
        stream.write(line + "\n")
        stream.flush()


def _quiet_pprint(original):
    def pprint(obj, *args, **kwargs):
        if isinstance(obj, str) and obj.startswith(("Initial validation metrics:", "Final validation metrics:")):
            return  # the step's console line has the numbers, ValidationConsole the readable summary
        original(obj, *args, **kwargs)

    pprint._verl_ext_quiet = True
    return pprint


def install_tracking_hook() -> None:
    """Attach a :class:`ValidationConsole` to every verl ``Tracking`` with a console backend, and tear wandb's
    service down when the tracker finishes (idempotent)."""
    from verl.utils import tracking

    cls = tracking.Tracking
    if getattr(cls, "_verl_ext_console", False):
        return
    init, log = cls.__init__, cls.log

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        backends = kwargs.get("default_backend", args[2] if len(args) > 2 else "console")
        backends = [backends] if isinstance(backends, str) else list(backends or [])
        config = kwargs.get("config", args[3] if len(args) > 3 else None)
        self.verl_ext_console = None
        if "console" in backends:
            if os.environ.get("VERL_EXT_CONSOLE", "compact") == "full":  # verl's whole dict, then the summary
                self.verl_ext_console = ValidationConsole(count_problems(config))
            else:  # the compact line stands in for verl's console logger; file and wandb still get everything
                self.console_logger = self.logger["console"] = StepConsole(count_problems(config),
                                                                           total_steps(config))
        trainer = sys.modules.get("verl.trainer.ppo.v1.trainer_base")  # the fit loop that builds this Tracking
        current = getattr(trainer, "pprint", None)
        if callable(current) and not getattr(current, "_verl_ext_quiet", False):
            trainer.pprint = _quiet_pprint(current)

    def log_(self, data, step, backend=None):
        log(self, data, step, backend)
        console = getattr(self, "verl_ext_console", None)
        if console is not None and (backend is None or "console" in backend):
            try:
                console.log(data, step)
            except (KeyError, TypeError, ValueError, ArithmeticError, OSError):  # a summary line must never stop
                # training: an odd metric value or a closed stream is logged with its traceback, anything else raises
                logger.warning("the [verl-heapa] validation line failed at step %s", step, exc_info=True)

    finish = cls.finish

    def finish_(self, exit_code: int = 0):
        first = not getattr(self, "_finished", False)
        finish(self, exit_code)
        run_module = getattr(self, "logger", {}).get("wandb")
        if first and run_module is not None and hasattr(run_module, "teardown"):
            # Stop wandb's service now: left to its atexit hook, it finds the service gone when the Ray actor
            # exits and prints a ConnectionResetError traceback (wandb says that hook is unreliable in workers).
            try:
                run_module.teardown(exit_code=exit_code)
            except (OSError, RuntimeError):  # the run is already finished and written: a dead service is logged
                logger.warning("wandb teardown after the run failed", exc_info=True)

    cls._verl_ext_originals = (init, log, finish)  # what uninstall_tracking_hook puts back
    cls.__init__, cls.log, cls.finish = __init__, log_, finish_
    cls._verl_ext_console = True


def uninstall_tracking_hook() -> None:
    """Put verl's own ``Tracking`` methods back (tests; a process that wants verl's console unchanged)."""
    from verl.utils import tracking

    cls = tracking.Tracking
    if getattr(cls, "_verl_ext_console", False):
        cls.__init__, cls.log, cls.finish = cls._verl_ext_originals
        cls._verl_ext_console = False
