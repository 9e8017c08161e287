"""Two runs of the same command are the same run: the basis for pinning a trace before and after a refactor.

``heapa_grpo`` (selection, feedback, augmentation with the programmatic teacher, lineage) runs 3 steps twice with
the hf rollout's deterministic mode (``+actor_rollout_ref.rollout.engine_kwargs.hf.deterministic=true``: one
request per generate, each seeded by the prompt, the weights' step and its n-th request, so batching and arrival
order do not change what is sampled; repeated prompts dropped). Both runs must select the same records, integrate the same children and
report the same pass rates and pool statistics at every step. To compare two commits, run this command on each and
diff the trace files (``heapa.trace_file``) and ``metrics.jsonl``.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXACT = ("feedback/n_records", "feedback/n_rollouts", "feedback/mean_pass_rate", "feedback/frac_all_correct",
         "feedback/frac_all_wrong", "pool/size_scored", "pool/size_cold", "pool/size_archive", "select/frac_cold",
         "select/frac_children", "rollout/gen_responses", "rollout/gen_tokens", "augment/inserted")


def test_the_same_command_gives_the_same_run(tiny_assets, repo_root, e2e_runner, tmp_path):
    runs = {}
    for name in ("a", "b"):
        out = tmp_path / name
        overrides = e2e_runner.recipe_overrides(tiny_assets, out, "heapa_grpo", steps=3, save_freq=100)
        # identical prompts of two records share one sample stream (which record gets which sample follows
        # arrival order), so the repeated seeds of the tiny task are dropped
        overrides += ["+actor_rollout_ref.rollout.engine_kwargs.hf.deterministic=true", "heapa.rows.duplicates=drop"]
        runs[name] = e2e_runner.run_recipe(repo_root, out, overrides)
    (ma, ta), (mb, tb) = runs["a"], runs["b"]
    assert sorted(ta) == sorted(tb) == [1, 2, 3]
    for step in (1, 2, 3):
        assert ta[step]["trained"] == tb[step]["trained"], step
        assert ta[step]["children"] == tb[step]["children"], step
        for key in EXACT:
            assert ma[step].get(key) == mb[step].get(key), (step, key, ma[step].get(key), mb[step].get(key))
        assert ma[step]["actor/grad_norm"] == pytest.approx(mb[step]["actor/grad_norm"], rel=1e-4)
