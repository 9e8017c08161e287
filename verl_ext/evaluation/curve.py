"""A run's validation curve re-read from its checkpoints: each ``global_step_N`` (and the initial model for step 0)
generated and scored with one sampling config, written as a run the comparison reads.

The trainer validates greedily on the CPU default (no sampling noise, but one validation of a small model moves
several points between neighbouring steps); avg@16 at the training temperature is the steadier reading, but inside
the trainer it goes through the rollout server one request at a time (about 6 minutes a validation on 2 cores,
against 10 s for a batched ``generate``). So a run is trained with ``trainer.save_freq=10`` and its checkpoints are
evaluated here, the same seed for every checkpoint and every run (common random numbers: the same model gets the
same samples). Each step's evaluation lands in ``<out>/<curve name>/step_<N>/`` (kept: a rerun skips the steps
already scored with the same sampling) and the curve run's ``metrics.jsonl`` is the training run's own lines
(rollouts, feedback, pool, ...; a resumed run's attempts merged as the comparison merges them) with its validation
metrics replaced by ``val-core/<source>/acc/mean@<n>`` from these evaluations, so ``python -m verl_ext.compare``
pairs curve runs as it pairs trained ones.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from verl_ext.checkpoint_layout import STEP_RE
from verl_ext.compare.runs import file_logger_files, merged_lines

logger = logging.getLogger(__name__)

VAL_PREFIXES = ("val-core/", "val-aux/")
SEED_SUFFIX = "_s"


def curve_name(run_name: str, suffix: str) -> str:
    """``grpo_epyc_80_s3`` + ``_avg16`` -> ``grpo_epyc_80_avg16_s3`` (the seed stays last, where the comparison
    reads it); a name without ``_s<seed>`` gets the suffix at the end."""
    head, sep, seed = run_name.rpartition(SEED_SUFFIX)
    if sep and seed.isdigit():
        return f"{head}{suffix}{SEED_SUFFIX}{seed}"
    return run_name + suffix


def checkpoint_steps(ckpt_root: Path) -> dict[int, Path]:
    """step -> its ``global_step_N`` folder under ``ckpt_root`` (empty when there is none)."""
    if not ckpt_root.is_dir():
        return {}
    steps = {}
    for child in ckpt_root.iterdir():
        match = STEP_RE.match(child.name)
        if match and child.is_dir():
            steps[int(match.group(1))] = child
    return dict(sorted(steps.items()))


def curve_metrics(rows: Iterable[Mapping], curve: Mapping[int, Mapping[str, float]], n: int) -> list[dict]:
    """The training run's lines with their validation metrics replaced by ``curve`` (step -> source -> accuracy):
    one ``val-core/<source>/acc/mean@<n>`` per source at each evaluated step. A step evaluated but absent from the
    log (step 0 of a run logged without ``val_before_train``) gets a line of its own."""
    out, seen = [], set()
    for row in rows:
        step = int(row["step"])
        data = {k: v for k, v in row["data"].items() if not k.startswith(VAL_PREFIXES)}
        if step in curve and step not in seen:
            data.update({f"val-core/{ds}/acc/mean@{n}": acc for ds, acc in curve[step].items()})
        seen.add(step)
        out.append({"step": step, "data": data})
    missing = sorted(set(curve) - seen)
    for step in missing:
        out.append({"step": step, "data": {f"val-core/{ds}/acc/mean@{n}": acc for ds, acc in curve[step].items()}})
    return sorted(out, key=lambda r: r["step"])


def _avgs(result: Mapping) -> dict[str, float]:
    """source -> avg of one ``result.json``."""
    return {ds: float(b["avg"]) for ds, b in result["benchmarks"].items()}


def _scored(folder: Path, sampling: Mapping) -> dict[str, float] | None:
    """source -> avg of a step already evaluated with ``sampling`` in ``folder``, else None."""
    path = folder / "result.json"
    if not path.is_file():
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    if result.get("sampling") != dict(sampling):
        logger.info("%s was scored with %s, not %s: evaluating again", path, result.get("sampling"), dict(sampling))
        return None
    return _avgs(result)


def evaluate_curve(models: Mapping[int, str], out: Path, sampling: Mapping,
                   evaluate: Callable[[str, Path], dict]) -> dict[int, dict[str, float]]:
    """step -> source -> avg for every ``models`` entry (step -> model or checkpoint), each evaluated by
    ``evaluate(model, folder)`` (which writes ``folder/result.json`` and returns it) unless ``out/step_<N>``
    already holds a result with this ``sampling``."""
    curve = {}
    for i, (step, model) in enumerate(sorted(models.items()), 1):
        folder = out / f"step_{step}"
        done = _scored(folder, sampling)
        if done is None:
            logger.info("%s: step %d (%d of %d) from %s", out.name, step, i, len(models), model)
            done = _avgs(evaluate(model, folder))
        curve[step] = done
    return curve


def write_curve_run(run_dir: Path, out_root: Path, suffix: str, initial_model: str | None, sampling: Mapping,
                    evaluate: Callable[[str, Path], dict], ckpt_subdir: str = "ckpt") -> Path:
    """Evaluate ``run_dir``'s checkpoints (and ``initial_model`` as step 0) and write the curve run
    ``out_root/<curve name>/metrics.jsonl``; returns that folder."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics}: no metrics file (is {run_dir} a launcher's run folder?)")
    files = file_logger_files(run_dir)  # a resumed run's earlier attempts (metrics.attempt-<k>.jsonl) too
    models = {step: str(path) for step, path in checkpoint_steps(run_dir / ckpt_subdir).items()}
    if not models:
        raise FileNotFoundError(f"{run_dir / ckpt_subdir}: no global_step_N checkpoints (train with "
                                "trainer.save_freq=N to get some)")
    if 0 not in models and initial_model:
        models[0] = initial_model
    rows = [{"step": step, "data": data} for step, data in merged_lines(files).items()]
    last = max(int(r["step"]) for r in rows)
    beyond = sorted(step for step in models if step > last)
    if beyond:
        raise ValueError(f"{run_dir}: checkpoints at steps {beyond} but its log ends at step {last}")
    folder = out_root / curve_name(run_dir.name, suffix)
    curve = evaluate_curve(models, folder, sampling, evaluate)
    n = int(sampling["n"])
    lines = [json.dumps(r, sort_keys=True) for r in curve_metrics(rows, curve, n)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "curve.json").write_text(json.dumps({"source": str(run_dir.resolve()), "sampling": dict(sampling),
                                                   "models": {str(k): v for k, v in sorted(models.items())},
                                                   "curve": {str(k): v for k, v in sorted(curve.items())}},
                                                  indent=1) + "\n", encoding="utf-8")
    logger.info("%s: %s", folder.name, ", ".join(
        f"{step}: {100 * sum(v.values()) / len(v):.1f}" for step, v in sorted(curve.items())))
    return folder
