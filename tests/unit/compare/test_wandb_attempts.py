"""A resumed CPU run leaves one wandb offline run per attempt, all named after the experiment, in
``outputs/<exp>/wandb``: the folder reads back as one run, later attempts winning the steps they logged again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from verl_ext.compare.runs import RunError, load_runs

WRITER = textwrap.dedent("""
    import sys, wandb
    name, first, last, value = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    run = wandb.init(project="verl-heapa", name=name, dir=sys.argv[1], tags=[f"method:{name}"],
                     config={"heapa": {"seed": 0}}, settings=wandb.Settings(x_disable_stats=True))
    for step in range(first, last + 1):
        wandb.log({"val-core/arith/acc/mean@1": value + step / 100}, step=step)
    run.finish()
""")


def _write(root, name, first, last, value):
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    subprocess.run([sys.executable, "-c", WRITER, str(root), name, str(first), str(last), str(value)], env=env,
                   check=True, timeout=120, capture_output=True)


@pytest.mark.slow  # wandb-core starts three times: 5-20 s
def test_attempts_of_one_run_merge_and_other_runs_stay_apart(tmp_path):
    pytest.importorskip("wandb")
    _write(tmp_path, "grpo", 0, 3, 0.1)   # attempt 1: steps 0-3, killed after its step-2 checkpoint
    _write(tmp_path, "grpo", 3, 4, 0.5)   # attempt 2 resumes: step 3 trained again, then step 4
    [run] = load_runs(str(tmp_path / "wandb"))
    assert (run.name, run.method, run.seed) == ("grpo", "grpo", "0")
    assert run.sorted_steps() == [0, 1, 2, 3, 4]
    acc = {step: metrics["val-core/arith/acc/mean@1"] for step, metrics in run.steps.items()}
    assert acc == pytest.approx({0: 0.1, 1: 0.11, 2: 0.12, 3: 0.53, 4: 0.54})
    assert run.source.count(".wandb") == 2
    [named] = load_runs(f"grpo_s7={tmp_path / 'wandb'}")
    assert (named.name, named.method, named.seed) == ("grpo_s7", "grpo", "7")

    _write(tmp_path, "dapo", 0, 1, 0.2)
    runs = load_runs(str(tmp_path / "wandb"))
    assert sorted(r.name for r in runs) == ["dapo", "grpo"]
    with pytest.raises(RunError, match="holds 2 wandb runs"):
        load_runs(f"x={tmp_path / 'wandb'}")
