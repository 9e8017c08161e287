"""HIVE's probe variants: what ``tail_tokens`` averages over, the flat-probe warning, and the study that chose the
default (``scripts/hive_probe_study.py``) running end to end on the tiny model."""

from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path

import pytest
import torch

from recipe.heapa.stages.hive_verify import PromptEntropyProbe, mean_prompt_entropy
from recipe.heapa.settings import HiveSettings

_spec = importlib.util.spec_from_file_location("hive_probe_study",
                                               Path(__file__).resolve().parents[4] / "scripts/hive_probe_study.py")
_study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_study)
format_table, spearman, study = _study.format_table, _study.spearman, _study.study


def test_tail_tokens_average_the_last_prompt_positions():
    ent = torch.tensor([5.0, 4.0, 3.0, 1.0, 0.5, 9.0])  # the last value is the placeholder's own position
    assert mean_prompt_entropy(ent, 5, 0) == pytest.approx(13.5 / 5)
    assert mean_prompt_entropy(ent, 5, 1) == 0.5  # the first response token's distribution
    assert mean_prompt_entropy(ent, 5) == mean_prompt_entropy(ent, 5, 2) == 0.75 == pytest.approx(
        mean_prompt_entropy(ent, 5, HiveSettings().tail_tokens))
    assert mean_prompt_entropy(ent, 5, 50) == mean_prompt_entropy(ent, 5, 0)  # longer than the prompt: all


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 2], [0, 0, 1, 1]) == pytest.approx(1.0)  # ties share ranks
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_a_flat_probe_warns_once(monkeypatch, caplog):
    import recipe.heapa.stages.hive_verify as hv

    class Store:
        rows = {}

        def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
            pass

        def kv_batch_get(self, keys, partition_id, select_fields=None):
            return {"entropy": [torch.zeros(8) for _ in keys]}

        def kv_clear(self, keys, partition_id):
            pass

    class Tok:
        eos_token_id, pad_token_id = 2, 0

        def apply_chat_template(self, messages, **kwargs):
            return [7] * 5

    class Actor:
        def compute_log_prob(self, meta):
            pass

    monkeypatch.setattr(hv, "tq", Store())
    data = [{"raw_prompt": [{"role": "user", "content": "x"}]}] * 3
    probe = PromptEntropyProbe(data, Tok(), lambda: Actor(), lambda: 1, temperature=1.0, prompt_length=64,
                               micro_batch_size=4)
    with caplog.at_level(logging.WARNING, logger="recipe.heapa.stages.hive_verify"):
        probe([0, 1, 2])
        probe([0, 1, 2])
    assert sum("cannot tell them apart" in r.message for r in caplog.records) == 1


def test_the_study_runs_on_the_tiny_model(tiny_assets):
    result = study(tiny_assets / "model", tiny_assets / "data" / "train.parquet", n_prompts=6, samples=2,
                   max_new_tokens=8, tails=(0, 2), seed=0)
    assert result["n_prompts"] == 6 and set(result["table"]) == {0, 2}
    assert all(len(v) == 6 for v in result["per_prompt"]["probe"].values())
    assert 0.0 <= result["mean_pass_rate"] <= 1.0
    text = format_table(result)
    assert "| 0 (all) |" in text and "| 2 |" in text
