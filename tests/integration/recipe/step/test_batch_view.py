"""The step's view (``recipe/heapa/step/batch_view.py``): one TransferQueue read, the key rule and the row kinds."""

from __future__ import annotations

import pytest

import recipe.heapa.step.batch_view as step_batch_mod
from recipe.heapa.step.batch_view import REUSED_TAG, StepBatch, Trajectory, parse_key
from verl_ext.adapters.feedback import PASS_THRESHOLD


class FakeTQ:
    def __init__(self, rows):
        self.rows, self.calls = rows, []

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        self.calls.append((tuple(keys), tuple(select_fields)))
        return {f: [self.rows[k][f] for k in keys] for f in select_fields}


def _row(record, acc):
    info = {"acc": acc, "timeout": False} if acc is not None else {}
    return {"index": record, "extra_fields": {"reward_extra_info": info}}


@pytest.fixture
def fake(monkeypatch):
    rows = {"u_0_0": _row(3, 1.0), "u_1_0": _row(3, 0.0), "u_1_1": _row(3, 0.0), "v_0_0": _row(9, 0.0),
            "v_1_0": _row(9, None), "pad_0_0": _row(3, 1.0)}
    tq = FakeTQ(rows)
    monkeypatch.setattr(step_batch_mod, "tq", tq)
    return tq


def test_one_read_of_the_real_rows_and_groups_of_final_outputs(fake):
    keys = ["u_0_0", "u_1_0", "u_1_1", "v_0_0", "pad_0_0", "bareuid"]
    tags = [{}, {}, {}, {}, {"is_padding": True}, {}]
    view = StepBatch.read(keys, tags, "train")
    assert len(fake.calls) == 1 and fake.calls[0][0] == ("u_0_0", "u_1_0", "u_1_1", "v_0_0")
    groups = view.groups()
    assert [t.key for t in groups["u"]] == ["u_0_0", "u_1_1"]  # session 1's last output carries its reward
    assert view.outputs_per_session()[("u", 1)] == 2
    assert view.outcomes(PASS_THRESHOLD) == {3: (1, 3), 9: (0, 1)}  # every generated output, by record id
    assert view.reward_infos()[0] == {"acc": 1.0, "timeout": False}


def test_reused_rows_are_trained_not_fed_back_and_dropped_rows_are_fed_back(fake):
    view = StepBatch.read(["u_0_0", "u_1_0"], [{}, {}], "train")
    view.add([Trajectory("u_2_0", "u", 2, 0, 3, 1.0, {REUSED_TAG: True})])
    view.drop(["u_1_0"])
    assert [t.key for t in view.groups()["u"]] == ["u_0_0", "u_2_0"]
    assert view.outcomes(PASS_THRESHOLD) == {3: (1, 2)}


def test_a_row_without_acc_is_an_error_naming_the_field(fake):
    view = StepBatch.read(["v_0_0", "v_1_0"], [{}, {}], "train", acc_field="acc")
    with pytest.raises(KeyError, match=r"1 of 2 trajectories have no reward_extra_info\['acc'\]"):
        view.outcomes(PASS_THRESHOLD)


def test_key_rule():
    assert parse_key("a_b_3_12") == ("a_b", 3, 12) and parse_key("abc") is None and parse_key("a_x_1") is None


def test_one_step_context_owns_both_routes_and_the_next_step_starts_afresh(fake):
    from types import SimpleNamespace

    from recipe.heapa.step.context import StepContext
    from recipe.heapa.step.in_flight import InFlight
    from recipe.heapa.step.outcomes import StepOutcomes
    from recipe.heapa.step.replay_buffer import Eviction
    from recipe.heapa.trainer import HeapaTrainer

    fed = []

    class Sampler:
        def on_feedback(self, outcomes, step, selected_at=None):
            fed.append((step, dict(outcomes)))
            return SimpleNamespace(pass_rates={k: p / n for k, (p, n) in outcomes.items()},
                                   metrics=lambda: {"feedback/n_records": float(len(outcomes))})

    trainer = SimpleNamespace(ctx=None, in_flight=InFlight(), trainer_mode="sync")
    evict = Eviction({5: (0, 4)}, [{"acc": 0.0, "timeout": True}], (4, 40))  # DAPO evicted an all-wrong group
    with pytest.raises(RuntimeError, match="outside a step"):
        HeapaTrainer._on_eviction(trainer, evict)
    ctx = trainer.ctx = StepContext(7, StepOutcomes(Sampler(), 7))
    HeapaTrainer._on_eviction(trainer, evict)
    with pytest.raises(RuntimeError, match="never saw the sampled batch"):
        ctx.take_view()
    ctx.view = StepBatch.read(["u_0_0", "u_1_0"], [{}, {}], "train")
    ctx.outcomes.trained(ctx.take_view(), threshold=0.5)
    assert fed == [(7, {5: (0, 4)}), (7, {3: (1, 2)})] and ctx.discarded == [4, 40]
    assert ctx.outcomes.pass_rates() == {5: 0.0, 3: 0.5} and ctx.outcomes.records() == [3, 5]
    metrics = ctx.outcomes.metrics()
    assert metrics["feedback/evicted_groups_fed_back"] == 1.0 and metrics["feedback/n_records"] == 1.0
    assert metrics["reward/timeouts"] == 1.0
    ctx.close()
    with pytest.raises(RuntimeError, match="closed twice"):
        ctx.close()
    nxt = StepContext(8, StepOutcomes(Sampler(), 8))  # nothing carried over by hand
    assert nxt.outcomes.records() == [] and nxt.discarded == [0, 0] and nxt.view is None


def test_an_asynchronous_eviction_without_a_reward_releases_its_record():
    """In ``colocate_async`` no step end releases what was handed out: a failed group (no reward, nothing to feed
    back) must give its record back when it is evicted, a stale group with a reward is fed back instead."""
    from types import SimpleNamespace

    from recipe.heapa.step.context import StepContext
    from recipe.heapa.step.in_flight import InFlight
    from recipe.heapa.step.outcomes import StepOutcomes
    from recipe.heapa.step.replay_buffer import Eviction
    from recipe.heapa.trainer import HeapaColocateAsyncTrainer

    released, fed, selected = [], [], []

    class Sampler:
        def on_feedback(self, outcomes, step, selected_at=None):
            fed.append(dict(outcomes))
            selected.append(selected_at)
            return SimpleNamespace(pass_rates={}, metrics=dict)

        def release_unused(self, ids):
            released.extend(ids)

    in_flight = InFlight()
    in_flight.handed_out(["failed", "stale", "running"], [3, 4, 5], step=1)
    trainer = SimpleNamespace(ctx=None, in_flight=in_flight, trainer_mode="colocate_async", batch_sampler=Sampler())
    trainer.ctx = StepContext(4, StepOutcomes(trainer.batch_sampler, 4))
    HeapaColocateAsyncTrainer._on_eviction(trainer, Eviction({}, [], (4, 0), ("failed",)))
    HeapaColocateAsyncTrainer._on_eviction(trainer, Eviction({4: (1, 4)}, [{"acc": 1.0}], (4, 30), ("stale",)))
    assert released == [3] and fed == [{4: (1, 4)}] and len(in_flight) == 1
    assert selected == [{4: 1}]  # the pool hears which step's policy measured record 4
    assert in_flight.metrics()["feedback/delay_max"] == 3.0


def test_stable_order_sorts_by_record_session_output(fake):
    keys = ["v_0_0", "u_1_1", "u_0_0", "bareuid", "u_1_0"]
    view = StepBatch.read(keys, [{}] * len(keys), "train")
    assert [keys[i] for i in view.stable_order(keys)] == ["u_0_0", "u_1_0", "u_1_1", "v_0_0", "bareuid"]
