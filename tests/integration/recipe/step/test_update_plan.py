"""AR3PO's actor update matches GRPO's optimisation on the rows it generated (``recipe/heapa/step/update_plan.py``).

The worker side is verl 0.9.1's own arithmetic: ``make_iterator`` cuts the update's mini-batches from the
``mini_batch_size`` the trainer passes, ``prepare_micro_batches`` cuts micro-batches, and each micro-batch's loss is
``agg_loss`` with the ``global_batch_size`` the trainer passes and the mini-batch's token count (as
``FSDPEngine.forward_backward_batch`` computes it). The model is a tiny softmax policy over the vocabulary; each
row's loss is the policy-gradient surrogate ``-A * log p(token)``, so a mini-batch's gradient is exactly what the
loss aggregation makes of its rows.

GRPO's rule, for even groups (where verl's stock arithmetic pads nothing): ``train_batch_size /
ppo_mini_batch_size`` optimizer updates, each gradient the mean over its rows (sequence-mean modes) or its tokens
(``token-mean``). The tests build uneven AR3PO-like groups and check that the planned update runs that many
updates with that gradient, where verl's stock arithmetic runs fewer, padding-diluted ones.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from omegaconf import OmegaConf

from recipe.heapa.step.actor_updates import ActorWorkers
from recipe.heapa.step.update_plan import Batching, actor_overrides, plan_update, spread_padding
from verl.trainer.ppo.core_algos import agg_loss
from verl.utils import tensordict_utils as tu
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.engine.utils import prepare_micro_batches

VOCAB = 11
MODES = {"ar3po_grpo": "seq-mean-token-mean", "ar3po_dapo": "token-mean"}


def _rows(group_sizes: list[int], seed: int) -> list[dict]:
    """Real rows: random responses, GRPO advantages per group (0/1 rewards), as verl writes them."""
    rng = random.Random(seed)
    rows = []
    for g, size in enumerate(group_sizes):
        rewards = [float(rng.random() < 0.4) for _ in range(size)]
        mean = sum(rewards) / size
        std = (sum((r - mean) ** 2 for r in rewards) / max(size - 1, 1)) ** 0.5 if size > 1 else 1.0
        for r in rewards:
            length = rng.randint(2, 9)
            adv = (r - mean) / (std + 1e-6)
            rows.append({"tokens": torch.tensor([rng.randrange(VOCAB) for _ in range(length)]),
                         "adv": torch.full((length,), adv), "mask": torch.ones(length, dtype=torch.int64),
                         "pad": False, "group": g})
    return rows


def _padding(n: int) -> list[dict]:
    """verl's padding rows: one response token, zero loss mask (``construct_minimal_padding_template``)."""
    return [{"tokens": torch.tensor([0]), "adv": torch.zeros(1), "mask": torch.zeros(1, dtype=torch.int64),
             "pad": True, "group": -1} for _ in range(n)]


def _as_td(rows: list[dict]):
    td = list_of_dict_to_tensordict([{"tokens": r["tokens"], "adv": r["adv"], "loss_mask": r["mask"]} for r in rows])
    return td


def _surrogate(theta: torch.Tensor, td) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded (rows, length) loss matrix ``-A log p(token)`` and mask of a (micro-)batch."""
    tokens = torch.nested.to_padded_tensor(td["tokens"], 0)
    adv = torch.nested.to_padded_tensor(td["adv"], 0.0)
    mask = torch.nested.to_padded_tensor(td["loss_mask"], 0)
    logp = torch.log_softmax(theta, -1)[tokens]
    return -adv * logp, mask


def _worker_update(rows: list[dict], mini_batch_size: int, global_batch_size, mode: str, micro: int):
    """verl's ``train_mini_batch`` on one rank (dp = 1), without stepping: the gradient of each update."""
    td = _as_td(rows)
    grads = []
    for mini in tu.make_iterator(td, mini_batch_size=mini_batch_size, epochs=1, seed=42):
        theta = torch.zeros(VOCAB, requires_grad=True)
        tokens = int(mini["loss_mask"].values().sum())  # FSDPEngine: the mini-batch's tokens (all-reduced)
        tu.assign_non_tensor(mini, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro)
        micro_batches, _ = prepare_micro_batches(mini)
        for mb in micro_batches:
            loss_mat, mask = _surrogate(theta, mb)
            agg_loss(loss_mat, mask, mode, dp_size=1, batch_num_tokens=tokens,
                     global_batch_size=global_batch_size).backward()
        grads.append(theta.grad.clone())
    return grads


def _grpo_rule(rows: list[dict], mode: str) -> torch.Tensor:
    """GRPO's gradient of one update over ``rows``: the mean over rows of each row's token-mean loss, or the mean
    over all tokens."""
    real = [r for r in rows if not r["pad"]]
    theta = torch.zeros(VOCAB, requires_grad=True)
    loss_mat, mask = _surrogate(theta, _as_td(real))
    if mode == "token-mean":
        loss = (loss_mat * mask).sum() / mask.sum()
    else:
        loss = ((loss_mat * mask).sum(-1) / mask.sum(-1)).mean()
    loss.backward()
    return theta.grad


def _ordered(rows: list[dict], plan) -> list[dict]:
    padded = rows + _padding(plan.padded_rows - len(rows))
    return [padded[i] for i in spread_padding([r["pad"] for r in padded], 1, plan.updates)]


@pytest.mark.parametrize("method", sorted(MODES))
@pytest.mark.parametrize("seed", range(4))
def test_planned_update_matches_grpo_update_count_and_gradient(method, seed):
    mode = MODES[method]
    rng = random.Random(seed)
    prompts, mini_prompts, n, micro = 16, 4, 8, 4  # GRPO: 16 prompts x 8 rows, 4 updates of 32 rows
    sizes = [rng.choice([2, 2, 4, 6, 8]) for _ in range(prompts)]  # AR3PO: stages of 2 up to n
    rows = _rows(sizes, seed)
    batching = Batching(dp=1, mini_batch_prompts=mini_prompts, actor_micro=micro)
    plan = plan_update(len(rows), prompts, batching)
    grpo_updates = prompts // mini_prompts
    assert plan.updates == grpo_updates
    ordered = _ordered(rows, plan)
    grads = _worker_update(ordered, plan.mini_batch_rows, plan.global_batch_size, mode, micro)
    assert len(grads) == grpo_updates
    per_update = plan.mini_batch_rows
    for u, grad in enumerate(grads):
        chunk = ordered[u * per_update:(u + 1) * per_update]
        real = sum(not r["pad"] for r in chunk)
        assert abs(real - len(rows) / plan.updates) <= 1  # padding spread evenly
        expected = _grpo_rule(chunk, mode)
        if mode != "token-mean":  # the divisor is the mean real rows per update; each update holds floor/ceil
            expected = expected * real / plan.global_batch_size
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-7)
    # verl's stock arithmetic on the same rows: fewer updates, and padding dilutes the sequence-mean loss
    stock_rows = mini_prompts * n
    stock_padded = rows + _padding(math.ceil(len(rows) / stock_rows) * stock_rows - len(rows))
    stock = _worker_update(stock_padded, stock_rows, stock_rows, mode, micro)
    assert len(stock) < grpo_updates
    if mode != "token-mean":
        first = stock_padded[:stock_rows]
        ratio = stock[0].norm() / _grpo_rule(first, mode).norm()
        real = sum(not r["pad"] for r in first)
        assert ratio == pytest.approx(real / stock_rows, rel=1e-4)


def test_even_groups_reproduce_verls_own_arithmetic():
    """Full groups (plain GRPO rows): the plan is verl's, padding nothing."""
    for dp, micro in ((1, 8), (2, 4), (4, None)):
        batching = Batching(dp=dp, mini_batch_prompts=8, actor_micro=micro, log_prob_micros=(8,) if micro else ())
        plan = plan_update(32 * 16, 32, batching)
        assert plan.padded_rows == 32 * 16 and plan.updates == 4
        assert plan.extra_info() == {"mini_batch_size": 8 * 16, "global_batch_size": 8 * 16}


def test_padding_only_to_what_batching_needs():
    cfg = OmegaConf.create({"actor_rollout_ref": {
        "actor": {"ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 32, "use_dynamic_bsz": False},
        "rollout": {"log_prob_micro_batch_size_per_gpu": 32, "log_prob_use_dynamic_bsz": False},
        "ref": {"log_prob_micro_batch_size_per_gpu": 32, "log_prob_use_dynamic_bsz": False}}})
    plan = plan_update(48, 16, Batching.from_config(cfg, dp=1))  # the CPU default's AR3PO step
    assert (plan.updates, plan.padded_rows, plan.global_batch_size) == (1, 64, 48)  # verl: 128 rows, divisor 128
    cfg.actor_rollout_ref.actor.use_dynamic_bsz = True
    cfg.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz = True
    cfg.actor_rollout_ref.ref.log_prob_use_dynamic_bsz = True
    plan = plan_update(2903, 512, Batching.from_config(cfg, dp=8))  # a GPU step: 512 prompts, ~5.7 rows each
    assert plan.updates == 32 and plan.multiple == 8 * 32 and plan.padded_rows - 2903 < 256
    assert plan.global_batch_size == pytest.approx(2903 / 32)


def test_the_actor_workers_apply_the_overrides_and_count_optimizer_steps():
    class Workers:
        label = "actor"
        workers = ["ray actor 0"]  # verl reads the group's own `workers` through the wrapper

        def __init__(self):
            self.seen = None

        def update_actor(self, batch):
            self.seen = dict(batch.extra_info)
            return {"metrics": {"grad_norm": [0.5, 0.25, 0.125]}}

    class Meta:
        extra_info = {"mini_batch_size": 128, "global_batch_size": 128, "epochs": 1}

    workers = Workers()
    actor = ActorWorkers(workers)
    with actor.applying({"mini_batch_size": 64, "global_batch_size": 48}) as report:
        actor.update_actor(Meta())
    assert workers.seen == {"mini_batch_size": 64, "global_batch_size": 48, "epochs": 1}
    assert actor.label == "actor" and actor.workers == ["ray actor 0"]  # everything else is the worker group's
    assert report.metrics() == {"update/optimizer_steps": 3.0, "update/grad_norm_first": 0.5}
    meta = Meta()
    meta.extra_info = {"mini_batch_size": 128, "global_batch_size": 128}
    actor.update_actor(meta)  # outside `applying`: verl's values, nothing reported
    assert workers.seen == {"mini_batch_size": 128, "global_batch_size": 128}


def test_the_actor_overrides_follow_the_plan_and_the_signal_rows():
    plan = plan_update(48, 16, Batching(dp=1, mini_batch_prompts=4, actor_micro=None))
    assert actor_overrides(None, 128, 40, "all_rows", 64) == {}
    assert actor_overrides(plan, 128, 40, "all_rows", 64) == plan.extra_info()
    assert actor_overrides(None, 128, 40, "signal_rows", 64) == {"global_batch_size": 20.0}  # 40 rows over 2 updates
    assert actor_overrides(plan, 128, 0, "signal_rows", 64)["global_batch_size"] == 1 / plan.updates


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="rows and groups"):
        plan_update(0, 0, Batching(dp=1, mini_batch_prompts=4, actor_micro=None))
    with pytest.raises(ValueError, match="do not split"):
        spread_padding([False] * 10, 2, 3)


def test_the_gpu_launchers_batching_is_read_as_dynamic():
    """The GPU launcher sets the actor's dynamic batch sizes; verl's log-prob passes inherit them, so the plan pads
    only to dp x updates."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    config_dir = str(Path(__file__).resolve().parents[4] / "recipe" / "heapa" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=[
            "method=ar3po_grpo", "platform=gpu", "data.train_batch_size=512",
            "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.actor.use_dynamic_bsz=True"])
    batching = Batching.from_config(cfg, dp=8)
    assert batching.actor_micro is None and batching.log_prob_micros == () and batching.mini_batch_prompts == 32
    assert plan_update(2903, 512, batching).multiple == 8 * 16
