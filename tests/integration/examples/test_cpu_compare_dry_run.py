"""examples/cpu_compare.sh in DRY_RUN mode: one launcher command per method x seed (every preset), distinct
names and output folders, the seed in every seed knob; each command's overrides compose with the recipe config."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

CORE = ("grpo", "dapo", "ps", "heapa_grpo", "heapa_dapo")
SEED_KEYS = ("heapa.seed", "data.seed", "actor_rollout_ref.actor.data_loader_seed", "actor_rollout_ref.rollout.seed",
             "+actor_rollout_ref.rollout.engine_kwargs.hf.seed")


def dry_run(repo, *args, **env):
    full = dict(os.environ, DRY_RUN="1", **env)
    for knob in ("METHODS", "SEEDS", "STEPS", "OUT_ROOT", "LOCK", "TAG"):  # the caller's environment must not leak in
        if knob not in env:
            full.pop(knob, None)
    out = subprocess.run(["bash", str(repo / "examples" / "cpu_compare.sh"), *args], env=full, capture_output=True,
                         text=True, timeout=60)
    return out


def launcher_of(repo_dir, method):
    """The script cpu_compare must route a preset to: its own launcher, the AR3PO/HIVE/Reinforce-Ada one, else
    _launch.sh."""
    own = repo_dir / "scripts" / f"run_{method}_qwen.sh"
    if own.exists():
        return own
    if method.startswith("ar3po_") or method == "heapa_ar3po":
        return repo_dir / "scripts" / "run_ar3po_qwen.sh"
    if method.startswith("hive_"):
        return repo_dir / "scripts" / "run_hive_qwen.sh"
    if "reinforce_ada" in method:
        return repo_dir / "scripts" / "run_reinforce_ada_qwen.sh"
    return repo_dir / "scripts" / "_launch.sh"


def test_every_preset_times_every_seed(repo_dir, tmp_path):
    out = dry_run(repo_dir, "trainer.val_before_train=True", SEEDS="0,1 2", STEPS="7", OUT_ROOT=str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = [shlex.split(x) for x in out.stdout.splitlines()]
    presets = sorted(p.stem for p in (repo_dir / "recipe" / "heapa" / "config" / "method").glob("*.yaml"))
    runs, compare = lines[:-1], lines[-1]
    assert len(runs) == 3 * len(presets)
    names = [next(w.split("=", 1)[1] for w in cmd if w.startswith("EXP_NAME=")) for cmd in runs]
    assert names[:15] == [f"{m}_s{s}" for m in CORE for s in (0, 1, 2)]  # the paper's five first, in order
    assert sorted({n.rsplit("_s", 1)[0] for n in names}) == presets and len(set(names)) == len(names)
    for cmd, name in zip(runs, names):
        seed = name.rsplit("_s", 1)[1]
        assert cmd[:2] == ["flock", "/tmp/verl_ext_e2e.lock"] and "FORCE_CPU=1" in cmd and "STEPS=7" in cmd
        assert f"OUT_DIR={tmp_path / name}" in cmd and "RESUME_MODE=disable" in cmd
        assert all(f"{key}={seed}" in cmd for key in SEED_KEYS)
        assert cmd[-1] == "trainer.val_before_train=True"  # extra overrides reach every run, last
        method = name.rsplit("_s", 1)[0]
        assert str(launcher_of(repo_dir, method)) in cmd
    assert compare[1:3] == ["-m", "verl_ext.compare"] and compare[-2:] == ["--out", str(tmp_path / "compare")]
    assert compare[3:-2] == [str(tmp_path / n) for n in names]


def test_bad_knobs_fail_early(repo_dir):
    out = dry_run(repo_dir, METHODS="grpo nope")
    assert out.returncode == 2 and "no preset" in out.stderr
    out = dry_run(repo_dir, SEEDS="0 x")
    assert out.returncode == 2 and "seed 'x'" in out.stderr
    out = dry_run(repo_dir, METHODS="grpo", TAG="a/b")
    assert out.returncode == 2 and "TAG 'a/b'" in out.stderr


def test_a_tag_names_a_variant_as_its_own_method(repo_dir, tmp_path):
    out = dry_run(repo_dir, "heapa.selection.kwargs.boundary=progress", METHODS="heapa_grpo", SEEDS="3", TAG="_progress",
                  OUT_ROOT=str(tmp_path), LOCK="")
    assert out.returncode == 0, out.stderr
    [cmd, compare] = [shlex.split(x) for x in out.stdout.splitlines()]
    assert "EXP_NAME=heapa_grpo_progress_s3" in cmd and f"OUT_DIR={tmp_path / 'heapa_grpo_progress_s3'}" in cmd
    assert str(repo_dir / "scripts" / "run_heapa_grpo_qwen.sh") in cmd and cmd[-1] == "heapa.selection.kwargs.boundary=progress"
    assert compare[3] == str(tmp_path / "heapa_grpo_progress_s3")


@pytest.mark.parametrize("method", CORE + ("hive_grpo",))
def test_commands_compose_with_the_recipe_config(repo_dir, method, monkeypatch):
    """Run the printed command itself with DRY_RUN=1 (the launcher prints its overrides) and compose them."""
    if not (repo_dir / "recipe" / "heapa" / "config" / "method" / f"{method}.yaml").exists():
        pytest.skip(f"no {method} preset")
    from hydra import compose, initialize_config_dir

    out = dry_run(repo_dir, METHODS=method, SEEDS="4", LOCK="")
    [cmd] = [shlex.split(x) for x in out.stdout.splitlines()[:-1]]
    launched = subprocess.run(cmd, env=dict(os.environ, DRY_RUN="1"), capture_output=True, text=True, timeout=60,
                              cwd=repo_dir)
    assert launched.returncode == 0, launched.stderr
    overrides = launched.stdout.splitlines()
    assert f"method={method}" in overrides and "platform=cpu" in overrides
    monkeypatch.setenv("TEACHER_MODEL", "judge")
    with initialize_config_dir(config_dir=str(repo_dir / "recipe" / "heapa" / "config"), version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=overrides)
    assert cfg.heapa.seed == 4 and cfg.data.seed == 4 and cfg.actor_rollout_ref.rollout.seed == 4
    assert cfg.actor_rollout_ref.actor.data_loader_seed == 4
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.hf.seed == 4 and cfg.trainer.test_freq == 10
    assert cfg.trainer.experiment_name == f"{method}_s4"
