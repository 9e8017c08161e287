"""Asset profiles: the tiny build keeps its cache key, the learn build differs where it says it does."""

from __future__ import annotations

import random

from verl_ext.cpu import assets
from verl_ext.tasks import arithmetic


def test_tiny_profile_keeps_the_cache_key_of_builds_before_profiles():
    # 6c0255d4318a16b2: the digest of AssetConfig() before boxed_share existed; older caches stay valid
    assert assets.PROFILES["tiny"].digest() == assets.AssetConfig().digest() == "6c0255d4318a16b2"
    learn = assets.PROFILES["learn"]
    assert learn.digest() != assets.AssetConfig().digest()
    assert learn.val_rows >= 500 and 0 < learn.boxed_share < 1


def test_boxed_share_sets_the_share_of_answers_the_verifier_reads():
    for share in (0.5, 0.8):
        rng = random.Random(3)
        answers = [assets._answer_example(rng, share)[1] for _ in range(4000)]
        boxed = sum(arithmetic.answer_from_response(a) is not None for a in answers) / len(answers)
        assert abs(boxed - share) < 0.03
        assert all(a.startswith("\\boxed{") or a.lstrip("-").isdigit() for a in answers)


def test_full_share_draws_exactly_what_the_tiny_build_always_drew():
    a, b = random.Random(7), random.Random(7)
    for _ in range(200):
        messages, answer = assets._answer_example(a, 1.0)
        text, ans = arithmetic.make_problem(b, b.choice(arithmetic.LEVELS))
        assert messages[0]["content"] == text and answer == arithmetic.format_response(ans)


def test_cli_profile_choice_is_checked(capsys):
    import pytest

    with pytest.raises(SystemExit):
        assets.main(["--profile", "huge"])
    assert "invalid choice" in capsys.readouterr().err


def test_a_folder_holding_another_profile_is_not_overwritten(tmp_path, capsys):
    import json

    import pytest

    out = tmp_path / "tiny"
    out.mkdir()
    manifest = {"digest": assets.PROFILES["tiny"].digest()}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(assets.AssetProfileMismatch, match=r"holds the 'tiny' asset build.*ASSETS_PROFILE=tiny"):
        assets.build_assets(out, assets.PROFILES["learn"])
    assert assets.main(["--profile", "learn", "--out", str(out)]) == 2
    assert "holds the 'tiny' asset build" in capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text()) == manifest  # untouched
    assert assets.build_assets(out, assets.PROFILES["tiny"]) == out.resolve()  # the matching profile is reused
