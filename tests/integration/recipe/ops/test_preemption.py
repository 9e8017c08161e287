"""Preemption requests (``ops/preemption.py``) and the stuck-step watchdog (``ops/watchdog.py``), without Ray.

The end-to-end behaviour (a real trainer checkpointing on SIGTERM, a hung step restarted by the supervisor) is in
``tests/e2e/test_interrupted_launcher.py``; here are the rules: the request file, the grace deadline, the exit
codes, the settings' validation, and when a step counts as stuck.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from recipe.heapa.ops.preemption import (REPEAT_WINDOW_S, DriverPreemption, RunSettings, WatchdogSettings,
                                      clear_request, mark_saved, preemptions, read_request)
from recipe.heapa.settings import HeapaConfigError, parse_settings
from recipe.heapa.ops.watchdog import EX_SOFTWARE, StepWatchdog


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_signal_writes_a_request_and_the_saved_checkpoint_gives_the_requeue_code(tmp_path, restore_signals):
    exits = []
    driver = DriverPreemption(RunSettings(grace_s=30), tmp_path, exit_fn=exits.append)
    (tmp_path / "heapa_preempt.json").write_text('{"signal": "SIGTERM", "saved_step": 3}')
    driver.install()
    assert read_request(tmp_path) is None  # a request left by the previous attempt is cleared at start
    assert driver.exit_code() is None  # no signal: a normal end
    os.kill(os.getpid(), signal.SIGUSR1)
    request = read_request(tmp_path)
    assert request["signal"] == "SIGUSR1" and request["deadline"] == pytest.approx(time.time() + 30, abs=5)
    os.kill(os.getpid(), signal.SIGTERM)  # a copy of a job-wide delivery (within the repeat window): nothing
    assert read_request(tmp_path)["signal"] == "SIGUSR1" and exits == []
    mark_saved(tmp_path, 7)  # what the trainer does at the end of the step
    assert read_request(tmp_path)["saved_step"] == 7
    assert driver.exit_code() == 75 and exits == [] and preemptions(tmp_path) == 1


def test_copies_of_one_delivery_are_one_signal_and_a_later_one_ends_the_run_at_once(tmp_path, restore_signals):
    now, exits = [1000.0], []
    driver = DriverPreemption(RunSettings(grace_s=300), tmp_path, exit_fn=exits.append, clock=lambda: now[0])
    driver.install()
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: a preemption, not a KeyboardInterrupt
    for _ in range(2):  # the same delivery again through timeout and the supervisor, milliseconds later
        now[0] += 0.01
        os.kill(os.getpid(), signal.SIGTERM)
    assert read_request(tmp_path)["signal"] == "SIGINT" and exits == []
    now[0] += REPEAT_WINDOW_S
    os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: stop now
    assert exits == [75] and "saved_step" not in read_request(tmp_path)
    driver.exit_code()  # cancels the grace timer


def test_past_the_grace_period_the_driver_exits_and_a_final_step_needs_no_requeue(tmp_path, restore_signals):
    exits = []
    driver = DriverPreemption(RunSettings(grace_s=0.2, requeue_exit_code=99), tmp_path, exit_fn=exits.append)
    driver.install()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.6)
    assert exits == [99]  # the half-written checkpoint has no manifest: the next start uses the previous one
    other = DriverPreemption(RunSettings(grace_s=30), tmp_path / "b", exit_fn=exits.append)
    other.install()
    os.kill(os.getpid(), signal.SIGTERM)
    mark_saved(tmp_path / "b", 40, final=True)
    assert other.exit_code() is None and preemptions(tmp_path / "b") == 0
    clear_request(tmp_path / "b")
    assert read_request(tmp_path / "b") is None


@pytest.mark.parametrize("block, match", [
    ({"preempt_signals": ["SIGKILL"]}, "can be caught"),
    ({"preempt_signals": ["SIGNOPE"]}, "can be caught"),
    ({"grace_s": 0}, "grace_s"),
    ({"requeue_exit_code": 300}, "requeue_exit_code"),
    ({"watchdog": {"factor": -1}}, "watchdog.factor"),
    ({"watchdog": {"abort": "yes"}}, "watchdog.abort"),
    ({"watchdog": {"nope": 1}}, "nope"),
])
def test_bad_run_settings_name_the_key(block, match):
    with pytest.raises(HeapaConfigError, match=rf"heapa\.run\..*{match}"):
        parse_settings({"platform": "cpu", "selection": {"name": "uniform"}, "run": block})


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_watchdog_reports_a_step_past_its_limit_once_with_its_stage():
    clock, dumps, exits = Clock(), [], []
    dog = StepWatchdog(WatchdogSettings(factor=3.0, floor_s=10.0), clock=clock, dump=lambda _report: dumps.append(1),
                       exit_fn=exits.append)
    for step in range(1, 6):  # steps of 8 s: the limit is max(10, 3 x 8) = 24 s
        dog.step_begin(step)
        dog.stage("update_actor")
        clock.t += 8.0
        assert not dog.check()
    dog.step_begin(6)
    dog.stage("select+rollout+reward")
    clock.t += 24.0
    assert dog.limit_s() == 24.0 and not dog.check()
    clock.t += 1.0
    assert dog.check() and dumps == [1] and exits == []
    clock.t += 100.0
    assert not dog.check()  # once per step
    assert dog.metrics() == {"run/stuck_steps": 1.0}


def test_watchdog_abort_ends_the_process_and_the_floor_covers_the_first_step(caplog):
    clock, exits = Clock(), []
    dog = StepWatchdog(WatchdogSettings(floor_s=60.0, abort=True), clock=clock, dump=lambda _report: None,
                       exit_fn=exits.append)
    dog.step_begin(1)  # no history: the floor alone
    dog.stage("test_hang")
    clock.t += 59.0
    assert not dog.check()
    clock.t += 2.0
    with caplog.at_level("ERROR"):
        assert dog.check()
    assert exits == [EX_SOFTWARE]
    assert "step 1 is stuck" in caplog.text and "'test_hang'" in caplog.text



def test_watchdog_gives_the_warm_up_its_own_limit_and_leaves_it_out_of_the_median(caplog):
    clock, exits = Clock(), []
    dog = StepWatchdog(WatchdogSettings(factor=5.0, floor_s=20.0, first_step_s=120.0, abort=True), clock=clock,
                       dump=lambda _report: None, exit_fn=exits.append)
    dog.step_begin(3)  # an attempt's first step, warm-up included: 100 s is no hang
    assert dog.limit_s() == 120.0
    clock.t += 100.0
    assert not dog.check()
    dog.step_begin(4)  # nothing usual timed yet: still the warm-up's limit
    assert dog.limit_s() == 120.0 and dog.durations == []
    clock.t += 3.0
    dog.step_begin(5)  # step 4's 3 s is the median; step 3's 100 s is not (it would make the limit 5 x 51.5 s)
    assert dog.durations == [3.0] and dog.limit_s() == 20.0
    clock.t += 21.0
    with caplog.at_level("ERROR"):
        assert dog.check()
    assert exits == [EX_SOFTWARE] and "limit 20 s = max(floor_s, 5.0 x median step)" in caplog.text
    # without first_step_s the floor is the warm-up's limit too
    assert StepWatchdog(WatchdogSettings(floor_s=60.0)).limit_s() == 60.0

def test_watchdog_report_file_holds_the_whole_report_before_the_process_ends(tmp_path, monkeypatch):
    """Ray forwards a worker's stderr late; the file is complete and closed when ``exit_fn`` runs, and the
    supervisor finds it."""
    from recipe.heapa.ops.supervise import stuck_step_reports
    from recipe.heapa.ops.watchdog import dump_stacks

    monkeypatch.setenv("VERL_EXT_RUN_ATTEMPT", "2")
    monkeypatch.setattr("recipe.heapa.ops.watchdog.shutil.which", lambda _name: None)  # no `ray stack` here
    monkeypatch.setattr("recipe.heapa.ops.watchdog.sys.executable", str(tmp_path / "bin" / "python"))
    clock, seen = Clock(), []
    report = tmp_path / "ckpt" / "stuck_step_3.txt"
    began = time.time() - 1.0
    dog = StepWatchdog(WatchdogSettings(floor_s=10.0, abort=True), clock=clock, dump=dump_stacks,
                       exit_fn=lambda code: seen.append((code, report.read_text())), report_dir=tmp_path / "ckpt")
    dog.step_begin(3)
    dog.stage("update_actor")
    clock.t += 11.0
    assert dog.check()
    [(code, text)] = seen
    assert code == EX_SOFTWARE
    assert text.startswith("==== attempt 2, ")
    assert "step 3 is stuck" in text and "in stage 'update_actor'" in text and str(report) in text
    assert "stacks of the trainer's process" in text and "test_watchdog_report_file_holds" in text  # this frame
    assert "no `ray` CLI" in text and text.rstrip().endswith("restarts the run from its latest checkpoint")
    assert stuck_step_reports(tmp_path / "ckpt", since=began) == [report]
    assert stuck_step_reports(tmp_path / "ckpt", since=time.time() + 5.0) == []  # an older attempt's report
    assert stuck_step_reports(tmp_path / "absent", since=began) == []


def test_watchdog_on_a_full_disk_still_logs_and_aborts(tmp_path, monkeypatch, caplog):
    import io

    from recipe.heapa.ops.watchdog import dump_stacks

    class FullDisk(io.StringIO):
        name = str(tmp_path / "stuck_step_1.txt")

        def write(self, _text):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("recipe.heapa.ops.watchdog.open", lambda *_a, **_k: FullDisk(), raising=False)
    monkeypatch.setattr("recipe.heapa.ops.watchdog.shutil.which", lambda _name: None)
    monkeypatch.setattr("recipe.heapa.ops.watchdog.sys.executable", str(tmp_path / "bin" / "python"))
    clock, exits = Clock(), []
    dog = StepWatchdog(WatchdogSettings(floor_s=1.0, abort=True), clock=clock, dump=dump_stacks,
                       exit_fn=exits.append, report_dir=tmp_path)
    dog.step_begin(1)
    clock.t += 2.0
    with caplog.at_level("WARNING"):
        assert dog.check()
    assert exits == [EX_SOFTWARE]
    assert "No space left on device" in caplog.text and "step 1 is stuck" in caplog.text
    assert "watchdog.abort: ending the trainer" in caplog.text


def test_watchdog_thread_runs_and_stops():
    dumps = []
    dog = StepWatchdog(WatchdogSettings(floor_s=0.05, poll_s=0.02), dump=lambda _report: dumps.append(1))
    dog.start()
    dog.step_begin(1)
    time.sleep(0.3)
    dog.stop()
    assert dumps == [1]
