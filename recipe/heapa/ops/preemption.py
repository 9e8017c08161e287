"""Preemption: a scheduler's stop signal becomes a complete checkpoint and a "requeue me" exit code.

A scheduler that reclaims a node sends a signal some time before it kills the job (Slurm: ``--signal=B:USR1@300``
to the batch shell, Kubernetes: SIGTERM to the container's first process, then ``terminationGracePeriodSeconds``).
Without this, verl ends at once and everything since the last ``save_freq`` checkpoint is lost.

The driver (``main_heapa``) installs ``DriverPreemption`` for ``heapa.run.preempt_signals``. On a signal it only
writes a request file, ``<trainer.default_local_dir>/heapa_preempt.json`` (the checkpoint folder, which the trainer
already shares with the driver), and starts the grace clock. The trainer, in the Ray task runner, reads that file
at the end of every step (``on_step_end``, after verl's own ``save_freq`` save): when asked, it writes a complete
checkpoint of that step (actor, optimizer, dataloader, pool, teacher queue, RNG: ``_save_checkpoint``; marked
complete by its manifest only when every part is written), records the step in the file and ends training as if
it were the last step. The driver then exits with ``heapa.run.requeue_exit_code`` (75, ``EX_TEMPFAIL``: "try
again"), and the next start resumes from that checkpoint (``resume_mode=auto``).

If the step and the checkpoint do not finish within ``heapa.run.grace_s``, the driver exits with the same code at
the deadline: the half-written checkpoint has no manifest, so the next start falls back to the previous complete
one (``checkpoints.choose_resume``). A second signal ends the run at once the same way (a second Ctrl-C: "stop
now"). Copies of one delivery are one signal: a signal to the job's whole process group reaches the driver
directly and again through the launcher's ``timeout`` and the supervisor, within milliseconds, so a signal within
``REPEAT_WINDOW_S`` of the first is that delivery. The Ray processes are kept out of the job's process group
(``ops/ray_session.py``), so such a signal does not kill the workers the checkpoint needs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import Field, field_validator

from verl_ext.config_model import Bool, Float, Int, Invalid, Str, config_dataclass, parse

logger = logging.getLogger(__name__)

REQUEST_FILE = "heapa_preempt.json"
EX_TEMPFAIL = 75
REPEAT_WINDOW_S = 2.0  # copies of one job-wide delivery arrive within milliseconds; a person's second Ctrl-C later


_Seconds = Annotated[Float, Field(gt=0.0)]


@config_dataclass(name="run.watchdog")
class WatchdogSettings:
    """``heapa.run.watchdog``: when a step is stuck and what to do about it (``ops/watchdog.py``)."""

    enabled: Bool = True
    factor: _Seconds = 5.0  # a step is stuck past factor x the median step time ...
    floor_s: _Seconds = 900.0  # ... and never before this many seconds
    # an attempt's first step (warm-up: lazy init, compilation, vLLM's graph capture) and the one after it, before a
    # step of the attempt has been timed: stuck past this many seconds (null: floor_s). Not timed for the median.
    first_step_s: _Seconds | None = None
    abort: Bool = False  # stuck: end the trainer (exit code 70) so the supervisor restarts it from its checkpoint
    poll_s: _Seconds = 5.0


@config_dataclass(name="run")
class RunSettings:
    """``heapa.run``: how a run meets its cluster (preemption signals, grace period, exit code, watchdog)."""

    preempt_signals: list[Str] = field(default_factory=lambda: ["SIGTERM", "SIGINT", "SIGUSR1"])
    grace_s: _Seconds = 300.0
    requeue_exit_code: Annotated[Int, Field(ge=1, le=255)] = EX_TEMPFAIL
    watchdog: WatchdogSettings = field(default_factory=WatchdogSettings)

    @field_validator("preempt_signals", mode="before")
    @classmethod
    def _none_is_no_signal(cls, names: Any) -> Any:
        return [] if names is None else names

    @field_validator("preempt_signals")
    @classmethod
    def _catchable(cls, names: list[str]) -> list[str]:
        """Only signals a process can catch; SIGKILL and SIGSTOP never reach the handler."""
        for name in names:
            if not isinstance(getattr(signal, name, None), signal.Signals) or name in ("SIGKILL", "SIGSTOP"):
                raise Invalid(f"{name!r} is not a signal that can be caught")
        return names

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunSettings":
        return parse(cls, data)


def request_path(ckpt_dir: str | os.PathLike) -> Path:
    return Path(ckpt_dir) / REQUEST_FILE


def _write(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_request(ckpt_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The pending request (``signal``, ``deadline``; ``saved_step`` once the trainer saved), or None."""
    path = request_path(ckpt_dir)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as err:  # torn by a crash mid-write: still a request
        logger.warning("%s unreadable (%s): treated as a preemption request", path, err)
        return {"signal": "unknown"}


def mark_saved(ckpt_dir: str | os.PathLike, step: int, final: bool = False) -> None:
    """The trainer wrote a complete checkpoint at ``step`` for the pending request (``final``: the run's last step,
    nothing is left to requeue)."""
    request = read_request(ckpt_dir) or {}
    _write(request_path(ckpt_dir), {**request, "saved_step": int(step), "saved_at": time.time(), "final": final})


def clear_request(ckpt_dir: str | os.PathLike) -> None:
    """At start: a request left by the previous attempt is done with."""
    request_path(ckpt_dir).unlink(missing_ok=True)


COUNT_FILE = "heapa_preemptions.json"


def preemptions(ckpt_dir: str | os.PathLike) -> int:
    """Preemptions served since this checkpoint folder was created (the trainer logs it as ``run/preempted``)."""
    try:
        return int(json.loads((Path(ckpt_dir) / COUNT_FILE).read_text(encoding="utf-8"))["preemptions"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def count_preemption(ckpt_dir: str | os.PathLike) -> None:
    _write(Path(ckpt_dir) / COUNT_FILE, {"preemptions": preemptions(ckpt_dir) + 1})


class DriverPreemption:
    """The driver's half: signal -> request file + grace clock; ``exit_code()`` after training returns."""

    def __init__(self, settings: RunSettings, ckpt_dir: str | os.PathLike,
                 exit_fn=os._exit, clock=time.time) -> None:  # os._exit: ends the process whatever Ray is doing
        self.settings, self.ckpt_dir = settings, Path(ckpt_dir)
        self.exit_fn, self.clock = exit_fn, clock
        self.requested_at: float | None = None
        self._timer: threading.Timer | None = None

    def install(self) -> None:
        clear_request(self.ckpt_dir)
        for name in self.settings.preempt_signals:
            signal.signal(getattr(signal, name), self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if self.requested_at is not None:
            if self.clock() - self.requested_at < REPEAT_WINDOW_S:
                return  # a copy of the same job-wide delivery (see the module docstring)
            logger.error("%s again: ending now without this step's checkpoint, exit code %d; the previous complete "
                         "checkpoint stays valid", name, self.settings.requeue_exit_code)
            self.exit_fn(self.settings.requeue_exit_code)
            return
        self.requested_at = self.clock()
        deadline = self.requested_at + self.settings.grace_s
        _write(request_path(self.ckpt_dir), {"signal": name, "requested_at": self.requested_at,
                                             "deadline": deadline})
        logger.warning("%s: preemption requested; the trainer checkpoints at the end of this step and exits with "
                       "code %d (grace %.0f s)", name, self.settings.requeue_exit_code, self.settings.grace_s)
        self._timer = threading.Timer(self.settings.grace_s, self._deadline)
        self._timer.daemon = True
        self._timer.start()

    def _deadline(self) -> None:
        request = read_request(self.ckpt_dir) or {}
        if "saved_step" in request:
            return
        logger.error("preemption: no complete checkpoint within the grace period (%.0f s); exiting with code %d. "
                     "The previous complete checkpoint stays valid (a partial one has no manifest)",
                     self.settings.grace_s, self.settings.requeue_exit_code)
        self.exit_fn(self.settings.requeue_exit_code)

    def exit_code(self) -> int | None:
        """After training returned: the requeue code when a preemption was requested, else None."""
        if self.requested_at is None:
            return None
        if self._timer is not None:
            self._timer.cancel()
        request = read_request(self.ckpt_dir) or {}
        if request.get("final"):
            logger.warning("preemption requested during the last step: the run is complete, exiting with 0")
            return None
        count_preemption(self.ckpt_dir)
        logger.warning("preemption: checkpoint at step %s written %.0f s after the signal; exiting with code %d",
                       request.get("saved_step", "?"), time.time() - self.requested_at,
                       self.settings.requeue_exit_code)
        return self.settings.requeue_exit_code
