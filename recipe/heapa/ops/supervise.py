"""Supervised restarts: ``python -m recipe.heapa.ops.supervise --ckpt-dir DIR -- python -m recipe.heapa.main_heapa``.

A long run on shared nodes loses a Ray worker now and then (a rollout replica killed for memory, a reward worker
segfault, a lost node) and verl ends the job. The launchers run the trainer under this supervisor, which starts
it again from its latest checkpoint, up to ``--max-restarts`` times (``MAX_RESTARTS``, default 2) after
``--backoff-s`` seconds (``RESTART_BACKOFF_S``, default 30), and logs why each attempt ended. It restarts only
after progress: an attempt that ends without a newer checkpoint than it started from (a bad config, a crash that
repeats at the same step) stops the loop with its exit code and a message saying so. A restart appends
``trainer.resume_mode=auto`` (the last override wins), so it resumes whatever the first attempt was told.
SIGTERM/SIGINT/SIGUSR1 are passed to the trainer and end the loop (a scheduler's stop is not a crash; the trainer
checkpoints and exits with the requeue code, ``ops/preemption.py``). That code (``--requeue-exit-code``, 75) also ends
the loop when the signal reached only the trainer: a preempted node is not restarted on. Each attempt sees
``VERL_EXT_RUN_ATTEMPT`` / ``VERL_EXT_RUN_RESTARTS``; the trainer logs them as ``run/attempt`` / ``run/restarts``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from verl_ext.checkpoint_layout import STUCK_STEP_REPORT, TRACKER

logger = logging.getLogger("recipe.heapa.ops.supervise")
ATTEMPT_ENV, RESTARTS_ENV = "VERL_EXT_RUN_ATTEMPT", "VERL_EXT_RUN_RESTARTS"
PREEMPTED_ENV = "VERL_EXT_RUN_PREEMPTED"  # preemptions served so far (ops/preemption.py), set by the driver


def latest_step(ckpt_dir: str | os.PathLike) -> int:
    """The step verl's tracker file names (0 when there is none or it is unreadable)."""
    try:
        return int((Path(ckpt_dir) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return 0


def run_metrics() -> dict[str, float]:
    """``run/attempt`` (1 = the first) and ``run/restarts`` of this process, from the supervisor's environment."""
    return {"run/attempt": float(os.environ.get(ATTEMPT_ENV, "1")),
            "run/restarts": float(os.environ.get(RESTARTS_ENV, "0")),
            "run/preempted": float(os.environ.get(PREEMPTED_ENV, "0"))}


class Supervisor:
    def __init__(self, cmd: list[str], ckpt_dir: str, max_restarts: int, backoff_s: float,
                 requeue_code: int = 75) -> None:
        if not cmd:
            raise SystemExit("supervise: no command after --")
        self.cmd, self.ckpt_dir = cmd, ckpt_dir
        self.max_restarts, self.backoff_s = max(0, max_restarts), max(0.0, backoff_s)
        self.requeue_code = requeue_code
        self.child: subprocess.Popen | None = None
        self.stopping = False

    def _forward(self, signum, _frame) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):  # USR1: a scheduler's preemption notice
            signal.signal(signum, self._forward)
        restarts = 0
        while True:
            start = latest_step(self.ckpt_dir)
            cmd = self.cmd + (["trainer.resume_mode=auto"] if restarts else [])
            env = dict(os.environ, **{ATTEMPT_ENV: str(restarts + 1), RESTARTS_ENV: str(restarts)})
            began = time.time()
            self.child = subprocess.Popen(cmd, env=env)
            rc = self.child.wait()
            for report in stuck_step_reports(self.ckpt_dir, since=began):
                logger.warning("attempt %d: the watchdog's report of a stuck step: %s", restarts + 1, report)
            if rc == 0 or self.stopping:
                return rc
            if rc == self.requeue_code:  # the trainer checkpointed for a preemption (ops/preemption.py): not a crash
                logger.warning("attempt %d was preempted (exit code %d): passing the code on, not restarting here",
                               restarts + 1, rc)
                return rc
            end = latest_step(self.ckpt_dir)
            logger.warning("attempt %d ended with exit code %d; latest checkpoint: step %d (step %d at its start)",
                           restarts + 1, rc, end, start)
            if end <= start:
                logger.error("no checkpoint newer than step %d was written during the attempt: not restarting "
                             "(a crash before the first checkpoint, or one that repeats without progress)", start)
                return rc
            if restarts >= self.max_restarts:
                logger.error("restarted %d time(s) already (MAX_RESTARTS=%d): giving up", restarts,
                             self.max_restarts)
                return rc
            restarts += 1
            logger.warning("restart %d of %d from step %d in %.0f s", restarts, self.max_restarts, end,
                           self.backoff_s)
            time.sleep(self.backoff_s)
            if self.stopping:
                return rc


def stuck_step_reports(ckpt_dir: str | os.PathLike, since: float) -> list[Path]:
    """The watchdog's reports (``ops/watchdog.py``) written since ``since`` (a ``time.time()``)."""
    folder = Path(ckpt_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob(STUCK_STEP_REPORT.format(step="*")) if p.stat().st_mtime >= since)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[verl-heapa supervise] %(asctime)s %(levelname)s %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m recipe.heapa.ops.supervise --ckpt-dir DIR [--max-restarts N] "
                         "[--backoff-s S] -- COMMAND ...")
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m recipe.heapa.ops.supervise")
    p.add_argument("--ckpt-dir", required=True, help="trainer.default_local_dir (its tracker file shows progress)")
    p.add_argument("--max-restarts", type=int, default=int(os.environ.get("MAX_RESTARTS", "2")))
    p.add_argument("--backoff-s", type=float, default=float(os.environ.get("RESTART_BACKOFF_S", "30")))
    p.add_argument("--requeue-exit-code", type=int, default=int(os.environ.get("REQUEUE_EXIT_CODE", "75")),
                   help="the trainer's exit code after a preemption checkpoint (heapa.run.requeue_exit_code)")
    args = p.parse_args(argv[:split])
    return Supervisor(argv[split + 1:], args.ckpt_dir, args.max_restarts, args.backoff_s,
                      args.requeue_exit_code).run()


if __name__ == "__main__":
    sys.exit(main())
