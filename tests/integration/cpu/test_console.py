"""The CPU platform's console (verl_ext/cpu/console.py): the validation line, the quieted warnings and threads,
and the hooks on verl's ``Tracking`` (summary line after the console dump; wandb's service torn down on finish)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from verl_ext.cpu import ENV_DEFAULTS, console


def test_validation_line_one_source():
    data = {"val-core/arith/acc/mean@1": 0.2134, "val-aux/arith/reward/mean@1": 0.2, "actor/lr": 1e-3}
    assert console.validation_line(data, 10, 512) == "[verl-heapa] step 10: val acc 0.213 (arith, 512 problems)"
    line = console.validation_line(data, 20, 512, first={"arith": 0.13}, first_step=0)
    assert line == "[verl-heapa] step 20: val acc 0.213 (+0.083 since step 0; arith, 512 problems)"
    assert console.validation_line({"actor/lr": 1e-3, "val-aux/arith/acc/mean@1": 0.5}, 3) is None


def test_validation_line_several_sources_and_samples():
    data = {"val-core/aime24/acc/mean@16": 0.1, "val-core/math500/acc/mean@16": 0.5,
            "val-core/math500/acc/best@16/mean": 0.9}
    line = console.validation_line(data, 25, None)
    assert line == "[verl-heapa] step 25: val acc (mean@16) 0.300 = mean of aime24 0.100, math500 0.500 (2 sets)"
    assert console.validation_line({"val-core/x/reward/mean@1": 1.0}, 1).startswith("[verl-heapa] step 1: val reward")


def test_the_console_keeps_the_first_validation_for_the_change():
    lines = []

    class Stream:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    c = console.ValidationConsole(16, stream=Stream())
    c.log({"val-core/arith/acc/mean@1": 0.25}, 0)
    c.log({"actor/lr": 1.0}, 1)  # a step without validation prints nothing
    c.log({"val-core/arith/acc/mean@1": 0.5}, 10)
    text = "".join(lines)
    assert text.count("[verl-heapa]") == 2 and "(+0.250 since step 0; arith, 16 problems)" in text


def test_count_problems_reads_parquet_footers_and_the_cap(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, n in (("a", 30), ("b", 500)):
        pq.write_table(pa.table({"x": list(range(n))}), tmp_path / f"{name}.parquet")
    files = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    assert console.count_problems({"data": {"val_files": files, "val_max_samples": -1}}) == 530
    assert console.count_problems({"data": {"val_files": files[0], "val_max_samples": 16}}) == 16
    assert console.count_problems({"data": {"val_files": [str(tmp_path / "c.jsonl")]}}) is None
    assert console.count_problems(None) is None


def test_thread_counts_match_the_cores():
    psutil = pytest.importorskip("psutil")
    assert ENV_DEFAULTS["TQ_NUM_THREADS"] == str(psutil.cpu_count(logical=False) or os.cpu_count())


def _import_verl_engines(platform: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    if platform:
        env["VERL_PLATFORM"] = platform
    out = subprocess.run([sys.executable, "-W", "default", "-c", "import verl, verl.workers.engine"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stderr


@pytest.mark.slow  # two interpreter starts importing verl (~10 s)
def test_optional_engine_warnings_are_quiet_only_on_the_cpu_platform():
    assert "engine is not available" not in _import_verl_engines("cpu")
    assert "engine is not available" in _import_verl_engines(None)  # GPU runs keep verl's behaviour


@pytest.fixture
def hooked_tracking():
    """verl's Tracking with the hooks installed, restored afterwards."""
    from verl.utils.tracking import Tracking

    was_installed = getattr(Tracking, "_verl_ext_console", False)  # prepare() in another test installs it
    console.uninstall_tracking_hook()
    own = (Tracking.__init__, Tracking.log, Tracking.finish)
    console.install_tracking_hook()
    console.install_tracking_hook()  # idempotent: one summary line, not two
    yield Tracking
    console.uninstall_tracking_hook()
    assert (Tracking.__init__, Tracking.log, Tracking.finish) == own
    if was_installed:
        console.install_tracking_hook()


def test_tracking_prints_one_summary_line_after_the_console_dump(hooked_tracking, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VERL_EXT_CONSOLE", "full")  # verl's own dict line kept on the console
    import pyarrow as pa
    import pyarrow.parquet as pq

    val = tmp_path / "val.parquet"
    pq.write_table(pa.table({"x": list(range(40))}), val)
    config = {"trainer": {}, "data": {"val_files": [str(val)], "val_max_samples": 32}}
    tracking = hooked_tracking(project_name="p", experiment_name="e", default_backend=["console"], config=config)
    tracking.log(data={"val-core/arith/acc/mean@1": 0.125}, step=0)
    tracking.log(data={"actor/lr": 0.001}, step=1)
    tracking.log(data={"val-core/arith/acc/mean@1": 0.25, "actor/lr": 0.001}, step=2)
    out = capsys.readouterr().out.splitlines()
    summaries = [line for line in out if line.startswith("[verl-heapa]")]
    assert summaries == ["[verl-heapa] step 0: val acc 0.125 (arith, 32 problems)",
                         "[verl-heapa] step 2: val acc 0.250 (+0.125 since step 0; arith, 32 problems)"]
    assert out.index(summaries[0]) == 1  # right after verl's own console line of that step


def test_finish_tears_the_wandb_service_down_once(hooked_tracking):
    calls = []

    class FakeWandb:
        @staticmethod
        def finish(exit_code=0):
            calls.append(("finish", exit_code))

        @staticmethod
        def teardown(exit_code=None):
            calls.append(("teardown", exit_code))

    tracking = hooked_tracking(project_name="p", experiment_name="e", default_backend=["console"])
    tracking.logger["wandb"] = FakeWandb
    tracking.finish(exit_code=0)
    tracking.finish(exit_code=0)  # verl's __del__ calls it again
    assert calls == [("finish", 0), ("teardown", 0)]


def test_verl_validation_dump_is_replaced_by_the_summary(hooked_tracking, capsys, monkeypatch):
    import pprint

    from verl.trainer.ppo.v1 import trainer_base

    monkeypatch.setattr(trainer_base, "pprint", pprint.pprint)
    hooked_tracking(project_name="p", experiment_name="e", default_backend=["console"])
    trainer_base.pprint("Initial validation metrics: {'val-core/arith/acc/mean@1': 0.1}")
    trainer_base.pprint({"kept": 1})
    assert capsys.readouterr().out == "{'kept': 1}\n"


def _kept_run_steps():
    """40 steps of a kept HeaPA-GRPO CPU run's metrics (trimmed to the prefixes the comparison keeps)."""
    path = Path(__file__).resolve().parents[3] / "results" / "cpu_long" / "heapa_grpo_s3" / "metrics.jsonl.gz"
    rows = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line.strip()]
    return [(r["step"], r["data"]) for r in rows if r["step"] <= 40]


def _console_bytes(hooked_tracking, capsys, monkeypatch, mode):
    monkeypatch.setenv("VERL_EXT_CONSOLE", mode)
    config = {"trainer": {"total_training_steps": 40}, "data": {}}
    tracking = hooked_tracking(project_name="p", experiment_name="e", default_backend=["console"], config=config)
    capsys.readouterr()
    for step, data in _kept_run_steps():
        tracking.log(data=data, step=step)
    return capsys.readouterr().out


def test_compact_console_one_line_a_step_and_under_20_kb_for_40_steps(hooked_tracking, capsys, monkeypatch):
    out = _console_bytes(hooked_tracking, capsys, monkeypatch, "compact")
    lines = out.splitlines()
    step_lines = [ln for ln in lines if " s/step" in ln]
    assert len(step_lines) == 40
    shape = re.compile(r"^\[verl-heapa\] step (\d+)/40 \| reward \d\.\d{3} \| zero-signal \d+% \| (frontier [\d,]+ \| )?"
                       r"rollouts [\d,]+ \| \d+\.\d s/step( \| (\d+h)?(\d+m)?\d+s left)?$")
    assert all(shape.match(ln) for ln in step_lines), step_lines[:3]
    assert "left" in step_lines[0] and "left" not in step_lines[-1]
    validations = [ln for ln in lines if ": val acc " in ln]
    assert len(validations) == 5 and validations[0].startswith("[verl-heapa] step 0: val acc")
    assert len(lines) == 45 and len(out.encode()) < 20_000


def test_full_console_restores_verls_dict(hooked_tracking, capsys, monkeypatch):
    out = _console_bytes(hooked_tracking, capsys, monkeypatch, "full")
    assert len(out.encode()) > 100_000  # what the compact line saves: verl's dict of every metric, every step
    assert "critic/score/mean" in out


def test_a_terminal_gets_one_progress_line_rewritten_in_place():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    c = console.StepConsole(None, 3, stream=stream)
    c.log({"timing_s/step": 2.0, "critic/score/mean": 0.5}, 1)
    c.log({"timing_s/step": 4.0, "critic/score/mean": 0.6, "val-core/a/acc/mean@1": 0.3}, 2)
    text = stream.getvalue()
    assert text.startswith("\r[verl-heapa] step 1/3 | reward 0.500 | 2.0 s/step | 4s left")
    assert "\r[verl-heapa] step 2/3 | reward 0.600 | 4.0 s/step | 3s left\x1b[K\n[verl-heapa] step 2: val acc 0.300" in text
