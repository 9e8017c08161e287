"""Per-trajectory rewards -> per-record outcomes ``{record_id: (passes, n)}``, keyed by id, never by position.

The trainer reads two per-trajectory fields from a step's batch: the record id (``index``, or ``extra_info[i]
["index"]``; the pool record id that ``PoolDataset`` put there) and ``acc`` (the reward manager's
``reward_extra_info``). Trajectories are grouped by id wherever they sit in the batch, so dropped, reordered or
padded rows cannot misassign a statistic (the reference code's bug). Pure numpy; no verl import.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

PASS_THRESHOLD = 0.5


class FeedbackError(ValueError):
    """A field is missing or holds values that cannot be read as ids / pass flags; the message names it."""


def group_outcomes(index: Sequence[Any] | np.ndarray | None, acc: Sequence[Any] | np.ndarray | None, *,
                   threshold: float = PASS_THRESHOLD, index_field: str = "index",
                   acc_field: str = "acc") -> dict[int, tuple[int, int]]:
    """``{record_id: (passes, n)}`` from aligned per-trajectory ``index`` and ``acc`` arrays.

    ``acc`` may be bools, ints or floats (``> threshold`` counts as a pass, so DAPO's +-1 ``score`` also works);
    ids may be Python/numpy ints or decimal strings. Raises ``FeedbackError`` naming the field for a missing
    field, a length mismatch, a non-integer id or a NaN/non-numeric ``acc``.
    """
    if index is None:
        raise FeedbackError(f"per-trajectory field '{index_field}' (record ids) missing")
    if acc is None:
        raise FeedbackError(f"per-trajectory field '{acc_field}' missing: the reward manager must put it in "
                            "reward_extra_info (reward.reward_manager.name=heapa does)")
    ids, flags = list(index), list(acc)
    if len(ids) != len(flags):
        raise FeedbackError(f"'{index_field}' has {len(ids)} entries but '{acc_field}' has {len(flags)}")
    out: dict[int, list[int]] = {}
    for pos, (raw_id, raw_acc) in enumerate(zip(ids, flags)):
        rid = record_id(raw_id, f"{index_field}[{pos}]")
        passed = _is_pass(raw_acc, f"{acc_field}[{pos}]", threshold)
        counts = out.setdefault(rid, [0, 0])
        counts[0] += passed
        counts[1] += 1
    return {rid: tuple(out[rid]) for rid in sorted(out)}  # by id: the pool sees the same order every run


def outcomes_from_fields(fields: Mapping[str, Any], *, acc_field: str = "acc", index_field: str = "index",
                         threshold: float = PASS_THRESHOLD) -> dict[int, tuple[int, int]]:
    """Same, reading a dict of per-trajectory arrays (a batch's non-tensor fields, e.g. from TransferQueue).

    The ids come from ``fields[index_field]`` if present, else from ``fields["extra_info"][i]["index"]``.
    """
    index = fields.get(index_field)
    if index is None and fields.get("extra_info") is not None:
        index = [_extra_index(info, pos) for pos, info in enumerate(fields["extra_info"])]
    if index is None:
        raise FeedbackError(f"neither '{index_field}' nor 'extra_info' is among the fields {sorted(fields)}")
    if fields.get(acc_field) is None:
        raise FeedbackError(f"per-trajectory field '{acc_field}' missing (fields: {sorted(fields)}): the reward "
                            "manager must put it in reward_extra_info (reward.reward_manager.name=heapa does)")
    return group_outcomes(index, fields[acc_field], threshold=threshold, index_field=index_field,
                          acc_field=acc_field)


def record_id(value: Any, where: str = "index") -> int:
    """A record id as a plain int from an int, a numpy integer, an integral float or a decimal string."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        raise FeedbackError(f"{where}: record ids are integers, got {value!r}")
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        if text.strip().lstrip("+").isdigit():
            return int(text)
        raise FeedbackError(f"{where}: record id {value!r} is not an integer")
    if isinstance(value, (float, np.floating)):
        if math.isfinite(value) and float(value).is_integer() and value >= 0:
            return int(value)
        raise FeedbackError(f"{where}: record id {value!r} is not an integer")
    try:
        rid = operator.index(value)
    except TypeError:
        raise FeedbackError(f"{where}: record id {value!r} ({type(value).__name__}) is not an integer") from None
    if rid < 0:
        raise FeedbackError(f"{where}: record id {rid} is negative")
    return rid


def _is_pass(value: Any, where: str, threshold: float) -> int:
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise FeedbackError(f"{where}: acc {value!r} ({type(value).__name__}) is not a number") from None
    if math.isnan(x):
        raise FeedbackError(f"{where}: acc is NaN")
    return int(x > threshold)


def _extra_index(info: Any, pos: int) -> Any:
    if not isinstance(info, Mapping) or "index" not in info:
        raise FeedbackError(f"extra_info[{pos}] has no 'index' (the record id): {info!r:.120}")
    return info["index"]
