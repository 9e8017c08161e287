"""The recipe's augmentation stage without Ray: real pool, lineage, parser, filters and validator; a fake LLM client.

Checks the step's contract: fire never blocks on the teacher, collect submits parsed candidates, integrate inserts
accepted children with a lineage edge; a checkpoint taken while the teacher is still busy loses nothing and
inserts nothing twice after resume.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest

from recipe.heapa.stages.augmentation import AugmentationStage, parse_augment_config
from verl_ext.augment import TeacherConfig
from verl_ext.augment.protocol import format_answer
from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.pool.lineage import LineageConfig
from verl_ext.pool.lineage.refresh import LineageRefresher
from verl_ext.selection.frontier import draw_batch
from verl_ext.tasks import arithmetic


class FakeClient:
    """Answers every request with a tagged variant of the parent (what a warm-started policy writes)."""

    def __init__(self, tokenizer, delay_s: float = 0.0):
        self.tokenizer, self.delay_s, self.calls = tokenizer, delay_s, []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.calls.append(dict(sampling_params))
        n = len(self.calls)  # distinct variants: identical ones would be dropped as duplicates
        await asyncio.sleep(self.delay_s)
        text = format_answer(f"What is {n} * {n + 10}?", 1.1) + "<|im_end|>"
        return SimpleNamespace(token_ids=self.tokenizer(text, add_special_tokens=False)["input_ids"])


class SlowTeacher:
    """The programmatic teacher behind a gate, to hold candidates in flight across a checkpoint."""

    def __init__(self, inner, gate: threading.Event):
        self.inner, self.gate = inner, gate

    def validate(self, candidate):
        self.gate.wait(10)
        return self.inner.validate(candidate)

    def close(self):
        self.gate.set()


@pytest.fixture()
def tokenizer(tiny_assets):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_assets / "model")


def _pool_with_scored_parents(n=4):
    pool = QueryPool(PoolConfig(max_pool_size=100), seed=0)
    ids = [pool.add_seed([{"role": "user", "content": f"What is {i} + 2?"}], str(i + 2), "arith") for i in range(n)]
    taken = draw_batch(pool, n, step=1)
    pool.feedback({rid: (2, 4) for rid in taken}, step=1)
    return pool, ids


def _stage(pool, tokenizer, **teacher_kw):
    aug = parse_augment_config({"enabled": True, "prompt_preset": "tiny", "max_new_tokens": 24, "num_parents": 0,
                                "parent_selection": "all"})
    lineage = LineageRefresher(pool, LineageConfig())
    return AugmentationStage(aug, TeacherConfig(backend="programmatic", concurrency=2, **teacher_kw), tokenizer,
                             pool, lineage, seed=0)


def _wait_for(stage, timeout=10.0):
    deadline = time.monotonic() + timeout
    while stage.validator.pending() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_fire_collect_integrate_inserts_children_with_lineage(tokenizer):
    pool, ids = _pool_with_scored_parents()
    stage = _stage(pool, tokenizer)
    client = FakeClient(tokenizer)
    try:
        assert stage.fire({rid: 0.5 for rid in ids}, client) == len(ids)
        assert stage.collect() == len(ids)
        assert all(c["max_tokens"] == 24 and c["stop"] == ["<END>"] for c in client.calls)
        _wait_for(stage)
        children = stage.integrate(step=2)
        assert len(children) == len(ids)
        for cid in children:
            rec = pool.get(cid)
            assert rec.parent_id in ids and rec.origin == "augmented"
            assert arithmetic.solve(rec.prompt[0]["content"]) == int(rec.answer)
        assert stage.lineage.forest.num_edges == len(ids)
        m = stage.metrics()
        assert m["augment/inserted"] == len(ids) and m["augment/gen_tokens"] > 0
    finally:
        stage.close()


def test_checkpoint_mid_flight_loses_nothing_and_inserts_once(tokenizer):
    pool, ids = _pool_with_scored_parents()
    gate = threading.Event()
    stage = _stage(pool, tokenizer)
    stage.validator.teacher = SlowTeacher(stage.validator.teacher, gate)
    try:
        stage.fire({rid: 0.5 for rid in ids}, FakeClient(tokenizer))
        assert stage.collect() == len(ids)
        time.sleep(0.1)
        assert stage.integrate(step=2) == []  # the teacher is still busy: the step does not wait
        state = stage.state_dict()
        assert len(state["validator"]["pending"]) == len(ids)
    finally:
        gate.set()
        stage.close()
    restored = _stage(pool, tokenizer)
    try:
        restored.load_state_dict(state)
        _wait_for(restored)
        children = restored.integrate(step=3)
        assert len(children) == len(ids)
        assert restored.integrate(step=4) == []
        parents = sorted(pool.get(c).parent_id for c in children)
        assert parents == sorted(ids)
    finally:
        restored.close()


def test_fire_twice_without_collect_is_an_error(tokenizer):
    pool, ids = _pool_with_scored_parents(1)
    stage = _stage(pool, tokenizer)
    try:
        stage.fire({ids[0]: 0.5}, FakeClient(tokenizer, delay_s=0.2))
        with pytest.raises(RuntimeError, match="fired twice"):
            stage.fire({ids[0]: 0.5}, FakeClient(tokenizer))
        stage.collect()
    finally:
        stage.close()


def test_parent_choice_continues_identically_after_a_resume(tokenizer):
    pool, ids = _pool_with_scored_parents(6)
    stage = _stage(pool, tokenizer)
    try:
        stage.rng.random()
        state = stage.state_dict()
        json_state = json.loads(json.dumps(state))
        first = [stage.rng.random() for _ in range(3)]
    finally:
        stage.close()
    restored = _stage(pool, tokenizer)
    try:
        restored.load_state_dict(json_state)
        assert [restored.rng.random() for _ in range(3)] == first
    finally:
        restored.close()


class ArrivalOrderClient:
    """A server whose samples for a prompt are fixed but handed out in arrival order (the hf server's deterministic
    mode): identical requests get the k-th sample in the order they arrive, which ``delays`` decide."""

    def __init__(self, tokenizer, reverse: bool):
        self.tokenizer, self.reverse, self.seen, self.sent = tokenizer, reverse, {}, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        self.sent += 1
        await asyncio.sleep(0.05 * (self.sent % 2 == (0 if self.reverse else 1)))  # one of each pair arrives late
        key = tuple(prompt_ids)
        k = self.seen[key] = self.seen.get(key, -1) + 1
        text = format_answer(f"What is {sum(key) % 89 + 2} * {k + 3}?", 1.1) + "<|im_end|>"
        return SimpleNamespace(token_ids=self.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_siblings_get_the_same_texts_whatever_order_the_server_answers_in(tokenizer):
    """Two copies per parent: the server's answer to each copy depends on arrival order, the child ids and texts
    must not (a pinned CI run once swapped two siblings' texts under load)."""
    texts = []
    for reverse in (False, True):
        pool, ids = _pool_with_scored_parents(2)
        aug = parse_augment_config({"enabled": True, "prompt_preset": "tiny", "max_new_tokens": 24,
                                    "num_parents": 0, "parent_selection": "all", "num_per_prompt": 2})
        stage = AugmentationStage(aug, TeacherConfig(backend="programmatic", concurrency=2), tokenizer, pool,
                                  LineageRefresher(pool, LineageConfig()), seed=0)
        try:
            stage.fire({rid: 0.5 for rid in ids}, ArrivalOrderClient(tokenizer, reverse))
            assert stage.collect() == 4
            _wait_for(stage)
            children = stage.integrate(step=2)
            texts.append([(cid, pool.get(cid).parent_id, pool.get(cid).prompt[0]["content"]) for cid in children])
        finally:
            stage.close()
    assert len(texts[0]) == 4 and texts[0] == texts[1]
