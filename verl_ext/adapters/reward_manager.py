"""The ``heapa`` reward manager for verl 0.9.1's reward loop: math scoring with a hard time limit per trajectory.

Selected with ``reward.reward_manager.name=heapa`` (source ``register``; ``register()`` must have run in the
process, which ``verl_ext.plugin`` does). verl builds it inside each ``RewardLoopWorker`` Ray actor
(``load_reward_manager``) and calls ``async run_single`` once per trajectory, concurrently. It follows the
``naive``/``dapo`` managers' contract exactly - last sequence of the item, response decoded with
``skip_special_tokens=True`` over the valid response tokens, ``data_source`` / ``reward_model.ground_truth`` /
``extra_info`` from the non-tensor fields - and scores with ``verl_ext.reward.Scorer``, which knows no data
sources, so an unknown ``data_source`` never raises.

Time limit and isolation: scoring runs on a thread pool of this manager, and everything that needs
math-verify/sympy runs in warm worker processes that are killed at ``timeout_s`` (``verl_ext.reward.workers``:
forked from a zygote by a supervisor thread, killed with the actor via ``PR_SET_PDEATHSIG``). A timeout or an
error scores the trajectory as wrong (0, or -1 with ``format=dapo``) with ``acc=0`` and ``timeout``/``error`` = 1.
A user's ``reward.custom_reward_function`` (verl passes it in; verl's ``default_compute_score`` is replaced) runs
in the same worker processes, loaded from its path, under the same limit; an async one runs on the event loop
under ``asyncio.wait_for``. Its results are ``RewardInfo`` dicts (a missing key reads as None), so a failure that
cannot know the scorer's extra keys does not break verl's stacking.

Settings come from ``reward.reward_kwargs`` (verl's DAPO manager reads the same place): the
``verl_ext.reward.ScorerConfig`` fields (``format``, ``timeout_s``, ``workers``, ``memory_limit_mb``,
``max_answer_chars``, ``min_digits``, ``choices``), ``overlong_buffer_cfg`` (alias ``overlong_buffer``)
``{enable, len, penalty_factor, log}`` and ``max_resp_len`` (default ``actor_rollout_ref.rollout.response_length``)
for DAPO's soft overlong penalty.

Returns ``{"reward_score": score + penalty, "reward_extra_info": {"score", "acc", "pred", "timeout", "error"[,
"overlong_reward", "overlong"]}}``; ``acc`` (0/1) is what the trainer feeds back to the pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import inspect
import logging
import pickle
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from verl_ext.adapters._config import as_dict
from verl_ext.reward import Scorer, ScorerConfig, overlong_penalty

logger = logging.getLogger(__name__)

NAME = "heapa"
# Threads that wait on worker processes (cheap: they block on a pipe); bounds how many trajectories of one
# reward actor are being scored at once.
SCORING_THREADS = 32
STARTUP_TIMEOUT_S = 180.0
_SCORER_FIELDS = tuple(f.name for f in dataclasses.fields(ScorerConfig))


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

    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    max_resp_len: int | None = None

    def __post_init__(self) -> None:
        ob = self.overlong_buffer
        if ob.enable:
            if not isinstance(ob.len, int) or ob.len <= 0:
                raise ValueError(f"overlong_buffer.len must be a positive int when enabled, got {ob.len!r}")
            if self.max_resp_len is None or self.max_resp_len < ob.len:
                raise ValueError(f"max_resp_len ({self.max_resp_len}) must be set and >= overlong_buffer.len "
                                 f"({ob.len}) when the overlong penalty is enabled")

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None, default_max_resp_len: int | None = None
                    ) -> HeapaRewardConfig:
        data = dict(kwargs or {})
        if "max_response_chars" in data:
            raise ValueError("reward.reward_kwargs.max_response_chars was removed: the whole response is searched "
                             "now; bound the extracted answer with reward.reward_kwargs.max_answer_chars")
        if "overlong_buffer_cfg" in data:
            if "overlong_buffer" in data:
                raise ValueError("reward.reward_kwargs sets both overlong_buffer_cfg and overlong_buffer")
            data["overlong_buffer"] = data.pop("overlong_buffer_cfg")
        known = set(_SCORER_FIELDS) | {"overlong_buffer", "max_resp_len"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown reward.reward_kwargs keys {sorted(unknown)} for the heapa reward manager; "
                             f"known: {sorted(known | {'overlong_buffer_cfg'})}")
        ob = dict(data.get("overlong_buffer") or {})
        ob_known = {f.name for f in dataclasses.fields(OverlongBufferConfig)}
        if set(ob) - ob_known:
            raise ValueError(f"unknown overlong_buffer keys {sorted(set(ob) - ob_known)}; known: {sorted(ob_known)}")
        try:
            scorer = ScorerConfig(**{k: data[k] for k in _SCORER_FIELDS if k in data})
        except ValueError as exc:
            raise ValueError(f"reward.reward_kwargs: {exc}") from exc
        max_resp_len = data.get("max_resp_len")
        return cls(scorer, OverlongBufferConfig(**ob),
                   default_max_resp_len if max_resp_len is None else max_resp_len)


class RewardInfo(dict):
    """``reward_extra_info`` of a custom scorer's trajectory: a missing key reads as None.

    verl stacks ``reward_extra_info`` by the keys of a batch's first trajectory (``info[key]`` for every other one).
    A trajectory whose custom scorer timed out or raised cannot know the keys the scorer returns for the others
    when it finished first; reading None keeps the batch alive (verl's metrics skip None values).
    """

    def __missing__(self, key: str) -> None:
        return None


class HeapaRewardManager(RewardManagerBase):
    """Math scoring for any data source, time-limited; see the module docstring."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, reward_router_address: Any = None,
                 reward_model_tokenizer: Any = None, **_: Any) -> None:
        super().__init__(config, tokenizer, compute_score)
        self.settings = HeapaRewardConfig.from_kwargs(as_dict(_get(_get(config, "reward"), "reward_kwargs")),
                                                      _default_response_length(config))
        self.scorer = Scorer(self.settings.scorer)
        if not self.scorer.warm_up(STARTUP_TIMEOUT_S):
            raise RuntimeError(f"the reward scorer's worker processes did not start within {STARTUP_TIMEOUT_S} s; "
                               "see the actor's log for the zygote's error")
        self.custom = None if compute_score is None or _is_verl_default(compute_score) else compute_score
        self.is_async_reward_score = inspect.iscoroutinefunction(self.custom) if self.custom is not None else False
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        self.custom_target = None
        if self.custom is not None and not self.is_async_reward_score and reward_router_address is None:
            self.custom_target = _isolated_target(config, self.custom)
            if self.custom_target is None:
                logger.warning("custom reward function %r cannot be loaded in a worker process: it runs in a thread "
                               "here, and a hang can only be abandoned, not stopped", self.custom)
        self._executor = ThreadPoolExecutor(max_workers=SCORING_THREADS, thread_name_prefix="heapa-reward")
        self._custom_keys: dict[str, None] = {}

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
            self._executor, lambda: self.tokenizer.decode(valid_response_ids, skip_special_tokens=True)
        )
        kwargs = {"data_source": data_source, "solution_str": response_str, "ground_truth": ground_truth,
                  "extra_info": extra_info}
        if self.custom is None:
            result = await self.loop.run_in_executor(
                self._executor, functools.partial(self.scorer.score, data_source, response_str, ground_truth,
                                                  extra_info))
        else:
            result = await self._score_custom(kwargs)
        return self._finish(result, valid_response_length)

    async def _score_custom(self, kwargs: dict[str, Any]) -> Any:
        """A user's scoring function under the same limit; a timeout or an error is a scored, counted failure."""
        timeout_s = float(self.settings.scorer.timeout_s)
        if self.reward_router_address is not None:
            kwargs.update(reward_router_address=self.reward_router_address,
                          reward_model_tokenizer=self.reward_model_tokenizer)
        if self.custom_target is not None:
            deadline = time.monotonic() + timeout_s
            try:
                outcome = await self.loop.run_in_executor(
                    self._executor, functools.partial(self.scorer.call, self.custom_target, kwargs, deadline))
            except (pickle.PicklingError, TypeError, AttributeError, ValueError):  # the row's kwargs do not pickle
                logger.exception("could not send a trajectory to the custom scorer's worker; scoring it as wrong")
                return self._failure("error")
            return outcome.value if outcome.status == "ok" else self._failure(outcome.status)
        if self.is_async_reward_score:
            call = self.custom(**kwargs)
        else:
            call = self.loop.run_in_executor(self._executor, lambda: self.custom(**kwargs))
        try:
            return await asyncio.wait_for(call, timeout_s)
        except asyncio.TimeoutError:
            logger.warning("custom reward function exceeded %.1f s; scoring the trajectory as wrong", timeout_s)
            return self._failure("timeout")
        except Exception:  # a raising scorer must not stop the batch: logged, counted (error=1), scored wrong
            logger.exception("custom reward function raised; scoring the trajectory as wrong")
            return self._failure("error")

    def _failure(self, status: str) -> dict[str, Any]:
        info: dict[str, Any] = dict.fromkeys(self._custom_keys)  # keys other trajectories carry (verl stacks them)
        info.update(self.scorer.failure_result(status))
        return info

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
        info.setdefault("timeout", 0.0)
        info.setdefault("error", 0.0)
        if self.custom is not None:
            self._custom_keys.update(dict.fromkeys(info))
            info = RewardInfo({**dict.fromkeys(self._custom_keys), **info})
        reward = score
        ob = self.settings.overlong_buffer
        if ob.enable:
            penalty = overlong_penalty(response_len, self.settings.max_resp_len, ob.len, ob.penalty_factor)
            reward += penalty
            if ob.log:
                info["overlong_reward"] = penalty
                info["overlong"] = penalty < 0
        return {"reward_score": reward, "reward_extra_info": info}


def _isolated_target(config: Any, fn: Any) -> Any:
    """How a worker process can load the custom scorer: verl's configured (path, name, reward_kwargs), or the
    function itself when it pickles by reference to an importable module; None when neither works."""
    cfg = _get(_get(config, "reward"), "custom_reward_function")
    path, name = _get(cfg, "path"), _get(cfg, "name")
    if path and name:
        return ("path", str(path), str(name), as_dict(_get(cfg, "reward_kwargs")) or {})
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    module = getattr(target, "__module__", None)
    if not module or module == "__main__" or "<locals>" in getattr(target, "__qualname__", "<locals>"):
        return None
    try:
        if importlib.util.find_spec(module) is None:
            return None
        pickle.dumps(fn)
    except (ImportError, ValueError, AttributeError, TypeError, pickle.PicklingError):
        return None
    return fn


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
