"""Asset profiles: the cache key, the learn build differs where it says it does, the build runs pinned."""

from __future__ import annotations

import random

from verl_ext.cpu import assets
from verl_ext.tasks import arithmetic


def test_the_cache_key_changes_with_the_asset_version():
    # 6c0255d4318a16b2: version 3, built with whichever kernels the building CPU had; such a cache is rebuilt
    assert assets.PROFILES["tiny"].digest() == assets.AssetConfig().digest() == "38a1862c24988316"
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


def test_an_unpinned_caller_builds_in_a_pinned_child(tmp_path, monkeypatch):
    from verl_ext.cpu.numerics import PINNED_ENV

    calls = []
    monkeypatch.setattr(assets.subprocess, "run", lambda cmd, env, check: calls.append((cmd, env)))
    for key in (*PINNED_ENV, "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(key, raising=False)
    assets.build_assets(tmp_path / "a", assets.PROFILES["tiny"])
    [(cmd, env)] = calls
    assert cmd[-2] == str((tmp_path / "a").resolve()) and all(env[k] == v for k, v in PINNED_ENV.items())
    assert env["GOMP_SPINCOUNT"] == "1000"  # short OpenMP spins: a busy second core does not stall the build
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assets.build_assets(tmp_path / "c", assets.PROFILES["tiny"])
    assert "GOMP_SPINCOUNT" not in calls[-1][1]  # the caller's own choice of how OpenMP waits stands
    calls.pop()
    built = []
    monkeypatch.setattr(assets, "_build", lambda out, cfg: built.append(cfg) or out)
    for key, value in PINNED_ENV.items():
        monkeypatch.setenv(key, value)
    assets.build_assets(tmp_path / "b", assets.PROFILES["learn"])  # already pinned: no child
    assert built == [assets.PROFILES["learn"]] and len(calls) == 1
