"""A stuck-step watchdog: a step that runs far longer than usual says where it is, with stacks.

An NCCL stall or a wedged rollout server hangs verl with nothing in the log to say where. ``StepWatchdog`` runs a
daemon thread in the trainer's process. The trainer marks each step's start and the stage it enters
(``stage("rollout")``, ``stage("update_actor")``, ...). When the running step exceeds
``max(floor_s, factor x median step time)`` (``heapa.run.watchdog``; the median over this attempt's steps after its
first, whose warm-up is not a usual step; until one such step has been timed, ``first_step_s``, default ``floor_s``),
the watchdog logs, once per step:

- the step, the stage and how long it has been in it;
- the Python stacks of every thread of the trainer's process (``faulthandler``, to stderr, which Ray forwards to
  the driver's log);
- the stacks of every Ray worker on this node (``ray stack``, which uses py-spy; skipped with a warning when it
  cannot run, e.g. without ptrace permission);

and counts it in ``run/stuck_steps``. With ``abort: true`` it then ends the process (exit code 70, ``EX_SOFTWARE``),
so the driver fails and the supervisor (``ops/supervise.py``) restarts the run from its latest checkpoint.

Everything it logs also goes to ``stuck_step_<step>.txt`` in the checkpoint folder (``report_dir``; a later attempt
stuck at the same step appends), closed before the process ends: Ray forwards a worker's stderr to the driver
asynchronously, and when the trainer ends right after the dump the driver tears the cluster down before the last
lines arrive. The supervisor names the file in its own log.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from recipe.heapa.ops.preemption import WatchdogSettings
from verl_ext.checkpoint_layout import STUCK_STEP_REPORT

logger = logging.getLogger(__name__)
EX_SOFTWARE = 70
HISTORY = 50  # step durations the median is taken over


class StepWatchdog:
    """See the module docstring; ``clock``, ``dump`` and ``exit_fn`` are injectable for tests."""

    def __init__(self, settings: WatchdogSettings, clock=time.monotonic, dump=None, exit_fn=os._exit,
                 report_dir: str | os.PathLike | None = None) -> None:
        self.settings, self.report_dir = settings, report_dir
        self.clock, self.exit_fn = clock, exit_fn
        self.dump = dump or dump_stacks
        self.durations: list[float] = []  # this attempt's steps after its first (warm-up is not a usual step)
        self._timed_first = False
        self.stuck_steps = 0
        self._lock = threading.Lock()
        self._step: int | None = None
        self._began = self._stage_began = 0.0
        self._stage = ""
        self._reported = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- what the trainer tells it ----------------------------------------------------------------------------
    def step_begin(self, step: int) -> None:
        now = self.clock()
        with self._lock:
            if self._step is not None:
                if self._timed_first:
                    self.durations = (self.durations + [now - self._began])[-HISTORY:]
                self._timed_first = True
            self._step, self._began, self._reported = step, now, False
            self._stage, self._stage_began = "step_begin", now
        maybe_hang_for_test(step, self)

    def stage(self, name: str) -> None:
        with self._lock:
            self._stage, self._stage_began = name, self.clock()

    def limit_s(self) -> float:
        """Seconds a step may take before it counts as stuck."""
        if not self.durations:  # the attempt's first step or the one after it: nothing usual to compare with
            return self.settings.first_step_s or self.settings.floor_s
        return max(self.settings.floor_s, self.settings.factor * statistics.median(self.durations))

    def metrics(self) -> dict[str, float]:
        return {"run/stuck_steps": float(self.stuck_steps)}

    # ---- the thread -------------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self.settings.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="heapa-step-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.poll_s):
            self.check()

    def check(self) -> bool:
        """One look at the running step; True when it was reported stuck just now."""
        with self._lock:
            if self._step is None or self._reported:
                return False
            now = self.clock()
            elapsed, limit = now - self._began, self.limit_s()
            if elapsed <= limit:
                return False
            self._reported = True
            self.stuck_steps += 1
            step, stage, in_stage = self._step, self._stage, now - self._stage_began
        report = self._open_report(step)
        rule = (f"max(floor_s, {self.settings.factor:.1f} x median step)" if self.durations
                else "first_step_s: no usual step of this attempt timed yet")
        message = (f"step {step} is stuck: {elapsed:.0f} s so far (limit {limit:.0f} s = {rule}), in stage "
                   f"'{stage}' for {in_stage:.0f} s; stacks follow" + (f" (also in {report.name})" if report else ""))
        try:
            _log_error(message, report)
            self.dump(report)
            if self.settings.abort:
                _log_error(f"watchdog.abort: ending the trainer (exit code {EX_SOFTWARE}) so the supervisor "
                           "restarts the run from its latest checkpoint", report)
        finally:
            if report is not None:
                report.close()  # on disk before the process ends
        if self.settings.abort:
            self.exit_fn(EX_SOFTWARE)
        return True

    def _open_report(self, step: int) -> TextIO | None:
        if not self.report_dir:
            return None
        path = Path(self.report_dir) / STUCK_STEP_REPORT.format(step=step)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            report = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by check()
        except OSError as err:
            logger.warning("watchdog: cannot write %s (%s): the report goes to the log only", path, err)
            return None
        _log_error(f"==== attempt {os.environ.get('VERL_EXT_RUN_ATTEMPT', '1')}, "
                   f"{time.strftime('%Y-%m-%d %H:%M:%S')} ====", report, log=False)
        return report


def _log_error(message: str, report: TextIO | None, log: bool = True) -> None:
    if log:
        logger.error("%s", message)
    if report is not None and not report.closed:
        try:
            report.write(message + "\n")
            report.flush()
        except OSError as err:  # a full disk must not stop the dump to the log, nor the abort
            logger.warning("watchdog: writing %s failed (%s): the rest goes to the log only", report.name, err)
            report.close()


def dump_stacks(report: TextIO | None = None) -> None:
    """This process's threads (faulthandler) and this node's Ray workers (``ray stack``, py-spy), to stderr and to
    ``report`` when given."""
    for stream in (sys.stderr, report):
        if stream is not None and not stream.closed:
            stream.write("==== heapa watchdog: stacks of the trainer's process ====\n")
            stream.flush()  # faulthandler writes to the file descriptor, past Python's buffer
            faulthandler.dump_traceback(file=stream, all_threads=True)
    ray_cli = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    if not os.path.exists(ray_cli):
        _log_error(f"watchdog: no `ray` CLI next to {sys.executable}: Ray workers' stacks not dumped", report)
        return
    try:
        out = subprocess.run([ray_cli, "stack"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        _log_error(f"watchdog: `ray stack` failed ({err}): Ray workers' stacks not dumped", report)
        return
    text = (out.stdout or "") + (out.stderr or "")
    _log_error(f"==== heapa watchdog: `ray stack` (exit {out.returncode}) ====\n{text[-200_000:]}", report)


HANG_ENV = "VERL_EXT_TEST_HANG"


def maybe_hang_for_test(step: int, watchdog: StepWatchdog) -> None:
    """The e2e tests' stuck step: ``VERL_EXT_TEST_HANG=<step>:<seconds>[:<attempt>]`` sleeps at the start of that
    step (of that supervised attempt only, ``VERL_EXT_RUN_ATTEMPT``), in the stage ``test_hang``."""
    spec = os.environ.get(HANG_ENV)
    if not spec:
        return
    parts = spec.split(":")
    attempt = parts[2] if len(parts) > 2 else None
    if int(parts[0]) != step or (attempt is not None and os.environ.get("VERL_EXT_RUN_ATTEMPT", "1") != attempt):
        return
    watchdog.stage("test_hang")
    logger.warning("%s: step %d hangs for %s s (test hook)", HANG_ENV, step, parts[1])
    time.sleep(float(parts[1]))
