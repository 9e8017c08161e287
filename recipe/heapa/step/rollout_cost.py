"""What each step's rollout cost, for every method: responses and response tokens generated, trained or not.

Why: the papers compare methods at equal rollout cost (AR3PO: responses and tokens per step against GRPO with the
same ceiling; HIVE: rollouts against DAPO's dynamic sampling). A trained batch alone undercounts: DAPO's
filter_groups evicts zero-signal groups and discards surplus ones after generating them, and AR3PO's replace mode
drops the response a reused one replaced. Those arrive through ``discarded`` (the replay buffer reports evicted
groups, the AR3PO stage its replaced rows). Reused and padding rows of the batch were not generated this step.

Scalars (``rollout/*``): ``gen_responses``, ``gen_tokens`` (this step), ``gen_responses_cum``, ``gen_tokens_cum``
(since the start of training; checkpointed), ``discarded_responses``. Bounded: two counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from recipe.heapa.step.batch_view import REUSED_TAG
from verl_ext.state_schema import check_schema

SCHEMA_VERSION = 1


class RolloutCost:
    """Per-step and cumulative generation counts (see the module docstring)."""

    def __init__(self) -> None:
        self.total_responses = 0
        self.total_tokens = 0

    def close_step(self, tags: Iterable[Mapping[str, Any]], discarded: Sequence[int] = (0, 0),
                   prefix: str = "rollout/") -> dict[str, float]:
        """Count the trained batch (its TransferQueue tags) plus the step's ``discarded`` (responses, tokens)."""
        responses = tokens = 0
        for tag in tags:
            if tag.get("is_padding", False) or tag.get(REUSED_TAG, False):
                continue
            responses += 1
            tokens += int(tag.get("response_len", 0))
        discarded_responses, discarded_tokens = (int(x) for x in discarded)
        responses += discarded_responses
        tokens += discarded_tokens
        self.total_responses += responses
        self.total_tokens += tokens
        return {f"{prefix}gen_responses": float(responses), f"{prefix}gen_tokens": float(tokens),
                f"{prefix}gen_responses_cum": float(self.total_responses),
                f"{prefix}gen_tokens_cum": float(self.total_tokens),
                f"{prefix}discarded_responses": float(discarded_responses)}

    def state_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "total_responses": self.total_responses,
                "total_tokens": self.total_tokens}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_schema(state, "RolloutCost", SCHEMA_VERSION)
        self.total_responses = int(state["total_responses"])
        self.total_tokens = int(state["total_tokens"])
