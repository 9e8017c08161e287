"""``RowNoise``: per-row Gumbel-max sampling is a sample of the tempered, truncated distribution."""

from __future__ import annotations

import pytest
import torch

from verl_ext.cpu.hf_server import RowNoise


def _draws(logits, n, **kw):
    scores = logits.expand(n, -1).clone()
    noise = RowNoise(list(range(n)), **kw)
    return torch.argmax(noise(None, scores), dim=-1)


def test_gumbel_max_matches_softmax_frequencies():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    n = 20_000
    for temperature in (1.0, 0.5):
        counts = torch.bincount(_draws(logits, n, temperature=temperature), minlength=4).float() / n
        expected = torch.softmax(logits[0] / temperature, -1)
        # 20k draws: the standard error of each frequency is below 0.0035; 0.015 is over 4 of them
        assert torch.allclose(counts, expected, atol=0.015), (temperature, counts, expected)


def test_top_k_and_top_p_truncate():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    assert set(_draws(logits, 4000, temperature=1.0, top_k=2).tolist()) == {0, 1}
    # probabilities ~ .64 .23 .09 .03 .01: top_p 0.8 keeps the first two (the mass before token 2 is .87)
    assert set(_draws(logits, 4000, temperature=1.0, top_p=0.8).tolist()) == {0, 1}
    assert set(_draws(logits, 4000, temperature=1.0, top_p=0.5).tolist()) == {0}


def test_a_rows_noise_depends_on_its_seed_alone():
    scores = torch.zeros(3, 50)
    a = RowNoise([7, 8, 9], temperature=1.0)(None, scores)
    b = RowNoise([9, 7], temperature=1.0)(None, scores[:2])
    assert torch.equal(a[0], b[1]) and torch.equal(a[2], b[0])


def test_greedy_is_not_row_noise():
    with pytest.raises(ValueError, match="temperature"):
        RowNoise([1], temperature=0.0)
