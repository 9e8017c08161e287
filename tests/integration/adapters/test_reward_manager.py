"""The ``heapa`` reward manager, built the way verl's RewardLoopWorker builds it (``load_reward_manager``), and
inside verl's real ``RewardLoopWorker`` class (its ``compute_score_batch``: one ``run_single`` per trajectory,
concurrently, as the Ray actor runs them).

Responses are tokenized with a locally trained tiny tokenizer into verl's per-trajectory layout (``prompts``,
``responses`` right-padded, ``attention_mask`` over both). Stalls and errors (ours and a user's custom scorer's)
must cost only their own trajectory: scored 0 with ``timeout``/``error`` = 1, the rest of the batch scored.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl_ext.adapters.reward_manager import HeapaRewardManager, register

PROMPT_LEN, RESPONSE_LEN = 8, 64
KEYS = {"acc", "pred", "score", "timeout", "error"}
LIMIT_S, SLACK_S = 2.0, 0.5  # 2 s: a batch item queued behind two stalls still has 1 s on a busy machine


def _config(reward_kwargs: dict | None = None, response_length: int = RESPONSE_LEN, custom: dict | None = None,
            model_path: str | None = None):
    reward = {
        "num_workers": 1,
        "custom_reward_function": custom or {"path": None, "name": "compute_score"},
        "reward_manager": {"source": "register", "name": "heapa", "module": {"path": None, "name": "unused"}},
        "reward_model": {"enable": False},
        "sandbox_fusion": None,
    }
    if reward_kwargs is not None:
        reward["reward_kwargs"] = reward_kwargs
    return OmegaConf.create({"reward": reward, "actor_rollout_ref": {
        "rollout": {"response_length": response_length}, "model": {"path": model_path, "tokenizer_path": None}}})


def _manager(tokenizer, reward_kwargs=None, **kw):
    from verl.trainer.ppo.reward import load_reward_manager

    register()
    return load_reward_manager(_config(reward_kwargs, **kw), tokenizer)


def _batch(tokenizer, pairs: list[tuple[str, str]]) -> DataProto:
    return DataProto.concat([_item(tokenizer, response, truth) for response, truth in pairs])


def _stack(outputs: list[dict]) -> dict:
    """verl's agent loop stacks ``reward_extra_info`` by the first trajectory's keys (agent_loop.py)."""
    infos = [o["reward_extra_info"] for o in outputs]
    return {key: np.array([info[key] for info in infos]) for key in infos[0]}


def _item(tokenizer, response: str, ground_truth: str, data_source: str = "no_such_source") -> DataProto:
    pad = tokenizer.pad_token_id
    resp = tokenizer(response + "<|im_end|>", add_special_tokens=False)["input_ids"][:RESPONSE_LEN]
    prompt = tokenizer("What is it?", add_special_tokens=False)["input_ids"][-PROMPT_LEN:]
    prompts = torch.full((1, PROMPT_LEN), pad)
    prompts[0, PROMPT_LEN - len(prompt):] = torch.tensor(prompt)  # left-padded prompt, right-padded response
    responses = torch.full((1, RESPONSE_LEN), pad)
    responses[0, : len(resp)] = torch.tensor(resp)
    mask = torch.zeros((1, PROMPT_LEN + RESPONSE_LEN), dtype=torch.long)
    mask[0, PROMPT_LEN - len(prompt): PROMPT_LEN + len(resp)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": mask,
                 "input_ids": torch.cat([prompts, responses], dim=1)},
        non_tensors={"data_source": np.array([data_source], dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": ground_truth}], dtype=object),
                     "extra_info": np.array([{"index": 3}], dtype=object)},
    )


def _score(manager, data):
    return manager.loop.run_until_complete(manager.run_single(data))


def test_registered_and_built_like_verl(tiny_tokenizer):
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    assert register() is register() is HeapaRewardManager
    assert get_reward_manager_cls("heapa") is HeapaRewardManager
    assert resolve_reward_manager_cls(_config()) is HeapaRewardManager
    assert isinstance(_manager(tiny_tokenizer), HeapaRewardManager)


@pytest.mark.parametrize(
    ("response", "truth", "acc"),
    [
        ("So the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", 1.0),
        ("It is \\boxed{0.5}", "\\frac12", 1.0),
        ("Thus \\boxed{42}", "41", 0.0),
        ("no box at all, 17", "17", 0.0),
    ],
)
def test_boxed_answers(tiny_tokenizer, response, truth, acc):
    out = _score(_manager(tiny_tokenizer), _item(tiny_tokenizer, response, truth))
    assert out["reward_score"] == acc
    assert out["reward_extra_info"]["acc"] == acc and out["reward_extra_info"]["score"] == acc
    assert set(out["reward_extra_info"]) == KEYS
    assert out["reward_extra_info"]["timeout"] == out["reward_extra_info"]["error"] == 0.0
    if acc:
        assert out["reward_extra_info"]["pred"]


def test_garbage_scores_zero(tiny_tokenizer):
    manager = _manager(tiny_tokenizer, {"timeout_s": 1.0})
    for response in ("\\boxed{", "}}}{{{\\boxed{}", "\\boxed{99999999!}"):
        out = _score(manager, _item(tiny_tokenizer, response, "12"))
        assert out["reward_score"] == 0.0 and out["reward_extra_info"]["acc"] == 0.0


@pytest.fixture
def tokenizer_dir(tiny_tokenizer, tmp_path):
    tiny_tokenizer.save_pretrained(tmp_path / "tok")
    return str(tmp_path / "tok")


def test_stalls_in_verls_reward_loop_worker_cost_only_their_trajectory(tiny_tokenizer, tokenizer_dir):
    """verl's RewardLoopWorker scores a batch concurrently; stalls end at the limit, the rest is scored right."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    worker = RewardLoopWorker(_config({"timeout_s": LIMIT_S}, model_path=tokenizer_dir))
    pairs = [("so \\boxed{9^{9^{9}}}", "x^2+1"), ("\\boxed{10^{9}!}", "7"), ("\\boxed{(x+1)^2}", "x^2+2x+1"),
             ("\\boxed{1.24e-8}", "1.24\\times10^{-8}"), ("\\boxed{0}", "2.88e-19"), ("\\boxed{B}", "B"),
             ("\\boxed{\\frac{\\sqrt{3}}{3}}", "\\frac{1}{\\sqrt{3}}"), ("\\boxed{11111111101}", "11111111100")]
    start = time.monotonic()
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(_batch(tiny_tokenizer, pairs)))
    took = time.monotonic() - start
    stacked = _stack(outputs)
    assert took <= LIMIT_S + SLACK_S
    assert stacked["acc"].tolist() == [0, 0, 1, 1, 0, 1, 1, 0]
    assert stacked["timeout"].tolist()[:2] == [1, 1] and stacked["timeout"][2:].sum() == 0
    assert [o["reward_score"] for o in outputs] == stacked["score"].tolist()


CUSTOM = '''
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, **kwargs):
    if ground_truth == "raise":
        raise ValueError("bad row")
    if ground_truth == "spin":
        while True:  # holds the GIL: only a kill ends it
            pass
    if ground_truth == "sleep":
        time.sleep(60)
    correct = ground_truth in solution_str
    return {"score": float(correct) + bonus, "acc": float(correct), "pred": solution_str[-8:], "source": data_source}
'''


def test_a_custom_scorer_that_raises_or_hangs_costs_only_its_trajectory(tiny_tokenizer, tokenizer_dir, tmp_path):
    """``reward.custom_reward_function`` runs in the worker processes under the same limit (verl loads it by path)."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    path = tmp_path / "my_reward.py"
    path.write_text(CUSTOM)
    custom = {"path": str(path), "name": "compute_score", "reward_kwargs": {"bonus": 0.5}}
    worker = RewardLoopWorker(_config({"timeout_s": LIMIT_S}, custom=custom, model_path=tokenizer_dir))
    assert worker.reward_manager.custom_target[0] == "path"
    pairs = [("it is 12", "12"), ("x", "raise"), ("y", "spin"), ("z", "sleep"), ("it is 7", "7"), ("no", "5")]
    start = time.monotonic()
    outputs = worker.loop.run_until_complete(worker.compute_score_batch(_batch(tiny_tokenizer, pairs)))
    took = time.monotonic() - start
    stacked = _stack(outputs)  # the failures carry the custom keys too, so verl's stacking works
    assert took <= LIMIT_S + SLACK_S
    assert stacked["acc"].tolist() == [1, 0, 0, 0, 1, 0]
    assert stacked["score"].tolist() == [1.5, 0, 0, 0, 1.5, 0.5]
    assert stacked["error"].tolist() == [0, 1, 0, 0, 0, 0]
    assert stacked["timeout"].tolist() == [0, 0, 1, 1, 0, 0]
    assert set(stacked) == KEYS | {"source"}


def test_an_async_custom_scorer_is_limited_on_the_loop(tiny_tokenizer):
    import asyncio

    async def scorer(data_source, solution_str, ground_truth, extra_info=None, **_):
        if ground_truth == "hang":
            await asyncio.sleep(60)
        if ground_truth == "raise":
            raise KeyError("x")
        return {"score": 1.0, "acc": 1.0, "pred": ""}

    manager = HeapaRewardManager(_config({"timeout_s": 0.5}), tiny_tokenizer, scorer)
    outs = [_score(manager, _item(tiny_tokenizer, "r", t)) for t in ("raise", "hang", "ok")]
    assert [o["reward_extra_info"]["acc"] for o in outs] == [0.0, 0.0, 1.0]
    assert [(o["reward_extra_info"]["timeout"], o["reward_extra_info"]["error"]) for o in outs] == [
        (0.0, 1.0), (1.0, 0.0), (0.0, 0.0)]


def test_failures_before_any_success_do_not_break_verls_stacking(tiny_tokenizer):
    """A failure that finished before the scorer's first result cannot know its extra keys; stacking still works."""
    def scorer(data_source, solution_str, ground_truth, extra_info=None, **_):
        if ground_truth == "raise":
            raise ValueError("bad row")
        return {"score": 1.0, "acc": 1.0, "pred": "", "judge": "yes"}

    manager = HeapaRewardManager(_config(), tiny_tokenizer, scorer)
    failed = _score(manager, _item(tiny_tokenizer, "r", "raise"))
    ok = _score(manager, _item(tiny_tokenizer, "r", "1"))
    stacked = _stack([ok, failed])  # the batch's first trajectory carries "judge", the failure does not
    assert stacked["judge"].tolist() == ["yes", None] and stacked["error"].tolist() == [0.0, 1.0]


def test_dapo_format_scores_plus_minus_one(tiny_tokenizer):
    manager = _manager(tiny_tokenizer, {"format": "dapo"})
    right = _score(manager, _item(tiny_tokenizer, "work...\nAnswer: 12", "12"))
    wrong = _score(manager, _item(tiny_tokenizer, "work...\nAnswer: 13", "12"))
    assert (right["reward_score"], right["reward_extra_info"]["acc"]) == (1.0, 1.0)
    assert (wrong["reward_score"], wrong["reward_extra_info"]["acc"]) == (-1.0, 0.0)


def test_overlong_penalty_like_verls_dapo_manager(tiny_tokenizer):
    import functools

    from verl.experimental.reward_loop.reward_manager import DAPORewardManager

    from verl_ext.reward import compute_score

    kwargs = {"format": "dapo", "overlong_buffer_cfg": {"enable": True, "len": 16, "penalty_factor": 1.0,
                                                        "log": True}}
    manager = _manager(tiny_tokenizer, kwargs, response_length=32)  # max_resp_len defaults to response_length
    data = _item(tiny_tokenizer, "7 " * 6 + "\nAnswer: 12", "12")  # ~23 tokens: past 32-16
    n_tokens = int(data.batch["attention_mask"][0, PROMPT_LEN:].sum())
    expected = -min(max(n_tokens - (32 - 16), 0) / 16, 1.0)
    assert -1 < expected < 0
    out = _score(manager, data)
    assert out["reward_score"] == pytest.approx(1.0 + expected)
    assert out["reward_extra_info"]["overlong_reward"] == pytest.approx(expected)
    assert out["reward_extra_info"]["overlong"] is True and out["reward_extra_info"]["acc"] == 1.0
    short = _score(manager, _item(tiny_tokenizer, "Answer: 12", "12"))
    assert short["reward_score"] == 1.0 and short["reward_extra_info"]["overlong"] is False

    # verl's own DAPO manager, given the same scorer and settings, agrees
    verl_cfg = _config({**kwargs, "max_resp_len": 32})
    dapo = DAPORewardManager(verl_cfg, tiny_tokenizer, functools.partial(compute_score, format="dapo"))
    theirs = _score(dapo, data)
    assert float(theirs["reward_score"]) == pytest.approx(out["reward_score"])
    assert theirs["reward_extra_info"]["acc"] == out["reward_extra_info"]["acc"]


def test_bad_reward_kwargs_are_rejected(tiny_tokenizer):
    with pytest.raises(ValueError, match="unknown reward.reward_kwargs keys"):
        _manager(tiny_tokenizer, {"fromat": "dapo"})
    with pytest.raises(ValueError, match="reward.reward_kwargs: timeout_s"):
        _manager(tiny_tokenizer, {"timeout_s": -1})
    with pytest.raises(ValueError, match="max_response_chars was removed"):
        _manager(tiny_tokenizer, {"max_response_chars": 1000})
    with pytest.raises(ValueError, match="format='latex'"):
        _manager(tiny_tokenizer, {"format": "latex"})
    with pytest.raises(ValueError, match="max_resp_len"):
        _manager(tiny_tokenizer, {"overlong_buffer": {"enable": True, "len": 64}}, response_length=32)
