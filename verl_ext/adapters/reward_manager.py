"""The ``heapa`` reward manager for verl 0.9.1's reward loop: generic math scoring that always emits ``acc``.

Selected with ``reward.reward_manager.name=heapa`` (source ``register``; ``register()`` must have run in the
process, which ``verl_ext.plugin`` does). It follows the ``naive``/``dapo`` managers' ``run_single`` contract
exactly — last sequence of the item, response decoded with ``skip_special_tokens=True`` over the valid response
tokens, ``data_source`` / ``reward_model.ground_truth`` / ``extra_info`` from the non-tensor fields — and scores
with ``verl_ext.reward.compute_score``, which knows no data sources, so an unknown ``data_source`` never raises.

Settings come from ``reward.reward_kwargs`` (verl's DAPO manager reads the same place; add it with
``+reward.reward_kwargs.format=dapo``): ``format`` (boxed | dapo | auto; dapo scores +-1), ``max_response_chars``,
``overlong_buffer_cfg`` (alias ``overlong_buffer``) ``{enable, len, penalty_factor, log}`` and ``max_resp_len``
(default ``actor_rollout_ref.rollout.response_length``) for DAPO's soft overlong penalty. A user-configured
``reward.custom_reward_function`` replaces the scorer (verl passes it in); verl's ``default_compute_score`` does not.

Returns ``{"reward_score": score + penalty, "reward_extra_info": {"acc", "pred", "score"[, "overlong_reward",
"overlong"]}}``; ``acc`` (0/1) is what the trainer feeds back to the pool.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from verl_ext.adapters._config import as_dict
from verl_ext.reward import compute_score as math_compute_score
from verl_ext.reward import overlong_penalty
from verl_ext.reward.extract import DEFAULT_MAX_CHARS
from verl_ext.reward.math_score import FORMATS

logger = logging.getLogger(__name__)

NAME = "heapa"


@dataclass(frozen=True)
class OverlongBufferConfig:
    """DAPO's soft overlong punishment (same fields as verl's ``overlong_buffer_cfg``)."""

    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0
    log: bool = False


@dataclass(frozen=True)
class HeapaRewardConfig:
    """What ``reward.reward_kwargs`` may hold for the ``heapa`` manager."""

    format: str = "boxed"
    max_response_chars: int = DEFAULT_MAX_CHARS
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    max_resp_len: int | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"reward.reward_kwargs.format={self.format!r}; expected one of {FORMATS}")
        if not isinstance(self.max_response_chars, int) or self.max_response_chars < 1:
            raise ValueError(f"reward.reward_kwargs.max_response_chars must be a positive int, got "
                             f"{self.max_response_chars!r}")
        ob = self.overlong_buffer
        if ob.enable:
            if not isinstance(ob.len, int) or ob.len <= 0:
                raise ValueError(f"overlong_buffer.len must be a positive int when enabled, got {ob.len!r}")
            if self.max_resp_len is None or self.max_resp_len < ob.len:
                raise ValueError(f"max_resp_len ({self.max_resp_len}) must be set and >= overlong_buffer.len "
                                 f"({ob.len}) when the overlong penalty is enabled")

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None, default_max_resp_len: int | None = None
                    ) -> "HeapaRewardConfig":
        data = dict(kwargs or {})
        if "overlong_buffer_cfg" in data:
            if "overlong_buffer" in data:
                raise ValueError("reward.reward_kwargs sets both overlong_buffer_cfg and overlong_buffer")
            data["overlong_buffer"] = data.pop("overlong_buffer_cfg")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown reward.reward_kwargs keys {sorted(unknown)} for the heapa reward manager; "
                             f"known: {sorted(known | {'overlong_buffer_cfg'})}")
        ob = dict(data.get("overlong_buffer") or {})
        ob_known = {f.name for f in dataclasses.fields(OverlongBufferConfig)}
        if set(ob) - ob_known:
            raise ValueError(f"unknown overlong_buffer keys {sorted(set(ob) - ob_known)}; known: {sorted(ob_known)}")
        data["overlong_buffer"] = OverlongBufferConfig(**ob)
        if data.get("max_resp_len") is None:
            data["max_resp_len"] = default_max_resp_len
        return cls(**data)


class HeapaRewardManager(RewardManagerBase):
    """Math scoring for any data source, with ``acc``/``pred``/``score`` in ``reward_extra_info``."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, reward_router_address: Any = None,
                 reward_model_tokenizer: Any = None, **_: Any) -> None:
        super().__init__(config, tokenizer, compute_score)
        self.settings = HeapaRewardConfig.from_kwargs(as_dict(_get(_get(config, "reward"), "reward_kwargs")),
                                                      _default_response_length(config))
        custom = None if compute_score is None or _is_verl_default(compute_score) else compute_score
        self.compute_score = custom or functools.partial(
            math_compute_score, format=self.settings.format, max_response_chars=self.settings.max_response_chars)
        self.is_async_reward_score = inspect.iscoroutinefunction(custom) if custom is not None else False
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer

    async def run_single(self, data: DataProto) -> dict:
        data = data[-1:]  # for multi-sequence outputs, the reward is computed on the last sequence (as verl's)
        data_item = data[0]
        response_ids = data_item.batch["responses"]
        response_length = response_ids.shape[-1]
        valid_response_length = int(data_item.batch["attention_mask"][-response_length:].sum())
        valid_response_ids = response_ids[:valid_response_length]

        data_source = data_item.non_tensor_batch["data_source"]
        ground_truth = data_item.non_tensor_batch["reward_model"]["ground_truth"]
        extra_info = data_item.non_tensor_batch.get("extra_info", None) or {}

        response_str = await self.loop.run_in_executor(
            None, lambda: self.tokenizer.decode(valid_response_ids, skip_special_tokens=True)
        )
        kwargs = {"data_source": data_source, "solution_str": response_str, "ground_truth": ground_truth,
                  "extra_info": extra_info}
        if self.reward_router_address is not None:
            kwargs.update(reward_router_address=self.reward_router_address,
                          reward_model_tokenizer=self.reward_model_tokenizer)
        if self.is_async_reward_score:
            result = await self.compute_score(**kwargs)
        else:
            result = await self.loop.run_in_executor(None, lambda: self.compute_score(**kwargs))
        return self._finish(result, valid_response_length)

    def _finish(self, result: Any, response_len: int) -> dict:
        """verl's reward dict with consistent ``reward_extra_info`` keys (verl stacks them across trajectories)."""
        if isinstance(result, Mapping):
            info = dict(result)
            score = float(info["score"])
        else:  # a custom scorer returning a bare number: verl's naive manager treats it as acc too
            score = float(result)
            info = {}
        info["score"] = score
        info["acc"] = float(info.get("acc", score))
        info["pred"] = str(info.get("pred", "") or "")
        reward = score
        ob = self.settings.overlong_buffer
        if ob.enable:
            penalty = overlong_penalty(response_len, self.settings.max_resp_len, ob.len, ob.penalty_factor)
            reward += penalty
            if ob.log:
                info["overlong_reward"] = penalty
                info["overlong"] = penalty < 0
        return {"reward_score": reward, "reward_extra_info": info}


def register() -> type[HeapaRewardManager]:
    """Put ``HeapaRewardManager`` into verl's reward-loop registry as ``heapa`` (idempotent)."""
    from verl.experimental.reward_loop.reward_manager import registry

    existing = registry.REWARD_MANAGER.get(NAME)
    if existing is not None and existing is not HeapaRewardManager:
        same = (existing.__module__, existing.__qualname__) == (__name__, HeapaRewardManager.__qualname__)
        if not same:
            raise ValueError(f"reward manager {NAME!r} is already registered by {existing.__module__}."
                             f"{existing.__qualname__}")
        del registry.REWARD_MANAGER[NAME]  # this module was imported again (e.g. by path): keep the newest
    registry.register(NAME)(HeapaRewardManager)
    return HeapaRewardManager


def _is_verl_default(fn: Any) -> bool:
    from verl.utils.reward_score import default_compute_score

    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn is default_compute_score


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    getter = getattr(node, "get", None)
    return getter(key, None) if getter is not None else getattr(node, key, None)


def _default_response_length(config: Any) -> int | None:
    value = _get(_get(_get(config, "actor_rollout_ref"), "rollout"), "response_length")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


# Self-registration: importing this module first imports verl, whose plugin hook imports this module again while it
# is still half-initialised; registering here (not only from the plugin) keeps either import order correct.
register()
