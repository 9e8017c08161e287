"""HeaPA on verl's colocated asynchronous trainer (``trainer.v1.trainer_mode=colocate_async``) on the CPU backend.

verl prefetches one warm-up batch before the first step and adds a batch at every step, so the rollout generates
the next batch while the actor trains and a group trains one step after its selection (or later). The pool must
hand out no record that is still in flight, feed every group back exactly once, by record id, from whichever step
hears it, and keep the groups in flight across a checkpoint (verl re-issues them under their uids on resume).

Run A: ``heapa_dapo`` (boundary selection, augmentation with the programmatic teacher, DAPO's filter: verl's
asynchronous buffer evicts all-equal groups and refills them while other groups generate), 4 steps on 64 seeds,
checkpoints at 2 and 4. Run B resumes A's ``global_step_2`` and trains steps 3-4. Read from the trace (each step's
groups out and back, in order) and the metrics (``feedback/*``, verl's ``training/off_policy/*``). DAPO's path is
GRPO's plus evictions and refills, so one method covers both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 4
ASYNC = ["trainer.v1.trainer_mode=colocate_async"]


def replay(trace: dict[int, dict], in_flight: set[int] | None = None) -> set[int]:
    """Walk every step's ``flow`` (groups out [record, 1] and back [record, -1], in order); returns the records still
    in flight at the end. Fails on a record handed out while in flight, heard back without being in flight, or fed
    back to the pool without being heard (or heard without being fed back)."""
    in_flight = set(in_flight or ())
    for step in sorted(trace):
        heard = set()
        for rid, direction in trace[step]["flow"]:
            if direction > 0:
                assert rid not in in_flight, f"step {step}: record {rid} handed out while still in flight"
                in_flight.add(rid)
            else:
                assert rid in in_flight, f"step {step}: record {rid} heard back without being in flight"
                in_flight.remove(rid)
                heard.add(rid)
        assert heard == set(trace[step]["trained"]), (step, sorted(heard), trace[step]["trained"])
    return in_flight


def handed_out(row: dict) -> list[int]:
    return [rid for rid, direction in row["flow"] if direction > 0]


def state(ckpt: Path) -> dict:
    return json.loads((ckpt / "heapa_state.json").read_text())


@pytest.fixture(scope="module")
def runs(tiny_assets, repo_root, e2e_runner, tmp_path_factory):
    base = tmp_path_factory.mktemp("async")
    a = e2e_runner.run_recipe(repo_root, base / "a", e2e_runner.recipe_overrides(
        tiny_assets, base / "a", "heapa_dapo", steps=STEPS, seeds=64) + ASYNC)
    resume_copy = base / "b_ckpt" / "global_step_2"
    shutil.copytree(base / "a" / "ckpt" / "global_step_2", resume_copy)
    b = e2e_runner.run_recipe(repo_root, base / "b", e2e_runner.recipe_overrides(
        tiny_assets, base / "b", "heapa_dapo", steps=STEPS, seeds=64, resume_from=resume_copy) + ASYNC)
    return {"a": a, "b": b, "base": base}


def test_groups_train_after_their_selection_and_each_is_heard_once(runs):
    metrics, trace = runs["a"]
    assert sorted(metrics) == sorted(trace) == list(range(1, STEPS + 1))
    left = replay(trace)
    # the warm-up batch and step 1's own (and refills): 16 or more records out before step 1 trains
    assert len(handed_out(trace[1])) >= 16, trace[1]
    assert sum(metrics[s]["feedback/evicted_groups_fed_back"] for s in trace) > 0, "DAPO's filter evicted nothing"
    for step in range(1, STEPS + 1):
        m = metrics[step]
        assert m["feedback/in_flight_groups"] >= 8, (step, m["feedback/in_flight_groups"])  # the next batch
        assert any(k.startswith("training/off_policy/trajectory_staleness") for k in m), sorted(m)[:20]
    # step 1 trains groups selected for step 1 itself (the warm-up batch); later steps the batch added a step earlier
    assert metrics[1]["feedback/delay_max"] == 0
    assert all(metrics[s]["feedback/delay_max"] >= 1 for s in range(2, STEPS + 1)), \
        [metrics[s]["feedback/delay_max"] for s in range(1, STEPS + 1)]
    assert len(left) == metrics[STEPS]["feedback/in_flight_groups"]
    # the pool agrees: exactly the records the trace leaves in flight are in flight in the final checkpoint
    final = state(runs["base"] / "a" / "ckpt" / f"global_step_{STEPS}")
    assert sorted(rid for _, rid, _ in final["in_flight"]["groups"]) == sorted(left)


def test_resume_trains_the_groups_that_were_in_flight_at_the_checkpoint(runs):
    (_, trace_a), (metrics_b, trace_b) = runs["a"], runs["b"]
    assert sorted(metrics_b) == list(range(3, STEPS + 1))
    at_save = replay({s: trace_a[s] for s in (1, 2)})
    saved = state(runs["base"] / "b_ckpt" / "global_step_2")
    assert sorted(rid for _, rid, _ in saved["in_flight"]["groups"]) == sorted(at_save)
    # the restored pool and sampler select step 3's batch as the uninterrupted run did (its first 8 hand-outs, before
    # any rollout of the step; DAPO's refills after them depend on which groups finish first)
    assert handed_out(trace_b[3])[:8] == handed_out(trace_a[3])[:8]
    # verl re-issues those groups; the resumed run hears each of them once and hands none of them out again
    replay(trace_b, in_flight=at_save)
    assert at_save <= set(trace_b[3]["trained"]) | set(trace_b[4]["trained"])
