"""A stuck-step watchdog: a step that runs far longer than usual says where it is, with stacks.

An NCCL stall or a wedged rollout server hangs verl with nothing in the log to say where. ``StepWatchdog`` runs a
daemon thread in the trainer's process. The trainer marks each step's start and the stage it enters
(``stage("rollout")``, ``stage("update_actor")``, ...). When the running step exceeds
``max(floor_s, factor x median step time)`` (``heapa.run.watchdog``), the watchdog logs, once per step:

- the step, the stage and how long it has been in it;
- the Python stacks of every thread of the trainer's process (``faulthandler``, to stderr, which Ray forwards to
  the driver's log);
- the stacks of every Ray worker on this node (``ray stack``, which uses py-spy; skipped with a warning when it
  cannot run, e.g. without ptrace permission);

and counts it in ``run/stuck_steps``. With ``abort: true`` it then ends the process (exit code 70, ``EX_SOFTWARE``),
so the driver fails and the supervisor (``ops/supervise.py``) restarts the run from its latest checkpoint.
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

from recipe.heapa.ops.preemption import WatchdogSettings

logger = logging.getLogger(__name__)
EX_SOFTWARE = 70
HISTORY = 50  # step durations the median is taken over


class StepWatchdog:
    """See the module docstring; ``clock``, ``dump`` and ``exit_fn`` are injectable for tests."""

    def __init__(self, settings: WatchdogSettings, clock=time.monotonic, dump=None, exit_fn=os._exit) -> None:
        self.settings = settings
        self.clock, self.exit_fn = clock, exit_fn
        self.dump = dump or dump_stacks
        self.durations: list[float] = []
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
                self.durations = (self.durations + [now - self._began])[-HISTORY:]
            self._step, self._began, self._reported = step, now, False
            self._stage, self._stage_began = "step_begin", now
        maybe_hang_for_test(step, self)

    def stage(self, name: str) -> None:
        with self._lock:
            self._stage, self._stage_began = name, self.clock()

    def limit_s(self) -> float:
        """Seconds a step may take before it counts as stuck."""
        median = statistics.median(self.durations) if self.durations else 0.0
        return max(self.settings.floor_s, self.settings.factor * median)

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
        logger.error("step %d is stuck: %.0f s so far (limit %.0f s = max(floor_s, %.1f x median step)), in stage "
                     "'%s' for %.0f s; stacks follow", step, elapsed, limit, self.settings.factor, stage, in_stage)
        self.dump()
        if self.settings.abort:
            logger.error("watchdog.abort: ending the trainer (exit code %d) so the supervisor restarts the run from "
                         "its latest checkpoint", EX_SOFTWARE)
            self.exit_fn(EX_SOFTWARE)
        return True


def dump_stacks() -> None:
    """This process's threads (faulthandler) and this node's Ray workers (``ray stack``, py-spy)."""
    sys.stderr.write("==== heapa watchdog: stacks of the trainer's process ====\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    ray_cli = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
    if not os.path.exists(ray_cli):
        logger.warning("watchdog: no `ray` CLI next to %s: Ray workers' stacks not dumped", sys.executable)
        return
    try:
        out = subprocess.run([ray_cli, "stack"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        logger.warning("watchdog: `ray stack` failed (%s): Ray workers' stacks not dumped", err)
        return
    text = (out.stdout or "") + (out.stderr or "")
    logger.error("==== heapa watchdog: `ray stack` (exit %d) ====\n%s", out.returncode, text[-200_000:])


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
