"""The comparison's diagnostics table: per-run means over training steps, then mean ± sd over seeds."""

import re

from verl_ext.compare.diagnostics import run_means, table
from verl_ext.compare.runs import Run


def _run(name, method, seed, steps):
    return Run(name=name, method=method, seed=seed, source="test", steps=steps)


def test_means_per_run_then_over_seeds_and_unlogged_columns_dropped():
    a = _run("grpo_s0", "grpo", "0", {1: {"diag/effective_loss_scale": 0.4, "update/optimizer_steps": 1.0},
                                      2: {"diag/effective_loss_scale": 0.6, "update/optimizer_steps": 1.0},
                                      3: {"val-core/arith/acc/mean@1": 0.3}})
    b = _run("grpo_s1", "grpo", "1", {1: {"diag/effective_loss_scale": 0.8, "update/optimizer_steps": 1.0}})
    c = _run("ar3po_grpo_s0", "ar3po_grpo", "0", {1: {"rollout/reuse_hit_rate": 0.25}})
    assert run_means(a) == {"diag/effective_loss_scale": 0.5, "update/optimizer_steps": 1.0}
    text = re.sub(r" +", " ", table([a, b, c]))  # tabulate pads columns: compare the cells
    assert "| method | loss scale | optimizer steps | reuse hit rate |" in text
    assert "| grpo | 0.65 ± 0.21 | 1.0 ± 0.0 | – |" in text
    assert "| ar3po_grpo | – | – | 0.25 |" in text
    assert "HIVE" not in text
    assert table([_run("x_s0", "x", "0", {1: {"other": 1.0}})]) == ""
