"""What a step's advantages give the update, logged for every method so a run explains itself.

Why HeaPA's fewer all-equal groups do or do not become faster learning is a question about the update, not the
rollout: verl's loss averages over every row (``seq-mean-token-mean``, the GRPO presets) or every token
(``token-mean``, the DAPO presets) of the step, so rows whose advantage is zero (all-equal groups) shrink the
step of every other row. ``diag/*`` measures it from the advantages verl just wrote to TransferQueue:

- ``diag/adv_mass``: sum over rows of each row's mean |advantage| (the step's total signal), and
  ``diag/adv_mass_per_row`` (that over the rows);
- ``diag/nonzero_rows`` / ``diag/nonzero_tokens``: the share of rows / response tokens with a non-zero advantage,
  ``diag/signal_rows`` the number of such rows;
- ``diag/effective_loss_scale``: the share the loss aggregation keeps (rows for the sequence-mean modes, tokens
  for ``token-mean``): the factor by which all-equal groups scale this step's gradient relative to a batch
  with signal in every row.

Padding rows (verl's, copies of real rows) are left out. Reads one nested field per step (response tokens
only); verl reads the same field for its own ``critic/advantages/*`` metrics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

ZERO = 1e-8
TOKEN_MODES = frozenset({"token-mean"})


def advantage_diagnostics(rows: Sequence[torch.Tensor], loss_agg_mode: str) -> dict[str, float]:
    """``rows``: each real row's per-token advantages (response tokens only)."""
    rows = [r for r in rows if r.numel()]
    if not rows:
        return {}
    row_abs = torch.stack([r.float().abs().mean() for r in rows])
    nonzero = torch.stack([(r.float().abs() > ZERO).any() for r in rows])
    lengths = torch.tensor([r.numel() for r in rows], dtype=torch.float64)
    tokens_nonzero = float(lengths[nonzero].sum() / lengths.sum())
    rows_nonzero = float(nonzero.float().mean())
    return {
        "diag/adv_mass": float(row_abs.sum()),
        "diag/adv_mass_per_row": float(row_abs.mean()),
        "diag/nonzero_rows": rows_nonzero,
        "diag/signal_rows": float(nonzero.sum()),  # the count heapa.update.sequence_mean_over=signal_rows divides by
        "diag/nonzero_tokens": tokens_nonzero,
        "diag/effective_loss_scale": tokens_nonzero if loss_agg_mode in TOKEN_MODES else rows_nonzero,
    }


def read_advantages(keys: Sequence[str], tags: Sequence[dict], partition_id: str) -> list[torch.Tensor]:
    """The step's advantages per real row (verl's padding rows skipped), read from TransferQueue."""
    import transfer_queue as tq

    real = [k for k, tag in zip(keys, tags) if not tag.get("is_padding", False)]
    if not real:
        return []
    data = tq.kv_batch_get(keys=real, partition_id=partition_id, select_fields=["advantages"])
    return list(data["advantages"].unbind(0))
