"""wandb offline runs: a real run written by the installed wandb SDK (offline, no network) reads back exactly."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from verl_ext.compare import wandb_offline
from verl_ext.compare.runs import load_runs

WRITER = textwrap.dedent("""
    import json, sys, wandb
    rows = [json.loads(l) for l in open(sys.argv[1])]
    big = {f"aux/k{i:05d}": float(i) for i in range(1600)}  # a > 32 KiB record: spans framing blocks
    run = wandb.init(project="verl-heapa", name="probe", dir=sys.argv[2], tags=["method:heapa_dapo", "platform:cpu"],
                     config={"heapa": {"seed": 7}}, settings=wandb.Settings(x_disable_stats=True))
    for r in rows:
        data = dict(r["data"])
        if r["step"] == 3:
            data.update(big)
        wandb.log(data, step=r["step"])
    run.finish()
""")


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory, probe_file):
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wandb_run")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    subprocess.run([sys.executable, "-c", WRITER, str(probe_file), str(root)], env=env, check=True, timeout=120,
                   capture_output=True)
    return root


@pytest.fixture(scope="module")
def probe_file():
    from pathlib import Path

    return Path(__file__).parent / "fixtures" / "heapa_dapo_probe.jsonl"


@pytest.mark.slow  # wandb-core starts and writes a real run: 2-10 s
def test_offline_run_matches_the_logged_metrics(offline_run, probe_file):
    [run] = load_runs(str(offline_run / "wandb"))
    assert (run.name, run.method, run.seed) == ("probe", "heapa_dapo", "7")
    assert run.config["heapa"] == {"seed": 7}
    expected = {obj["step"]: obj["data"] for obj in map(json.loads, probe_file.read_text().splitlines())}
    assert run.sorted_steps() == sorted(expected)
    for step, data in expected.items():
        got = {k: v for k, v in run.steps[step].items() if not k.startswith("aux/")}
        assert got == pytest.approx(data)
    assert run.steps[3]["aux/k01599"] == 1599.0  # the multi-block record
    [same] = load_runs(f"heapa_dapo_s1={next((offline_run / 'wandb').glob('offline-run-*'))}")
    assert (same.method, same.seed) == ("heapa_dapo", "1")  # NAME= wins over tags/config


def test_framing_reader_handles_blocks_and_torn_tails(tmp_path, caplog):
    def chunk(kind, payload):
        return struct.pack("<IHB", 0, len(payload), kind) + payload

    body = chunk(1, b"one") + chunk(2, b"tw") + chunk(3, b"o-") + chunk(4, b"parts")
    path = tmp_path / "run-x.wandb"
    path.write_bytes(b":W&B\xe1\xbe\x00" + body + struct.pack("<IHB", 0, 50, 1) + b"short")
    with caplog.at_level("WARNING"):
        assert list(wandb_offline.iter_records(path)) == [b"one", b"two-parts"]
    assert "torn or unknown chunk" in caplog.text
    # a chunk header never straddles a block boundary: the writer pads, the reader skips the padding
    pad_to = wandb_offline.BLOCK - 7 - 3
    first = chunk(1, b"a" * (pad_to - 7))
    path.write_bytes(b":W&B\xe1\xbe\x00" + first + b"\x00" * 3 + chunk(1, b"next"))
    assert [len(r) for r in wandb_offline.iter_records(path)] == [pad_to - 7, 4]
    path.write_bytes(b"not a wandb file")
    with pytest.raises(ValueError, match="not a wandb run file"):
        list(wandb_offline.iter_records(path))


def test_wandb_api_path_reads_history_rows(monkeypatch, probe_file):
    """The `wandb:<entity>/<project>/<run_id>` reader against a stand-in for wandb.Api (no network here)."""
    wandb = pytest.importorskip("wandb")
    rows = [{"_step": obj["step"], "_runtime": 1.0, **obj["data"]}
            for obj in map(json.loads, probe_file.read_text().splitlines())]

    class FakeRun:
        name, tags, config = "grpo-4b", ["method:grpo"], {"heapa": {"seed": 2}}

        def scan_history(self):
            return iter([dict(r) for r in rows])

    class FakeApi:
        def run(self, path):
            assert path == "me/math-rl/abc123"
            return FakeRun()

    monkeypatch.setattr(wandb, "Api", FakeApi)
    [run] = load_runs("wandb:me/math-rl/abc123")
    assert (run.name, run.method, run.seed, run.source) == ("grpo-4b", "grpo", "2", "wandb:me/math-rl/abc123")
    assert run.sorted_steps() == [0, 1, 2, 3, 4] and "_runtime" not in run.steps[1]
    assert run.steps[4]["feedback/n_rollouts"] == 32.0
