"""The GPU memory estimator against hand-computed figures for Qwen3-4B, and the readiness check of issue 33:
today's padded sdpa fallback at 20k-token responses is over 80 GiB per GPU, the packed one fits."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from verl_ext.gpu_plan import estimate, run_config
from verl_ext.gpu_plan.shape import QWEN3_4B, ModelShape, resolve_config

REPO = Path(__file__).resolve().parents[3]
CONFIG = Path(__file__).with_name("qwen3_4b_config.json")
GIB = 2**30
V = 151936


def launcher_args(script: str, *extra: str, method: str | None = None) -> list[str]:
    env = dict(os.environ, DRY_RUN="1", FORCE_GPU="1", TEACHER_MODEL="judge", GPU_PLAN="0")
    env.pop("FORCE_CPU", None)
    if method:
        env["METHOD"] = method
    out = subprocess.run(["bash", str(REPO / "scripts" / script), *extra], env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def qwen3_4b() -> ModelShape:
    return ModelShape.from_config(json.loads(CONFIG.read_text()), "Qwen3-4B")


def test_shipped_config_is_the_builtin_shape(qwen3_4b):
    assert json.loads(CONFIG.read_text()) == QWEN3_4B
    assert resolve_config("qwen3-4b")[0] == QWEN3_4B and resolve_config(str(CONFIG))[1] == str(CONFIG)
    assert (qwen3_4b.hidden, qwen3_4b.layers, qwen3_4b.heads, qwen3_4b.kv_heads, qwen3_4b.head_dim) == (2560, 36, 32,
                                                                                                        8, 128)
    assert (qwen3_4b.intermediate, qwen3_4b.vocab, qwen3_4b.tied, qwen3_4b.qk_norm) == (9728, V, True, True)


def test_parameter_count_by_hand(qwen3_4b):
    layer = 2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560 + 3 * 2560 * 9728 + 2 * 2560 + 2 * 128
    assert layer == 100_930_816 == qwen3_4b.layer_params()
    assert qwen3_4b.param_count() == V * 2560 + 36 * layer + 2560 == 4_022_468_096  # "4.0B", tied


@pytest.fixture(scope="module")
def dapo_run() -> run_config.RunShape:
    return run_config.load("\n".join(launcher_args("run_heapa_dapo_qwen.sh")))


def test_the_launcher_config_is_read(dapo_run):
    assert (dapo_run.attn, dapo_run.packed, dapo_run.grad_checkpointing) == ("sdpa", True, True)
    assert (dapo_run.n_gpus, dapo_run.update_tokens, dapo_run.logprob_tokens) == (8, 24576, 24576)
    assert (dapo_run.max_model_len, dapo_run.gpu_memory_utilization, dapo_run.needs_ref) == (22528, 0.8, False)


def test_figures_by_hand(qwen3_4b, dapo_run):
    p = 4_022_468_096
    gpu = 80 * GIB
    phases = {ph.name: ph for ph in estimate.plan(qwen3_4b, dapo_run, gpu)}
    update = phases["actor update"].parts
    assert update["params"] == 4 * p / 8 and update["adam"] == 8 * p / 8 and update["grads"] == 4 * p / 8
    assert update["logits"] == 3 * 24576 * V * 2  # logits, saved log-softmax, gradient; T = 1.0, no entropy
    assert update["mask"] == 3 * 24576**2
    a = 2 * (4 * 2560 + 2 * 4096 + 2 * 1024 + 4 * 9728) + 4 * 2 * 2560 + 2 * 2 * (32 - 8) * 128
    assert update["activations"] == 36 * 24576 * 2560 * 2 + 24576 * a
    assert phases["old log-prob"].parts["logits"] == 3 * 24576 * V * 2  # logits + entropy's softmax and product
    _, vllm = estimate.rollout(qwen3_4b, dapo_run, gpu)
    assert vllm["kv_per_token"] == 2 * 36 * 8 * 128 * 2 == 147_456
    assert vllm["kv_cache"] == 0.8 * gpu - 2 * p - (8192 * (2 * 9728 + 4 * 2560) * 2 + 256 * V * 4 * 2)
    padded = replace(dapo_run, packed=False)
    x, rows, longest = estimate.positions(padded, 24576, 1024)
    assert (x, rows, longest) == (3 * 22528, 3, 22528)  # one 22,528-token row + two 1,024-token rows, padded
    assert estimate.transient(qwen3_4b, padded, 24576, 1024, train=True, entropy=False)["logits"] == \
        3 * x * V * 2 + 24576 * V * 2


def test_readiness_padded_sdpa_is_over_80_packed_fits(qwen3_4b, dapo_run):
    """Issue 33: the old fallback (sdpa, padded) at 20k-token responses cannot run on 80 GiB; the new one can."""
    old = run_config.load("\n".join(launcher_args("run_heapa_dapo_qwen.sh",
                                                  "actor_rollout_ref.model.use_remove_padding=False")))
    assert old.attn == "sdpa" and not old.packed
    gpu = 80 * GIB
    assert estimate.peak(estimate.plan(qwen3_4b, old, gpu)).total > gpu
    new = estimate.peak(estimate.plan(qwen3_4b, dapo_run, gpu))
    assert new.verdict(gpu) != "over", new


def test_hive_probe_is_planned_with_vllm_awake(qwen3_4b):
    run = run_config.load("\n".join(launcher_args("run_hive_qwen.sh", method="hive_grpo")))
    assert run.hive_probe_tokens == 4096
    phases = {ph.name: ph for ph in estimate.plan(qwen3_4b, run, 80 * GIB)}
    probe = phases["HIVE probe (vLLM awake)"]
    assert probe.parts["vllm_share"] == 0.8 * 80 * GIB
    assert probe.parts["logits"] == 3 * 4096 * V * 2  # logits + entropy (rollout temperature 1.0)
    assert probe.total > phases["rollout (vLLM awake)"].total


def test_vllm_that_cannot_hold_one_sequence_is_over(qwen3_4b, dapo_run):
    tiny_share = replace(dapo_run, gpu_memory_utilization=0.1)
    roll = estimate.plan(qwen3_4b, tiny_share, 80 * GIB)[0]
    assert roll.verdict(80 * GIB) == "over" and "cannot start" in roll.note


def test_cli_table(capsys, tmp_path):
    from verl_ext.gpu_plan.cli import main

    args = tmp_path / "args.txt"
    args.write_text("\n".join(launcher_args("run_grpo_qwen.sh")))
    assert main(["--overrides", str(args), "--model-config", str(CONFIG), "--gpu-gb", "80", "40", "--check"]) in (0, 1)
    out = capsys.readouterr().out
    assert out.count("## GPU memory plan: grpo on 8 x") == 2 and "| actor update |" in out and "peak " in out
    assert main(["--overrides", str(args), "--model-config", str(tmp_path / "missing")]) == 2
