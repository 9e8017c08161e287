"""AR3PO's view of a step's trajectories in TransferQueue, and the rows it writes for reused responses.

A trajectory row (``AgentLoopWorkerTQ._agent_loop_postprocess``) holds the prompt fields of its dataset row
(``uid``, ``index``, ``raw_prompt``, ...) and the response fields: ``prompts``/``responses``/``input_ids``/
``position_ids``, ``response_mask``/``loss_mask``, ``rm_scores`` (the score on the last response token),
``rollout_log_probs`` (when ``rollout.calculate_log_probs``), ``extra_fields.reward_extra_info``, ``num_turns``.
A reused response is written as a new session of its group: a sibling's row (same prompt, same uid) with the
response fields replaced by the stored ones, its ``extra_fields`` marked, and its tag carrying the weight versions
it was generated under, so verl's staleness metrics see its age. The actor then computes its old log-probs like any
other row. ``build_reused_row`` and ``bank_payload`` are plain functions over row dicts (tested without Ray).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch

from verl.trainer.ppo.padding_utils import build_padding_position_ids

from recipe.heapa.step.batch_view import REUSED_TAG, parse_key  # noqa: F401  (parse_key: re-exported)

RESPONSE_FIELDS = ("responses", "rm_scores", "num_turns")  # the rest of a banked response is in the step view


def _json_scalar(value: Any) -> Any:
    """Reward extra info as JSON-safe scalars (numpy scalars unwrapped, non-finite floats and the rest as text)."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)):
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


def bank_payload(responses: torch.Tensor, rm_scores: torch.Tensor, extra_fields: Mapping[str, Any],
                 num_turns: Any, acc: float, tag: Mapping[str, Any],
                 rollout_log_probs: torch.Tensor | None = None) -> dict[str, Any]:
    """The JSON-safe bank entry of one correct trajectory: what ``build_reused_row`` needs to rebuild it."""
    info = dict((extra_fields or {}).get("reward_extra_info") or {})
    payload = {
        "token_ids": [int(t) for t in responses.tolist()],
        "acc": float(acc),
        "score": float(rm_scores.sum().item()),
        "reward_extra_info": {str(k): _json_scalar(v) for k, v in info.items()},
        "num_turns": int(num_turns) if num_turns is not None else 2,
        "min_global_steps": tag.get("min_global_steps"),
        "max_global_steps": tag.get("max_global_steps"),
    }
    if rollout_log_probs is not None:
        payload["rollout_log_probs"] = [round(float(x), 6) for x in rollout_log_probs.tolist()]
    return payload


class IncompatibleEntry(ValueError):
    """A stored response that cannot be put into this batch (e.g. it lacks rollout log-probs the batch carries)."""


def build_reused_row(sibling: Mapping[str, Any], entry: Mapping[str, Any], session: int,
                     mark_field: str, age: int) -> dict[str, Any]:
    """A new trajectory row for ``entry``: ``sibling``'s prompt fields, the stored response, marked as reused."""
    row = {k: (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)) for k, v in sibling.items()}
    responses = torch.tensor(entry["token_ids"], dtype=torch.int64)
    if responses.numel() == 0:
        raise IncompatibleEntry("stored response is empty")
    input_ids = torch.cat([row["prompts"].to(torch.int64), responses])
    mask = torch.ones_like(responses)
    rm_scores = torch.zeros(responses.numel(), dtype=torch.float32)
    rm_scores[-1] = float(entry["score"])
    row.update(responses=responses, response_mask=mask, loss_mask=mask.clone(), input_ids=input_ids,
               position_ids=build_padding_position_ids(row.get("position_ids"), torch.ones_like(input_ids)),
               rm_scores=rm_scores, num_turns=int(entry.get("num_turns", 2)))
    if "session_id" in row:
        row["session_id"] = session
    if "rollout_log_probs" in row:
        stored = entry.get("rollout_log_probs")
        if stored is None or len(stored) != responses.numel():
            raise IncompatibleEntry("the batch carries rollout_log_probs but the stored response has none "
                                    "(rollout.calculate_log_probs changed since it was stored)")
        row["rollout_log_probs"] = torch.tensor(stored, dtype=torch.float32)
    extra = dict(row.get("extra_fields") or {})
    extra["reward_extra_info"] = dict(entry.get("reward_extra_info") or {})
    extra[mark_field] = True
    extra["ar3po_age"] = int(age)
    for name in ("min_global_steps", "max_global_steps"):
        if entry.get(name) is not None:
            extra[name] = entry[name]
    row["extra_fields"] = extra
    return row


def reused_tag(sibling_tag: Mapping[str, Any], entry: Mapping[str, Any], prompt_len: int) -> dict[str, Any]:
    """The TransferQueue tag of a reused row: lengths of the stored response, the versions it was generated under."""
    tag = copy.deepcopy(dict(sibling_tag))
    response_len = len(entry["token_ids"])
    tag.update(prompt_len=int(prompt_len), response_len=response_len, seq_len=int(prompt_len) + response_len)
    for name in ("min_global_steps", "max_global_steps"):
        if entry.get(name) is not None:
            tag[name] = entry[name]
    tag[REUSED_TAG] = True
    return tag
