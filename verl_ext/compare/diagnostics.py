"""Why a method learns as it does: the step diagnostics every method logs, averaged per run, then over seeds.

Accuracy tables say *what* happened; these columns say what the update got (issue "Faster learning per rollout"):
responses per prompt and per step, the share of rows whose advantage is not zero and the loss scale after
all-equal groups (``diag/*``), the advantage mass, the gradient norm and the optimizer steps (``update/*``), how
widely the pool is covered (``pool/window_distinct``, ``pool/window_visits``), AR3PO's reuse and HIVE's pruning.
A column a method never logged shows "–". Training steps only (validation-only lines carry none of these).
"""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from verl_ext.compare.runs import Run
from verl_ext.compare.summary import mean_sd

COLUMNS: tuple[tuple[str, str, str], ...] = (  # (metric, header, format)
    ("rollout/gen_responses", "responses / step", "{:.1f}"),
    ("rollout/responses_per_prompt_mean", "responses / prompt", "{:.2f}"),
    ("diag/nonzero_rows", "rows with signal", "{:.2f}"),
    ("diag/effective_loss_scale", "loss scale", "{:.2f}"),
    ("diag/adv_mass", "advantage mass", "{:.1f}"),
    ("actor/grad_norm", "grad norm", "{:.3f}"),
    ("update/optimizer_steps", "optimizer steps", "{:.1f}"),
    ("pool/window_distinct", "distinct prompts / 10 steps", "{:.0f}"),
    ("pool/window_visits", "visits / prompt", "{:.2f}"),
    ("rollout/reuse_hit_rate", "reuse hit rate", "{:.2f}"),
    ("hive/prune_rate", "HIVE prune rate", "{:.2f}"),
    ("hive/verify_s", "HIVE probe s / step", "{:.2f}"),
    ("timing_s/step", "s / step", "{:.1f}"),
)


def run_means(run: Run) -> dict[str, float]:
    """Each column's mean over the run's training steps (steps that logged it)."""
    out = {}
    for metric, _, _ in COLUMNS:
        values = [v for _, v in run.series(metric)]
        if values:
            out[metric] = sum(values) / len(values)
    return out


def table(runs: Sequence[Run]) -> str:
    """Markdown: one row per method, mean ± sd over its seeds of the per-run means; columns nobody logged dropped."""
    per_method: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        per_method.setdefault(run.method, []).append(run_means(run))
    used = [c for c in COLUMNS if any(c[0] in m for ms in per_method.values() for m in ms)]
    if not used:
        return ""
    rows = []
    for method, means in per_method.items():
        cells = [method]
        for metric, _, fmt in used:
            mean, sd, n = mean_sd([m.get(metric) for m in means])
            cells.append("–" if mean is None else (fmt.format(mean) + (f" ± {fmt.format(sd)}" if n > 1 else "")))
        rows.append(cells)
    text = tabulate(rows, headers=["method", *(h for _, h, _ in used)], tablefmt="pipe", disable_numparse=True,
                    colalign=("left",) + ("right",) * len(used))
    return "\n".join(["", "Diagnostics (mean over training steps, then mean ± sd over seeds):", "", text]) + "\n"
