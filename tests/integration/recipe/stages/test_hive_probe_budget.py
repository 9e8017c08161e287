"""HIVE's prompt-entropy probe keeps every forward micro-batch within ``heapa.hive.probe_max_tokens`` (no Ray).

The probe runs while vLLM is awake, so its micro-batches must stay small whatever the actor's own log-prob batching
(``stages/hive_verify.py``'s docstring has the memory arithmetic). The fake actor worker group below does what verl 0.9.1
does with the probe's ``KVBatchMeta``: it splits the rows evenly over the data-parallel ranks, turns ``extra_info``
into non-tensor data (``_async_meta_to_realdata``), fills in the engine's own batching keys only where the call left
them out (``TrainingWorker.infer_batch``) and cuts micro-batches with verl's ``prepare_micro_batches``; the test
measures those micro-batches. An in-memory stand-in replaces TransferQueue.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

import recipe.heapa.stages.hive_verify as hive_verify
from recipe.heapa.stages.hive_verify import DEFAULT_MAX_TOKENS, PromptEntropyProbe
from recipe.heapa.settings import HeapaConfigError, HiveSettings, parse_settings
from verl.utils import tensordict_utils as tu
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.engine.utils import prepare_micro_batches

CONFIG_DIR = str(Path(__file__).resolve().parents[4] / "recipe" / "heapa" / "config")
ACTOR_TOKEN_LIMIT = 24576  # the GPU launcher's ppo_max_token_len_per_gpu (log_prob_max_token_len_per_gpu follows it)


class FakeTQ:
    """``kv_batch_put`` / ``kv_batch_get`` / ``kv_clear`` over a dict, as the probe uses them."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        assert partition_id == hive_verify.PARTITION
        for i, key in enumerate(keys):
            self.rows[key] = {name: fields[name][i] for name in fields.keys()}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        return {name: [self.rows[key][name] for key in keys] for name in select_fields}

    def kv_clear(self, keys, partition_id):
        for key in keys:
            self.rows.pop(key, None)


class FakeActor:
    """verl's path from ``compute_log_prob(KVBatchMeta)`` to micro-batches, with the engine configured as the actor."""

    def __init__(self, store: FakeTQ, dp: int, *, use_dynamic_bsz: bool, micro_batch_size_per_gpu: int | None = None):
        self.store, self.dp = store, dp
        self.engine_defaults = {"use_dynamic_bsz": use_dynamic_bsz, "max_token_len_per_gpu": ACTOR_TOKEN_LIMIT,
                                "micro_batch_size_per_gpu": micro_batch_size_per_gpu}
        self.extra_info: list[dict] = []
        self.micro_batches: list[dict] = []  # one entry per micro-batch on any rank: rows, real and padded tokens

    def compute_log_prob(self, meta):
        self.extra_info.append(dict(meta.extra_info))
        assert len(meta.keys) % self.dp == 0, "verl's dispatch splits the rows evenly over the ranks"
        share = len(meta.keys) // self.dp
        for rank in range(self.dp):
            keys = meta.keys[rank * share:(rank + 1) * share]
            data = list_of_dict_to_tensordict([dict(self.store.rows[k]) for k in keys])
            for key, val in meta.extra_info.items():  # _async_meta_to_realdata
                tu.assign_non_tensor_data(tensor_dict=data, key=key, val=val)
            for key, val in self.engine_defaults.items():  # TrainingWorker.infer_batch: only keys the call left out
                if key not in data.keys():
                    tu.assign_non_tensor(data, **{key: val})
            micro_batches, _ = prepare_micro_batches(data)
            for mb in micro_batches:
                lengths = [int(t.numel()) for t in mb["input_ids"].unbind()]
                self.micro_batches.append({"rows": len(lengths), "tokens": sum(lengths),
                                           "padded": len(lengths) * max(lengths)})
            for key in keys:  # per-position entropy; the probe averages over the prompt positions
                n = int(self.store.rows[key]["input_ids"].numel())
                self.store.rows[key]["entropy"] = torch.full((n,), float(n - 1))


class FakeTokenizer:
    eos_token_id = 2
    pad_token_id = 0

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **kwargs):
        return [7] * len(messages[0]["content"])  # one token per character


def make_probe(lengths, *, dp, use_dynamic_bsz, micro=None, prompt_length=4096, monkeypatch, **kwargs):
    store = FakeTQ()
    monkeypatch.setattr(hive_verify, "tq", store)
    actor = FakeActor(store, dp, use_dynamic_bsz=use_dynamic_bsz, micro_batch_size_per_gpu=micro)
    dataset = [{"raw_prompt": [{"role": "user", "content": "x" * n}]} for n in lengths]
    probe = PromptEntropyProbe(dataset, FakeTokenizer(), lambda: actor, lambda: dp, temperature=1.0,
                               prompt_length=prompt_length, micro_batch_size=None if use_dynamic_bsz else micro,
                               **kwargs)
    return probe, actor, store


def lengths_like_dapo_math(n, seed=0):
    rng = random.Random(seed)
    return [rng.randint(60, 1500) for _ in range(n)] + [2047]  # one prompt at the launcher's max_prompt_length


def test_dynamic_batch_sizes_pass_the_budget_not_the_actors_limit(monkeypatch):
    lengths = lengths_like_dapo_math(95)
    probe, actor, store = make_probe(lengths, dp=4, use_dynamic_bsz=True, monkeypatch=monkeypatch,
                                     max_token_len_per_gpu=ACTOR_TOKEN_LIMIT)
    out = probe(list(range(len(lengths))))
    assert actor.extra_info[0]["use_dynamic_bsz"] is True
    assert actor.extra_info[0]["max_token_len_per_gpu"] == DEFAULT_MAX_TOKENS == 4096
    assert actor.extra_info[0]["calculate_entropy"] is True
    assert max(mb["tokens"] for mb in actor.micro_batches) <= 4096
    assert len(actor.micro_batches) > 4  # the actor's own 24576 would have packed each rank into one micro-batch
    assert out == {i: float(n) for i, n in enumerate(lengths)}  # each candidate got its own row's entropy back
    assert not store.rows  # the probe's partition is cleared


def test_the_actors_smaller_limit_wins_and_a_longer_prompt_goes_alone(monkeypatch):
    probe, actor, _ = make_probe([300] * 8, dp=2, use_dynamic_bsz=True, monkeypatch=monkeypatch,
                                 max_token_len_per_gpu=1024)
    probe(list(range(8)))
    assert actor.extra_info[-1]["max_token_len_per_gpu"] == 1024
    assert max(mb["tokens"] for mb in actor.micro_batches) <= 1024
    # verl refuses a limit below the longest row: the limit rises to that row, which is forwarded alone
    probe, actor, _ = make_probe([100, 100, 100, 1000], dp=2, use_dynamic_bsz=True, monkeypatch=monkeypatch,
                                 max_tokens=512)
    probe([0, 1, 2, 3])
    assert actor.extra_info[-1]["max_token_len_per_gpu"] == 1001
    assert sorted(mb["tokens"] for mb in actor.micro_batches) == [101, 202, 1001]  # rank 0: 2 short rows; 1: split


def test_padded_rows_use_fixed_micro_batches_even_when_the_actors_are_dynamic(monkeypatch):
    # without remove-padding verl pads each micro-batch to its longest row, and its dynamic limit counts real tokens:
    # one 2048-token prompt packed with short ones would forward far more than 4096 padded positions
    lengths = lengths_like_dapo_math(95, seed=2)
    probe, actor, _ = make_probe(lengths, dp=4, use_dynamic_bsz=True, monkeypatch=monkeypatch,
                                 max_token_len_per_gpu=ACTOR_TOKEN_LIMIT, remove_padding=False)
    out = probe(list(range(len(lengths))))
    assert actor.extra_info[0]["use_dynamic_bsz"] is False
    assert actor.extra_info[0]["micro_batch_size_per_gpu"] == 4096 // 2048 == 2
    assert max(mb["padded"] for mb in actor.micro_batches) <= 4096
    assert out == {i: float(n) for i, n in enumerate(lengths)}


def test_fixed_micro_batches_are_capped_so_that_micro_times_longest_fits(monkeypatch):
    lengths = lengths_like_dapo_math(61, seed=1)
    probe, actor, _ = make_probe(lengths, dp=2, use_dynamic_bsz=False, micro=32, monkeypatch=monkeypatch)
    out = probe(list(range(len(lengths))))
    longest = max(lengths) + 1  # the placeholder response token
    assert actor.extra_info[0]["use_dynamic_bsz"] is False
    assert actor.extra_info[0]["micro_batch_size_per_gpu"] == 4096 // longest == 2
    assert max(mb["padded"] for mb in actor.micro_batches) <= 4096  # padding included
    assert len(out) == len(lengths)


def test_fixed_micro_batches_keep_the_actors_smaller_size_and_a_ranks_share(monkeypatch):
    probe, actor, _ = make_probe([40] * 64, dp=2, use_dynamic_bsz=False, micro=8, monkeypatch=monkeypatch)
    probe(list(range(64)))
    assert actor.extra_info[-1]["micro_batch_size_per_gpu"] == 8  # 4096 // 41 = 99 would allow more
    probe, actor, _ = make_probe([40] * 3, dp=2, use_dynamic_bsz=False, micro=8, monkeypatch=monkeypatch)
    probe([0, 1, 2])
    assert actor.extra_info[-1]["micro_batch_size_per_gpu"] == 2  # a rank's share of 3 rows over 2 ranks
    probe, actor, _ = make_probe([3000, 10], dp=1, use_dynamic_bsz=False, micro=8, monkeypatch=monkeypatch)
    probe([0, 1])
    assert actor.extra_info[-1]["micro_batch_size_per_gpu"] == 1  # a row longer than the budget goes alone


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=["method=hive_dapo", *overrides])
    with open_dict(cfg):
        cfg.heapa.method = "test"  # `${hydra:...}` resolves only inside a running Hydra app
    return cfg


def test_probe_max_tokens_is_a_validated_hydra_override():
    cfg = _compose()
    assert parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True)).hive.probe_max_tokens == 4096
    assert HiveSettings().probe_max_tokens == DEFAULT_MAX_TOKENS
    cfg = _compose("heapa.hive.probe_max_tokens=2048")
    assert parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True)).hive.probe_max_tokens == 2048


@pytest.mark.parametrize("value", ["0", "-4096", "many", "1.5", "true", "null"])
def test_a_bad_probe_max_tokens_fails_naming_the_key(value):
    cfg = _compose(f"heapa.hive.probe_max_tokens={value}")
    with pytest.raises(HeapaConfigError, match=r"heapa\.hive.*probe_max_tokens"):
        parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))


def test_the_trainer_hands_the_knob_and_the_actors_batching_to_the_probe():
    from recipe.heapa.trainer import HeapaTrainer

    def build(*overrides):
        cfg = _compose(*overrides)
        heapa = parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))
        fake = SimpleNamespace(heapa=heapa, config=cfg, train_dataset=[], tokenizer=FakeTokenizer(), probe=None,
                               actor_rollout_wg=None, _actor_dp_size=lambda: 1)
        HeapaTrainer._build_strategy(fake)
        return fake.probe

    # the GPU launcher's batching: dynamic batch sizes, 24576 tokens per GPU
    probe = build("actor_rollout_ref.actor.use_dynamic_bsz=True", "actor_rollout_ref.model.use_remove_padding=True",
                  f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={ACTOR_TOKEN_LIMIT}")
    assert (probe.micro_batch_size, probe.max_tokens, probe.max_token_len_per_gpu) == (None, 4096, ACTOR_TOKEN_LIMIT)
    assert probe.remove_padding
    # the CPU platform: fixed micro batches, padded rows
    probe = build("platform=cpu", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
                  "heapa.hive.probe_max_tokens=1024")
    assert (probe.micro_batch_size, probe.max_tokens, probe.max_token_len_per_gpu) == (16, 1024, None)
    assert not probe.remove_padding
