"""``canonical_order``: outputs of identical requests are matched to those requests by content, not arrival."""

from types import SimpleNamespace

from recipe.heapa.stages.augmentation import canonical_order


def _out(*tokens):
    return SimpleNamespace(token_ids=list(tokens))


def test_identical_requests_get_their_outputs_sorted_and_others_stay():
    prompts = [[1, 2], [1, 2], [9], [1, 2]]
    a, b, c, other = _out(5), _out(3, 1), _out(4), _out(7)
    for results in ([a, b, other, c], [c, a, other, b], [b, c, other, a]):
        got = canonical_order(prompts, results)
        assert got == [b, c, other, a]  # (3, 1) < (4,) < (5,), in the identical requests' order


def test_failed_requests_sort_last():
    err = RuntimeError("timeout")
    got = canonical_order([[1], [1]], [err, _out(2)])
    assert got[0].token_ids == [2] and got[1] is err
