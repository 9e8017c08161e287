"""The README's CPU walk ("From data to a comparison table", **CPU**), run command by command as a new user would.

The commands are read from README.md and run as written, with bash, in a copy of this checkout that holds what a
clone holds (tracked and unignored files: no ``.venv``, ``.assets``, ``outputs`` or anything outside the repo),
with the test environment's Python first on PATH as ``python`` (an activated venv) and HOME in a temporary folder.
Only sizes change, through the launchers' own variables: STEPS=2 on the ``tiny`` assets the other e2e tests use
(VERL_EXT_ASSETS, ASSETS_PROFILE=tiny), 32 training / 16 validation rows, and ``examples/cpu_compare.sh`` with
DRY_RUN=1. The README evaluates on ``.assets/learn/data/val.parquet``: in the copy that folder holds the tiny
model and the first 16 rows of the tiny validation set.

Each command must exit 0 and leave what the README says it does: the MATH500 parquet, each run's metrics, checkpoint
and offline wandb run, the evaluation results and table, the comparison from the metrics files and the same
comparison from the wandb runs. The training runs' console is checked too: one readable line per validation, none
of the repeated warnings the CPU platform quiets, no wandb traceback. And the walk writes nothing outside
``outputs/`` and HOME.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HEADING = "**CPU (same walk, tiny model)**"
# Variables that would steer a launcher or the trainer away from a new user's defaults if the test shell has them.
CALLER_VARS = re.compile(r"^(VERL_|WANDB_|RAY_|TQ_|TQDM_|FORCE_|HF_)|^(OUT_DIR|STEPS|EXP_NAME|METHOD|METHODS|SEEDS|"
                         r"DRY_RUN|PYTHON|PYTHONPATH|LOGGERS|ASSETS_PROFILE|TRAIN_MAX_SAMPLES|VAL_MAX_SAMPLES|"
                         r"RESUME_MODE|TEST_FREQ|OUT_ROOT|VIRTUAL_ENV)$")
SIZES = {"STEPS": "2", "ASSETS_PROFILE": "tiny", "TRAIN_MAX_SAMPLES": "32", "VAL_MAX_SAMPLES": "16"}
VAL_ROWS = 16
NOISE = ("should not exceed total physical CPU cores", "engine is not available", "Traceback",
         "Using blocking ray.get inside async actor", "Disabled critic")


def readme_cpu_commands(readme: str) -> list[str]:
    """The shell commands of the README's CPU block: continuation lines and for/done loops kept whole."""
    after = readme[readme.index(HEADING):]
    block = after.split("```bash\n", 1)[1].split("\n```", 1)[0]
    commands, current, depth = [], [], 0
    for line in block.splitlines():
        if not line.strip():
            continue
        current.append(line)
        code = line.split(" #", 1)[0].rstrip()
        depth += bool(re.match(r"\s*(for|while|until)\b", code)) - bool(re.match(r"\s*done\b", code))
        if code.endswith("\\") or depth > 0:
            continue
        commands.append("\n".join(current))
        current = []
    assert not current and depth == 0, f"unterminated command in the README's CPU block: {current}"
    return commands


def test_the_cpu_block_parses_and_names_no_private_path(repo_root):
    commands = readme_cpu_commands((repo_root / "README.md").read_text(encoding="utf-8"))
    assert len(commands) >= 8 and any(c.startswith("for m in") and c.endswith("done") for c in commands)
    for command in commands:
        assert "shared/" not in command and "/work/" not in command, command  # nothing a user does not have
    assert "examples/data/math500_sample.jsonl" in commands[0]
    assert (repo_root / "examples" / "data" / "math500_sample.jsonl").exists()


def clone_layout(repo: Path, dest: Path) -> Path:
    """What `git clone` of the working tree would hold: tracked and unignored files (no .venv/.assets/outputs)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                                capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist): copy without them
        shutil.copytree(repo, dest, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", ".assets", "outputs", "__pycache__", "shared", "wandb"))
        return dest
    for rel in filter(None, listed):
        src = repo / rel
        if rel.startswith("shared/") or not (src.is_file() or src.is_symlink()):
            continue  # a tracked file deleted in the working tree, or the project's own shared folder
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dest


def small_learn_assets(tiny: Path, dest: Path) -> Path:
    """The README's `.assets/learn` for the evaluation lines: the tiny model, the first rows of its val set."""
    import pyarrow.parquet as pq

    (dest / "data").mkdir(parents=True)
    (dest / "model").symlink_to(tiny / "model", target_is_directory=True)
    pq.write_table(pq.read_table(tiny / "data" / "val.parquet").slice(0, VAL_ROWS), dest / "data" / "val.parquet")
    return dest


def walk_env(home: Path, clone: Path, tiny: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not CALLER_VARS.match(k)}
    venv_bin = Path(sys.executable).parent  # the environment under test, activated: `python` is its python
    env.update(SIZES, HOME=str(home), PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
               VIRTUAL_ENV=str(venv_bin.parent), PYTHONPATH=str(clone),  # the copy's code, as its editable install
               PYTHONUNBUFFERED="1", VERL_EXT_ASSETS=str(tiny),
               RAY_ADDRESS="local")  # a cluster someone started on this machine is never joined
    return env


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def check_math500(clone: Path, home: Path, log: str) -> None:
    out = home / "data" / "eval"
    assert _parquet_rows(out / "math500.parquet") == 20
    report = json.loads((out / "math500.report.json").read_text())
    assert report["rows_written"] == 20 and report["bad_count"] == 0


def check_training_run(method: str):
    def check(clone: Path, home: Path, log: str) -> None:
        from verl_ext.compare.runs import load_runs

        out = clone / "outputs" / method
        steps: dict[int, dict] = {}
        for line in (out / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            steps.setdefault(row["step"], {}).update(row["data"])
        assert {0, 1, 2} <= set(steps) and "val-core/arith/acc/mean@1" in steps[0]
        assert (out / "ckpt" / "global_step_2").is_dir()
        [run] = load_runs(str(out / "wandb"))  # verl's wandb logger, offline, under the run's own folder
        assert run.name == method and run.method == method
        assert run.steps[0]["val-core/arith/acc/mean@1"] == pytest.approx(steps[0]["val-core/arith/acc/mean@1"])
        assert {0, 1, 2} <= set(run.sorted_steps())
        assert re.search(r"\[verl-heapa\] step 0: val acc \d\.\d{3} \(arith, 16 problems\)", log), log[-3000:]
        assert re.search(r"\[verl-heapa\] step 2: val acc \d\.\d{3} \([+-]\d\.\d{3} since step 0; arith", log)
        for noise in NOISE:
            assert noise not in log, f"{noise!r} on the console of FORCE_CPU=1 {method}"
        # the launcher falls back to the embedded default, says so, and the recipe's stages run at every step
        assert "no GPU found: running the embedded default" in log and f"for method={method}" in log
        for step in (1, 2):
            assert steps[step]["feedback/n_records"] >= 8
            if method.startswith("heapa"):
                assert "pool/size_archive" in steps[step] and "augment/fired" in steps[step]
        assert (out / "ckpt" / "global_step_2" / "heapa_state.json").exists()  # verl saves at the last step
    return check


def check_eval(clone: Path, home: Path, log: str) -> None:
    for method in ("grpo", "heapa_dapo"):
        result = json.loads((clone / "outputs" / "eval" / method / "result.json").read_text())
        assert "arith" in json.dumps(result), result


def check_eval_table(clone: Path, home: Path, log: str) -> None:
    assert re.search(r"\|\s*grpo\s*\|", log) and re.search(r"\|\s*heapa_dapo\s*\|", log), log


def _val_finals(folder: Path) -> dict[str, float]:
    summary = json.loads((folder / "summary.json").read_text())
    return {run["method"]: run["val_final"] for run in summary["runs"]}


def check_compare(clone: Path, home: Path, log: str) -> None:
    out = clone / "outputs" / "compare"
    assert (out / "table.md").exists() and list(out.glob("*.png"))
    assert set(_val_finals(out)) == {"grpo", "heapa_dapo"}


def check_compare_wandb(clone: Path, home: Path, log: str) -> None:
    from_files = _val_finals(clone / "outputs" / "compare")
    from_wandb = _val_finals(clone / "outputs" / "compare_wandb")
    assert from_wandb == pytest.approx(from_files)  # the same runs, read back from their wandb logs


def check_cpu_compare(clone: Path, home: Path, log: str) -> None:
    assert "run_grpo_qwen.sh" in log and "verl_ext.compare" in log


# (what identifies the command, its extra environment, its check); every README command must match one.
EXPECTED = [
    ("eval_sets.py math500", {}, check_math500),
    ("scripts/run_grpo_qwen.sh", {}, check_training_run("grpo")),
    ("scripts/run_heapa_dapo_qwen.sh", {}, check_training_run("heapa_dapo")),
    ("verl_ext.evaluation generate", {}, check_eval),
    ("verl_ext.evaluation table", {}, check_eval_table),
    ("verl_ext.compare outputs/grpo outputs/heapa_dapo", {}, check_compare),
    ("verl_ext.compare outputs/grpo/wandb", {}, check_compare_wandb),
    ("examples/cpu_compare.sh", {"DRY_RUN": "1"}, check_cpu_compare),
]


def _expectation(command: str):
    hits = [e for e in EXPECTED if e[0] in command]
    assert len(hits) == 1, f"README CPU command without exactly one expectation in this test: {command!r}"
    return hits[0]


def _new_paths(root: Path, before: set[str]) -> list[str]:
    now = {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}
    return sorted(p for p in now - before if not p.startswith("outputs"))


@pytest.mark.e2e
@pytest.mark.slow  # two 2-step training runs, two evaluations: ~2-4 min on 2 cores
def test_readme_cpu_walk_runs_as_written(repo_root, tiny_assets, e2e_runner, tmp_path):
    commands = readme_cpu_commands((repo_root / "README.md").read_text(encoding="utf-8"))
    plan = [(command, _expectation(command)) for command in commands]  # fail before running anything
    clone = clone_layout(repo_root, tmp_path / "verl-heapa")
    assert not (clone / ".assets").exists() and not (clone / "outputs").exists()
    small_learn_assets(tiny_assets, clone / ".assets" / "learn")
    home = tmp_path / "home"
    home.mkdir()
    env = walk_env(home, clone, tiny_assets)
    before = {str(p.relative_to(clone)) for p in clone.rglob("*") if "__pycache__" not in p.parts}
    timeout = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
    durations = []
    for i, (command, (_, extra, check)) in enumerate(plan):
        log_path = tmp_path / "logs" / f"{i:02d}.log"
        res = e2e_runner.run_logged(["bash", "-c", "set -euo pipefail\n" + command], env={**env, **extra},
                                    log_path=log_path, timeout_s=timeout, cwd=clone)
        durations.append(f"{res.wall_s:5.0f}s  {command.splitlines()[0][:90]}")
        assert not res.timed_out and res.returncode == 0, \
            f"README command failed: {command}\n{res.summary()}\n{e2e_runner.tail(log_path)}"
        res.assert_no_strays()  # a launcher's Ray cluster goes with it
        check(clone, home, log_path.read_text(errors="replace"))
    print("README CPU walk:\n" + "\n".join(durations))
    assert _new_paths(clone, before) == []  # runs, evaluations, comparisons and wandb all stay under outputs/
