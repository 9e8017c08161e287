"""A launcher attached to a running two-node Ray cluster (the multi-node path of README "On a GPU cluster").

Two Ray nodes on this one machine, each started by ``ray start`` with its own resources (16 logical CPUs, 1
logical GPU) and its own temp dir: ``ray start --head`` then ``ray start --address=<head>``, as on a cluster. The
nodes' environment is a clean shell (no VERL_*/WANDB_* variables): what the trainer's workers need must travel in
the runtime env. Then ``RAY_ADDRESS=<head> FORCE_CPU=1 bash scripts/run_heapa_grpo_qwen.sh ... trainer.nnodes=2
trainer.n_gpus_per_node=1`` trains 2 steps (checkpoint at step 2), and the same command with STEPS=3 resumes from
``global_step_2`` and trains step 3. verl's resource pool is [1, 1]: one FSDP actor/rollout rank per node (two
rollout replicas), checked in the GCS actor table while the cluster is still up (dead actors keep their node id).

Ray's ``ray stop`` kills every Ray process of the machine (other tests' clusters included), so the nodes are
stopped by their own process sessions (``_runner._kill_session``). The cluster uses token authentication with a
token file of its own (Ray 2.60's ``ray start --head`` turns it on by default; ~/.ray is left alone).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_TIMEOUT_S = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
START_TIMEOUT_S = 240.0  # one `ray start` on a loaded 2-core machine takes 10-30 s
PROBE_TIMEOUT_S = 180.0
RAY = Path(sys.executable).with_name("ray")
NODE_FLAGS = ["--num-cpus=16", "--num-gpus=1", "--node-ip-address=127.0.0.1", "--object-store-memory=400000000",
              "--disable-usage-stats"]
# Read with the GCS actor table: ray.util.state needs the dashboard, which these nodes do not run.
PROBE = r"""
import json, sys, time
import ray
from ray._private import state
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
want, deadline = int(sys.argv[2]), time.time() + float(sys.argv[3])
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= want or time.time() > deadline:
        break
    time.sleep(1.0)
actors = [{"cls": a["ActorClassName"], "name": a.get("Name"), "state": a["State"], "job": a["JobID"],
           "node": a["Address"]["NodeID"]} for a in state.actors().values()]
print("PROBE " + json.dumps({"nodes": [{"id": n["NodeID"], "head": "node:__internal_head__" in n["Resources"],
                                         "GPU": n["Resources"].get("GPU"), "CPU": n["Resources"].get("CPU")}
                                        for n in nodes], "actors": actors}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TwoNodeCluster:
    """Two ``ray start`` nodes on this machine; every process they start is stopped by session, never by name."""

    def __init__(self, runner, log_dir: Path):
        self.runner, self.log_dir = runner, log_dir
        # Short: Ray's unix sockets live under it (108-byte limit); pytest's tmp_path is too deep.
        self.root = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
        token = self.root / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        drop = ("RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "PYTHONPATH")
        self.node_env = {k: v for k, v in os.environ.items()
                         if k not in drop and not k.startswith(("VERL_", "WANDB_", "RAY_"))}
        self.node_env.update(self.auth, RAY_USAGE_STATS_ENABLED="0")
        self.sessions: list[int] = []  # each `ray start` runs in its own session: its pid is the session id
        self.address: str | None = None
        self.start_s = 0.0

    def _ray_start(self, name: str, flags: list[str]) -> None:
        cmd = [str(RAY), "start", *flags, *NODE_FLAGS, f"--temp-dir={self.root / name}",
               f"--dashboard-agent-listen-port={_free_port()}"]
        log = self.log_dir / f"ray_start_{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=self.node_env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.root)
            self.sessions.append(proc.pid)
            try:
                rc = proc.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                rc = None
        assert rc == 0, f"`{' '.join(cmd)}` -> {rc}\n{self.runner.tail(log, 40)}"

    def start(self) -> None:
        begin = time.monotonic()
        port = _free_port()
        self._ray_start("head", ["--head", f"--port={port}", "--include-dashboard=false",
                                 "--dashboard-host=127.0.0.1", f"--dashboard-port={_free_port()}",
                                 f"--ray-client-server-port={_free_port()}"])
        self.address = f"127.0.0.1:{port}"
        self._ray_start("node2", [f"--address={self.address}"])
        self.start_s = time.monotonic() - begin

    def probe(self, want_nodes: int = 2) -> dict:
        """Alive nodes (waiting up to PROBE_TIMEOUT_S for ``want_nodes``) and the GCS actor table."""
        out = subprocess.run([sys.executable, "-c", PROBE, self.address, str(want_nodes), str(PROBE_TIMEOUT_S / 2)],
                             env={**self.node_env}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             cwd=self.root)
        lines = [line for line in out.stdout.splitlines() if line.startswith("PROBE ")]
        assert out.returncode == 0 and lines, f"probe rc={out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        return json.loads(lines[-1][len("PROBE "):])

    def stop(self) -> list[str]:
        """SIGTERM then SIGKILL each node's session; also what left a session (a child that called setsid)."""
        psutil = self.runner.psutil
        escaped: dict[int, float] = {}
        if psutil is not None:
            for sid in self.sessions:
                for proc in self.runner._session_procs(sid, sid):
                    try:
                        for child in [proc, *proc.children(recursive=True)]:
                            if self.runner._sid(child.pid) not in self.sessions:
                                escaped[child.pid] = child.create_time()
                    except psutil.Error:
                        continue
        alive = []
        for sid in self.sessions:
            alive += self.runner._kill_session(sid, grace_s=10.0)
        alive += self.runner._kill_escaped(escaped)
        shutil.rmtree(self.root, ignore_errors=True)
        return alive


@pytest.fixture
def two_node_cluster(e2e_runner, tmp_path):
    cluster = TwoNodeCluster(e2e_runner, tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _train_steps(lines: list[dict]) -> list[int]:
    return [row["step"] for row in lines if "feedback/n_records" in row["data"]]


def test_the_launcher_trains_and_resumes_on_a_two_node_ray_cluster(two_node_cluster, tiny_assets, repo_root,
                                                                     e2e_runner, tmp_path):
    cluster, t0 = two_node_cluster, time.monotonic()
    nodes = cluster.probe()["nodes"]
    assert len(nodes) == 2 and sum(n["head"] for n in nodes) == 1, nodes
    assert all(n["GPU"] == 1 and n["CPU"] == 16 for n in nodes), nodes  # each node its own resources
    t_cluster = cluster.start_s + time.monotonic() - t0

    out = tmp_path / "run"
    metrics = out / "metrics.jsonl"
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_grpo_qwen.sh"), "data.val_max_samples=16",
           "trainer.save_freq=2", "trainer.nnodes=2", "trainer.n_gpus_per_node=1"]

    def launch(steps: int, log: Path):
        env = e2e_runner.trainer_env(metrics, {
            "RAY_ADDRESS": cluster.address, **cluster.auth, "FORCE_CPU": "1", "STEPS": str(steps),
            "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets), "ASSETS_PROFILE": "tiny",
            "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable,
        })
        res = e2e_runner.run_logged(cmd, env=env, log_path=log, timeout_s=RUN_TIMEOUT_S, cwd=repo_root)
        assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{e2e_runner.tail(log)}"
        text = log.read_text(errors="replace")  # the driver's own line (workers' lines may arrive late or not)
        assert f"attaching to the running Ray cluster at {cluster.address}: its own resources are used" in text
        return res, text

    first, _ = launch(2, tmp_path / "attempt1.log")
    ckpt = out / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    for rank in (0, 1):  # one FSDP rank per node: the checkpoint has world size 2
        assert (ckpt / "global_step_2" / "actor" / f"model_world_size_2_rank_{rank}.pt").exists()
    second, _ = launch(3, tmp_path / "attempt2.log")
    assert (ckpt / "global_step_3").is_dir()

    kept = e2e_runner.metric_lines(out / "metrics.attempt-1.jsonl")  # the first run, as it was
    live = e2e_runner.metric_lines(metrics)
    assert _train_steps(kept) == [1, 2]
    assert _train_steps(live) == [1, 2, 3]  # one history, no repeated step
    assert live[: len(kept)] == kept
    assert _train_steps(live[len(kept):]) == [3]  # the second run started at step 3: it resumed

    probe = cluster.probe()
    node_ids = {n["id"] for n in probe["nodes"]}
    assert len(node_ids) == 2, probe["nodes"]  # both nodes survived both runs
    by_job: dict[str, dict[str, list]] = {}
    for actor in probe["actors"]:
        for role in ("WorkerDict", "HFServer"):  # verl's actor/rollout/ref worker; the hf rollout server
            if actor["cls"].endswith(role):
                by_job.setdefault(actor["job"], {}).setdefault(role, []).append(actor["node"])
    assert len(by_job) == 2, by_job  # the two launcher runs
    for job, roles in by_job.items():
        assert sorted(roles["WorkerDict"]) == sorted(node_ids), (job, roles)  # one rank on each node
        assert len(roles["HFServer"]) == 2, (job, roles)  # two rollout replicas (placed where Ray likes: num_cpus=0)
    print(f"two-node cluster up in {t_cluster:.0f}s; attempt 1: {first.summary()}; attempt 2: {second.summary()}; "
          f"total {cluster.start_s + time.monotonic() - t0:.0f}s")
