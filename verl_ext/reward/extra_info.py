"""Where a trajectory's reward lands in verl's data: ``extra_fields["reward_extra_info"][acc_field]``.

The ``heapa`` reward manager writes ``acc`` (and the scorer's other results) into ``reward_extra_info``; verl keeps
it in each trajectory's ``extra_fields``, a dict in the agent loop's output and a wrapped one (``.data``) in
TransferQueue. The pool's feedback, AR3PO's stages and the evicted-group report all read it through ``acc_of``.
"""

from __future__ import annotations

from typing import Any


def reward_info(extra_fields: Any) -> dict[str, Any]:
    """One trajectory's ``reward_extra_info`` (empty when absent)."""
    data = getattr(extra_fields, "data", extra_fields)
    data = data if isinstance(data, dict) else {}
    return dict(data.get("reward_extra_info") or {})


def acc_of(extra_fields: Any, acc_field: str) -> Any:
    """``reward_extra_info[acc_field]`` of one trajectory's ``extra_fields`` (None when absent)."""
    return reward_info(extra_fields).get(acc_field)
