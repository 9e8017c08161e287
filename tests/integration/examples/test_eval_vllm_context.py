"""`python -m verl_ext.evaluation generate --backend vllm` sizes vLLM for the evaluation, not the model's context.

vLLM is not installed here, so the back-end's constructor is replaced by one that records its arguments: the
check is what the CLI would hand to ``vllm.LLM`` (left unset, vLLM reserves KV cache for the model's whole
context: 262k tokens for Qwen3-4B-Instruct-2507).
"""

from __future__ import annotations

import pytest

from verl_ext.evaluation import generate as gen_mod
from verl_ext.evaluation.cli import main


class Recorded(Exception):
    pass


@pytest.fixture
def vllm_kwargs(monkeypatch):
    seen = {}

    def fake_make_generator(backend, model_path, **kwargs):
        seen.update(backend=backend, **kwargs)
        raise Recorded  # stop before generation: nothing to generate with

    monkeypatch.setattr(gen_mod, "make_generator", fake_make_generator)
    return seen


def _run(tiny_assets, tmp_path, *extra):
    args = ["generate", "--model", str(tiny_assets / "model"), "--data", str(tiny_assets / "data" / "val.parquet"),
            "--backend", "vllm", "--out", str(tmp_path / "out"), *extra]
    with pytest.raises(Recorded):
        main(args)


def test_max_model_len_is_longest_prompt_plus_new_tokens(tiny_assets, tmp_path, vllm_kwargs):
    from transformers import AutoTokenizer

    from verl_ext.evaluation.generations import load_eval_data

    _run(tiny_assets, tmp_path, "--max-new-tokens", "16")
    tok = AutoTokenizer.from_pretrained(tiny_assets / "model")
    problems = load_eval_data([str(tiny_assets / "data" / "val.parquet")])
    longest = max(len(tok(p, add_special_tokens=False)["input_ids"])
                  for p in gen_mod.render_prompts(tok, problems, gen_mod.SamplingConfig(max_new_tokens=16)))
    assert vllm_kwargs["backend"] == "vllm" and vllm_kwargs["max_model_len"] == longest + 16


def test_capped_at_the_models_context(tiny_assets, tmp_path, vllm_kwargs):
    import json

    limit = json.loads((tiny_assets / "model" / "config.json").read_text())["max_position_embeddings"]
    _run(tiny_assets, tmp_path, "--max-new-tokens", str(limit * 4))
    assert vllm_kwargs["max_model_len"] == limit


def test_an_explicit_value_is_kept(tiny_assets, tmp_path, vllm_kwargs):
    _run(tiny_assets, tmp_path, "--max-model-len", "333")
    assert vllm_kwargs["max_model_len"] == 333
