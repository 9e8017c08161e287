"""Helpers for the CPU end-to-end tests: run ``python -m verl.trainer.main_ppo`` under a hard timeout, sample the
memory of its whole process tree, read verl's JSONL file logger.

Not a test module and not a package (verl's wheel owns the top-level ``tests`` name): ``tests/e2e/conftest.py``
puts this directory on ``sys.path`` and hands the module to tests as the ``e2e_runner`` fixture.

Why the care with processes: ``main_ppo`` starts its own local Ray cluster (gcs, raylet, workers, actors). A Ray
resource shortfall does not fail, it hangs; so every run gets a wall-clock limit, runs in its own session
(``start_new_session=True``) and, on timeout or on exit, everything left in that session is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:  # ray[default] brings psutil; without it memory is not measured (the test still runs)
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

GIB = 1024**3


@dataclass
class RunResult:
    """What one trainer subprocess did."""

    cmd: list[str]
    returncode: int | None
    timed_out: bool
    wall_s: float
    log_path: Path
    peak_rss_bytes: int = 0  # max over time of the summed RSS of the session's processes (counts shared pages twice)
    peak_pss_bytes: int = 0  # the same with PSS (shared pages split), sampled every 5 s: the honest "memory used"
    peak_procs: int = 0
    stray_pids: list[str] = field(default_factory=list)  # 'pid:cmd' still alive 15 s after exit (then killed)

    def assert_no_strays(self) -> None:
        """A run must leave nothing behind (its driver ends its Ray cluster: ``recipe/heapa/ops/ray_cleanup.py``);
        the runner has killed the strays already, this makes them a test failure instead of a leak."""
        assert not self.stray_pids, (f"processes still alive 15 s after the run ended (killed by the runner): "
                                     f"{self.stray_pids}\n{tail(self.log_path, 30)}")

    def summary(self) -> str:
        rc = "timeout" if self.timed_out else f"rc={self.returncode}"
        return (f"{rc} wall={self.wall_s:.0f}s peak_pss={self.peak_pss_bytes / GIB:.2f}GiB "
                f"peak_rss_sum={self.peak_rss_bytes / GIB:.2f}GiB procs<={self.peak_procs} "
                f"strays={len(self.stray_pids)}")


def tail(path: Path, lines: int = 80) -> str:
    """The last ``lines`` lines of a log file (what a failing test prints)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"<no log at {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _session_procs(sid: int, root_pid: int) -> list:
    """Processes in session ``sid`` plus any descendant of ``root_pid`` that left it (Ray may setsid)."""
    found = {}
    try:
        root = psutil.Process(root_pid)
        for proc in [root, *root.children(recursive=True)]:
            found[proc.pid] = proc
    except psutil.Error:
        pass
    for proc in psutil.process_iter():
        try:
            if proc.pid not in found and os.getsid(proc.pid) == sid:
                found[proc.pid] = proc
        except (OSError, psutil.Error):
            continue
    return list(found.values())


class _MemorySampler(threading.Thread):
    """Every ``interval`` s: the session's processes (escapes noted), their summed RSS; every ``pss_every``-th
    tick also their PSS. PSS reads each process's whole smaps (~11 ms for a process that imported torch, ~20 Ray
    processes a run): once a second that was an eighth of this 2-core machine, taken from the run it measures."""

    def __init__(self, sid: int, root_pid: int, interval: float = 1.0, pss_every: int = 5):
        super().__init__(daemon=True)
        self.sid, self.root_pid, self.interval, self.pss_every = sid, root_pid, interval, pss_every
        self.peak_rss = self.peak_pss = self.peak_procs = 0
        self.escaped: dict[int, float] = {}  # descendants that left the session: pid -> create_time
        self._stop_event = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self._stop_event.wait(self.interval):
            tick += 1
            with_pss = tick % self.pss_every == 0
            rss = pss = 0
            procs = _session_procs(self.sid, self.root_pid)
            for proc in procs:
                try:
                    if _sid(proc.pid) != self.sid:
                        self.escaped.setdefault(proc.pid, proc.create_time())
                    if with_pss:
                        info = proc.memory_full_info()
                        pss += getattr(info, "pss", info.rss)
                    else:
                        info = proc.memory_info()
                    rss += info.rss
                except psutil.Error:
                    continue
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, len(procs))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def _kill_escaped(escaped: Mapping[int, float]) -> list[str]:
    """Kill descendants that moved to another session, if they are still the same processes."""
    killed = []
    for pid, created in escaped.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created:
                killed.append(_describe(pid))
                proc.kill()
        except psutil.Error:
            continue
    return killed


def _session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    if psutil is None:
        return []
    pids = []
    for proc in psutil.process_iter():
        try:
            if _sid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def _describe(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        return f"{pid}:{' '.join(proc.cmdline()[:2])[:80] or proc.name()}"
    except psutil.Error:
        return f"{pid}:<gone>"


def _kill_session(sid: int, linger_s: float = 0.0, grace_s: float = 10.0) -> list[str]:
    """Give session ``sid`` (our own process group) ``linger_s`` to exit by itself, then SIGTERM, then SIGKILL.

    Returns the processes that were still alive after the linger time (Ray tears its cluster down
    asynchronously, so a clean run may need a few seconds).
    """
    deadline = time.time() + linger_s
    while _session_pids(sid) and time.time() < deadline:
        time.sleep(0.5)
    alive = [_describe(pid) for pid in _session_pids(sid) if pid != sid]
    try:
        os.killpg(sid, signal.SIGTERM)
    except ProcessLookupError:
        return alive
    deadline = time.time() + grace_s
    while time.time() < deadline and (psutil is None or _session_pids(sid)):
        if psutil is None:
            break
        time.sleep(0.5)
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return alive


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def run_logged(cmd: Sequence[str], *, env: Mapping[str, str], log_path: Path, timeout_s: float,
               cwd: Path | None = None) -> RunResult:
    """Run ``cmd`` with stdout+stderr to ``log_path``; kill its whole session on timeout; measure it."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        sampler = _MemorySampler(proc.pid, proc.pid) if psutil else None
        if sampler:
            sampler.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # KeyboardInterrupt, pytest-timeout: never leave a Ray cluster behind
            _kill_session(proc.pid, grace_s=2)
            if sampler:
                _kill_escaped(sampler.escaped)
            raise
        finally:
            wall = time.monotonic() - start
            if sampler:
                sampler.stop()
        # main_ppo shuts its Ray cluster down on a clean exit; whatever is left (timeout, crash) is killed here.
        strays = _kill_session(proc.pid, linger_s=0.0 if timed_out else 15.0)
        if sampler:
            strays += _kill_escaped(sampler.escaped)
        if timed_out:
            proc.wait(timeout=30)
    if timed_out:
        with open(log_path, "ab") as log:
            log.write(f"\n[e2e runner] killed after {timeout_s:.0f}s wall-clock limit\n".encode())
    return RunResult(
        cmd=list(cmd), returncode=None if timed_out else proc.returncode, timed_out=timed_out, wall_s=wall,
        log_path=log_path, peak_rss_bytes=sampler.peak_rss if sampler else 0,
        peak_pss_bytes=sampler.peak_pss if sampler else 0, peak_procs=sampler.peak_procs if sampler else 0,
        stray_pids=strays,
    )


def read_metrics(path: Path) -> dict[int, dict]:
    """verl's ``file`` logger JSONL (``{"step": N, "data": {...}}`` per line) merged per step."""
    steps: dict[int, dict] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            steps.setdefault(int(row["step"]), {}).update(row["data"])
    return steps


def main_ppo_command(overrides: Iterable[str]) -> list[str]:
    return [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]


def trainer_env(metrics_path: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CPU run: the platform switch, offline hub/wandb, the JSONL metrics file."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # never attach to someone else's cluster
    env.update({
        "VERL_PLATFORM": "cpu",
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "VERL_FILE_LOGGER_PATH": str(metrics_path),
        "RAY_DEDUP_LOGS": "0",
    })
    env.update(extra or {})
    return env


def run_until_killed(cmd: Sequence[str], *, env: Mapping[str, str], log_path: Path, timeout_s: float,
                     kill_when, cwd: Path | None = None, poll_s: float = 1.0) -> RunResult:
    """Run ``cmd`` like ``run_logged`` but SIGKILL its whole session the moment ``kill_when()`` is true (a crash
    or ``kill -9`` mid-run, no clean-up of any kind). ``returncode`` is -9 when it was killed that way; a run that
    ended by itself first keeps its own code."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        sampler = _MemorySampler(proc.pid, proc.pid) if psutil else None
        if sampler:
            sampler.start()
        killed = timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                    break
                if kill_when():
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
                time.sleep(poll_s)
        finally:
            wall = time.monotonic() - start
            if sampler:
                sampler.stop()
            strays = _kill_session(proc.pid, grace_s=2)
            if sampler:
                strays += _kill_escaped(sampler.escaped)
            proc.wait(timeout=30)
    if killed or timed_out:
        with open(log_path, "ab") as log:
            why = "SIGKILL on request" if killed else f"killed after {timeout_s:.0f}s wall-clock limit"
            log.write(f"\n[e2e runner] {why}\n".encode())
    return RunResult(
        cmd=list(cmd), returncode=-9 if killed else (None if timed_out else proc.returncode), timed_out=timed_out,
        wall_s=wall, log_path=log_path, peak_rss_bytes=sampler.peak_rss if sampler else 0,
        peak_pss_bytes=sampler.peak_pss if sampler else 0, peak_procs=sampler.peak_procs if sampler else 0,
        stray_pids=strays,
    )


def run_and_signal(cmd: Sequence[str], *, env: Mapping[str, str], log_path: Path, timeout_s: float, signal_when,
                   signum: int = signal.SIGTERM, cwd: Path | None = None, poll_s: float = 0.5,
                   group: bool = False) -> tuple[RunResult, float]:
    """Run ``cmd`` like ``run_logged`` and send ``signum`` the moment ``signal_when()`` is true: to its first process
    only (as Kubernetes does), or with ``group`` to every process of its process group (as Slurm's ``scancel``, ``kill
    -- -PGID`` and a terminal's Ctrl-C do); it then runs on until it exits. Returns the result and the wall time of
    the signal (None if it was never sent)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    sent_at = None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                    break
                if sent_at is None and signal_when():
                    if group:
                        os.killpg(proc.pid, signum)  # its own session: process group id = its pid
                    else:
                        proc.send_signal(signum)
                    sent_at = time.monotonic() - start
                time.sleep(poll_s)
        finally:
            wall = time.monotonic() - start
            strays = _kill_session(proc.pid, linger_s=0.0 if timed_out else 15.0, grace_s=2)
            proc.wait(timeout=30)
    return RunResult(cmd=list(cmd), returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                     wall_s=wall, log_path=log_path, stray_pids=strays), sent_at


def pool_records(ckpt: Path) -> dict[int, dict]:
    """The pool's records in a checkpoint folder's ``pool_state.pkl``: record id -> its fields by name."""
    import pickle

    with open(Path(ckpt) / "pool_state.pkl", "rb") as fh:
        pool = pickle.load(fh)["pool"]  # noqa: S301 - the run's own checkpoint
    fields = pool["record_fields"]
    return {row[fields.index("id")]: dict(zip(fields, row)) for row in pool["records"]}


def metric_lines(path: Path) -> list[dict]:
    """Every line of a file-logger JSONL (``{"step": N, "data": {...}}``), in order, nothing merged."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def recipe_overrides(assets: Path, out: Path, method: str, *, steps: int, resume_from: Path | None = None,
                     seeds: int = 16, save_freq: int = 2, resume_mode: str | None = None) -> list[str]:
    """The recipe's small CPU run (batch 8 x 4, augmentation with the programmatic teacher, a trace file)."""
    resume = (["trainer.resume_mode=resume_path", f"trainer.resume_from_path={resume_from}"] if resume_from
              else [f"trainer.resume_mode={resume_mode or 'disable'}"])
    return [
        f"method={method}", "platform=cpu",
        "+ray_kwargs.ray_init.address=local",
        f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"data.val_files={assets / 'data' / 'val.parquet'}",
        f"data.train_max_samples={seeds}", "data.shuffle=False",
        "data.train_batch_size=8", "data.val_batch_size=32", "data.val_max_samples=32",
        "data.max_prompt_length=64", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets / 'model'}",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
        "reward.reward_kwargs.overlong_buffer.len=4",
        "heapa.augmentation.prompt_preset=tiny", "heapa.teacher.backend=programmatic",
        "heapa.augmentation.max_new_tokens=24", "heapa.augmentation.num_parents=8",
        "heapa.augmentation.band_high=1.0", "heapa.augmentation.num_per_prompt=2",
        f"heapa.trace_file={out / 'trace.jsonl'}",
        "trainer.logger=[console,file]", "trainer.project_name=heapa_e2e", f"trainer.experiment_name={method}",
        f"trainer.total_training_steps={steps}", f"trainer.save_freq={save_freq}", "trainer.test_freq=-1",
        "trainer.val_before_train=False", f"trainer.default_local_dir={out / 'ckpt'}", *resume,
    ]


def read_trace(path: Path) -> dict[int, dict]:
    return {row["step"]: row for row in map(json.loads, path.read_text().splitlines())} if path.exists() else {}


def run_recipe(repo_root: Path, out: Path, overrides: list[str], timeout_s: float | None = None):
    """``python -m recipe.heapa.main_heapa`` with ``overrides``; must exit 0. (metrics by step, trace by step)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "recipe.heapa.main_heapa", *overrides]
    timeout_s = timeout_s or float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
    res = run_logged(cmd, env=trainer_env(out / "metrics.jsonl"), log_path=out / "run.log", timeout_s=timeout_s,
                     cwd=repo_root)
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{tail(out / 'run.log')}"
    res.assert_no_strays()
    print(f"{out.name}: {res.summary()}")
    return read_metrics(out / "metrics.jsonl"), read_trace(out / "trace.jsonl")
