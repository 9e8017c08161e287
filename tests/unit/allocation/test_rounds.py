"""Reinforce-Ada's exit rules and down-sampling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_ext.allocation import RoundsConfig, has_exited, kept_passes


def test_exit_rules():
    assert has_exited(1, 8, 8, "positive") and not has_exited(0, 32, 8, "positive")
    assert has_exited(4, 8, 8, "balanced") and not has_exited(5, 8, 8, "balanced")
    assert has_exited(5, 9, 8, "balanced") and has_exited(4, 7, 7, "balanced")  # odd n: 3 of one, 4 of the other
    assert not has_exited(3, 5, 7, "balanced") and kept_passes(4, 7, 7) == 4


@given(st.integers(1, 16), st.integers(0, 64), st.integers(0, 64))
def test_the_kept_group_is_n_balanced_where_it_can_be(n, passes, fails):
    total = passes + fails
    if total < n:
        with pytest.raises(ValueError, match="cannot keep"):
            kept_passes(passes, total, n)
        return
    c = kept_passes(passes, total, n)
    assert 0 <= c <= passes and 0 <= n - c <= fails
    if passes >= n // 2 and fails >= n - n // 2:
        assert c == n // 2
    else:  # the scarcer kind is kept whole
        assert c == passes or n - c == fails


def test_round_sizes_and_bad_settings():
    assert RoundsConfig().sizes(8) == (8, 32) and RoundsConfig(round_size=4, max_per_prompt=16).sizes(8) == (4, 16)
    with pytest.raises(ValueError, match="exit must be one of"):
        RoundsConfig(exit="any").sizes(8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n \\(8\\) <= it"):
        RoundsConfig(max_per_prompt=4, round_size=2).sizes(8)
