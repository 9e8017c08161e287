"""diag/*: what a step's advantages give the update (all-equal groups shrink it), and feedback's pass-rate bands."""

from __future__ import annotations

import pytest
import torch

from recipe.heapa.step.advantage_diagnostics import advantage_diagnostics
from verl_ext.pool.feedback import FeedbackSummary


def test_all_equal_groups_scale_the_step_by_rows_or_tokens():
    # two mixed rows (3 and 1 tokens) and two zero rows (2 tokens each): GRPO-style constant advantage per row
    rows = [torch.full((3,), 1.5), torch.full((1,), -0.5), torch.zeros(2), torch.zeros(2)]
    seq = advantage_diagnostics(rows, "seq-mean-token-mean")
    assert seq["diag/nonzero_rows"] == 0.5 and seq["diag/effective_loss_scale"] == 0.5
    assert seq["diag/nonzero_tokens"] == pytest.approx(4 / 8)
    assert seq["diag/adv_mass"] == pytest.approx(2.0) and seq["diag/adv_mass_per_row"] == pytest.approx(0.5)
    tok = advantage_diagnostics([torch.full((6,), 1.0), torch.zeros(2)], "token-mean")
    assert tok["diag/effective_loss_scale"] == pytest.approx(0.75) and tok["diag/nonzero_rows"] == 0.5


def test_no_rows_no_metrics():
    assert advantage_diagnostics([], "token-mean") == {}
    assert advantage_diagnostics([torch.zeros(0)], "token-mean") == {}


def test_feedback_bands_split_the_mixed_groups():
    summary = FeedbackSummary.from_groups([(1, 0, 8), (2, 1, 8), (3, 2, 8), (4, 4, 8), (5, 7, 8), (6, 8, 8)], [])
    m = summary.metrics()
    assert m["feedback/frac_all_wrong"] == pytest.approx(1 / 6) and m["feedback/frac_all_correct"] == pytest.approx(1 / 6)
    # 1/8 and 2/8 -> (0, .25]; 4/8 -> (.25, .5]; 7/8 -> (.75, 1)
    assert m["feedback/band_0_25"] == pytest.approx(2 / 6) and m["feedback/band_25_50"] == pytest.approx(1 / 6)
    assert m["feedback/band_50_75"] == 0.0 and m["feedback/band_75_100"] == pytest.approx(1 / 6)
    total = m["feedback/frac_all_wrong"] + m["feedback/frac_all_correct"] + sum(
        m[f"feedback/band_{b}"] for b in ("0_25", "25_50", "50_75", "75_100"))
    assert total == pytest.approx(1.0)
