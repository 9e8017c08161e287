"""PoolDataset + PoolBatchSampler inside a real torchdata ``StatefulDataLoader`` with verl's ``collate_fn``.

Checks the row format against verl's own ``RLHFDataset``, verl's ``create_rl_dataset`` path, batching and DAPO's
one-prompt fetches, and that a checkpoint taken mid-run (``loader.state_dict()`` -> torch.save/load -> a new
dataset, sampler and loader) yields exactly the batches of the uninterrupted run. No Ray.
"""

from __future__ import annotations

import io
import uuid

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_ext.adapters.dataset import PoolDataset
from verl_ext.adapters.feedback import group_outcomes
from verl_ext.adapters.sampler import PoolBatchSampler, PoolExhaustedError, make_train_dataloader
from verl_ext.pool import PoolConfig, QueryPool

VERL_ROW_KEYS = {"data_source", "prompt", "ability", "reward_model", "extra_info", "raw_prompt", "dummy_tensor",
                 "index", "tools_kwargs", "interaction_kwargs"}


def _data_config(tmp_path, **extra):
    return OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "filter_overlong_prompts": False,
                             "max_prompt_length": 64, **extra})


def _outcomes(batch: dict, n: int = 4) -> dict[int, tuple[int, int]]:
    """Fake rollouts: n per prompt, a deterministic pass pattern per record id, grouped like the trainer does."""
    ids = [int(i) for i in batch["index"]]
    index = [rid for rid in ids for _ in range(n)]
    acc = [float((rid * 7 + j) % 5 < rid % 5) for rid in ids for j in range(n)]
    return group_outcomes(index, acc)


def _run(loader, sampler, it, steps: int, chunks_per_step: int, first_step: int):
    """``steps`` trainer steps: fetch a step's chunks, feed back; returns the ids per step and the iterator."""
    seen = []
    for step in range(first_step, first_step + steps):
        sampler.set_step(step)
        ids = []
        for _ in range(chunks_per_step):
            batch = next(it)
            ids += batch["index"].tolist()
            sampler.on_feedback(_outcomes(batch), step)
        seen.append(ids)
    return seen


# ------------------------------------------------------------------------------------------------ row format
def test_rows_equal_rlhf_dataset_rows(train_parquet, tiny_tokenizer, tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = _data_config(tmp_path)
    ref = RLHFDataset(str(train_parquet), tiny_tokenizer, config)
    ours = PoolDataset(str(train_parquet), tiny_tokenizer, None, config)
    assert len(ours) == len(ref) == 40
    for i in (0, 17, 39):
        a, b = ref[i], ours[i]  # a fresh pool gives row i the id i, and the file's extra_info.index is i
        assert set(a) == set(b) == VERL_ROW_KEYS
        assert torch.equal(a.pop("dummy_tensor"), b.pop("dummy_tensor"))
        assert a == b


def test_custom_cls_through_create_rl_dataset(train_parquet, tiny_tokenizer, tmp_path):
    from verl.trainer.ppo.utils import create_rl_dataset

    config = _data_config(tmp_path, custom_cls={"path": "pkg://verl_ext.adapters.dataset", "name": "PoolDataset"},
                          heapa={"pool": {"max_pool_size": 64, "estimator": "ema", "estimator_params": {"alpha": 0.5}},
                                 "seed": 3})
    ds = create_rl_dataset([str(train_parquet)], config, tiny_tokenizer, None, is_train=True, max_samples=25)
    assert isinstance(ds, PoolDataset) and len(ds) == 25
    assert ds.pool.config.max_pool_size == 64 and ds.pool.estimator.name == "ema" and ds.pool.seed == 3


def test_overlong_prompts_are_dropped(make_rows, write_parquet, tiny_tokenizer, tmp_path):
    rows = make_rows(5)
    rows[2]["prompt"][0]["content"] = "What is " + " + ".join(["1"] * 200) + "?"
    ds = PoolDataset(str(write_parquet(rows)), tiny_tokenizer, None,
                     _data_config(tmp_path, filter_overlong_prompts=True, max_prompt_length=40))
    assert len(ds) == 4 and ds.num_filtered == 1
    assert [ds[i]["extra_info"]["split"] for i in range(4)] == ["train"] * 4
    assert ds.fits(rows[0]["prompt"]) and not ds.fits(rows[2]["prompt"])


def test_empty_train_file_fails_at_construction_naming_it(tmp_path):
    empty = tmp_path / "train.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=r"data\.train_files .*train\.jsonl.*: no rows"):
        PoolDataset(str(empty), None, None, _data_config(tmp_path))


def test_more_seeds_than_the_pool_holds_names_the_key_and_file(train_parquet, tmp_path):
    config = _data_config(tmp_path, heapa={"pool": {"max_pool_size": 30}})
    with pytest.raises(ValueError, match=r"heapa\.pool\.max_pool_size=30 is smaller than the 40 seed rows of "
                                         r"data\.train_files \[.*train\.parquet"):
        PoolDataset(str(train_parquet), None, None, config)
    assert len(PoolDataset(str(train_parquet), None, None, config, max_samples=30)) == 30  # the cap fits


def test_all_prompts_overlong_is_an_error(make_rows, write_parquet, tiny_tokenizer, tmp_path):
    config = _data_config(tmp_path, filter_overlong_prompts=True, max_prompt_length=2)
    with pytest.raises(ValueError, match=r"longer than data\.max_prompt_length=2"):
        PoolDataset(str(write_parquet(make_rows(3))), tiny_tokenizer, None, config)


# ------------------------------------------------------------------------------------------------ batches
def test_loader_batches_carry_record_ids(train_parquet, tmp_path):
    from verl.utils import tensordict_utils as tu

    ds = PoolDataset(str(train_parquet), None, None, _data_config(tmp_path))
    sampler = PoolBatchSampler(ds, "boundary", train_batch_size=8, gen_batch_size=4)
    loader = make_train_dataloader(ds, sampler)
    batch = next(iter(loader))
    assert set(batch) == VERL_ROW_KEYS
    assert batch["dummy_tensor"].shape == (4, 1)
    ids = batch["index"].tolist()
    assert ids == [e["index"] for e in batch["extra_info"]] == sampler.outstanding_ids == [0, 1, 2, 3]
    assert [gt["ground_truth"] for gt in batch["reward_model"]] == [ds.pool.get(i).answer for i in ids]
    assert all(ds.pool.status(i) == "in_flight" for i in ids + sampler.buffered_ids)
    # what verl's _fetch_one_gen_batch does with it
    batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch["raw_prompt"]))], dtype=object)
    assert len(tu.get_tensordict(batch)) == 4


def test_dapo_one_prompt_fetches_hand_out_one_selection(train_parquet, tmp_path):
    ds = PoolDataset(str(train_parquet), None, None, _data_config(tmp_path))
    sampler = PoolBatchSampler(ds, "boundary", train_batch_size=4, gen_batch_size=1)
    it = iter(make_train_dataloader(ds, sampler))
    got = [next(it)["index"].tolist() for _ in range(4)]
    assert got == [[0], [1], [2], [3]] and sampler.metrics()["select/selections"] == 1.0
    extra = [next(it)["index"].tolist() for _ in range(2)]  # DAPO refill: a second selection starts
    assert sampler.metrics()["select/selections"] == 2.0 and sampler.buffered_ids == [6, 7]
    sampler.on_feedback({0: (1, 2), 1: (0, 2), 2: (2, 2), 3: (1, 2)}, 0)
    released = sampler.release_unused(include_buffer=True)  # refill prompts never trained go back unchanged
    assert released == [4, 5, 6, 7] and sampler.outstanding_ids == [] and sampler.buffered_ids == []
    assert {ds.pool.status(i) for i in released} == {"cold"} and extra == [[4], [5]]
    assert next(it)["index"].tolist() == [4]  # released cold records are served first again, in order


def test_feedback_and_release_checks(train_parquet, tmp_path):
    ds = PoolDataset(str(train_parquet), None, None, _data_config(tmp_path))
    sampler = PoolBatchSampler(ds, "uniform", train_batch_size=4, gen_batch_size=2, strategy_kwargs={"seed": 1})
    it = iter(make_train_dataloader(ds, sampler))
    handed = next(it)["index"].tolist()
    queued = sampler.buffered_ids
    with pytest.raises(ValueError, match="never handed out"):
        sampler.on_feedback({queued[0]: (1, 1)}, 0)
    with pytest.raises(ValueError, match="not handed out by this sampler"):
        sampler.release_unused([queued[0]])
    summary = sampler.on_feedback({np.int64(handed[0]): (1, 2), str(handed[1]): (0, 2)}, 0)
    assert summary.n_records == 2 and ds.pool.status(handed[0]) == "archived"
    assert len(ds) == 40  # archived records still count


def test_pool_exhaustion_and_reinsertion(make_rows, write_parquet, tmp_path):
    path = str(write_parquet(make_rows(6)))
    for trigger, expect_error in (("never", True), ("below_batch", False)):
        pool_cfg = {"reinsertion": {"trigger": trigger}}
        ds = PoolDataset(path, None, None, _data_config(tmp_path, heapa={"pool": pool_cfg}))
        sampler = PoolBatchSampler(ds, "boundary", train_batch_size=4, gen_batch_size=4)
        it = iter(make_train_dataloader(ds, sampler))
        sampler.on_feedback(_outcomes(next(it)), 0)
        sampler.set_step(1)
        if expect_error:
            with pytest.raises(PoolExhaustedError, match="step 1: the pool has no record"):
                next(it)
            assert len(sampler.buffered_ids) == 2  # the short selection is kept, not lost in flight
            assert len(sampler.release_unused(include_buffer=True)) == 2 and ds.pool.num_available == 2
        else:
            assert len(next(it)["index"]) == 4 and ds.pool.counters()["reinserted"] == 4


def test_attach_pool(train_parquet, tmp_path):
    ds = PoolDataset(str(train_parquet), None, None, _data_config(tmp_path))
    mine = QueryPool(PoolConfig(max_pool_size=100), seed=9)
    ds.attach_pool(mine)
    assert ds.pool is mine and len(mine) == 40
    with pytest.raises(RuntimeError, match="already went into a pool"):
        ds.attach_pool(QueryPool())


# ------------------------------------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("strategy", ["boundary", "uniform"])
@pytest.mark.parametrize("gen_batch_size", [4, 1])
def test_mid_run_checkpoint_resumes_with_the_same_batches(train_parquet, tmp_path, strategy, gen_batch_size):
    train = 8
    chunks = train // gen_batch_size
    config = _data_config(tmp_path, heapa={"pool": {"max_pool_size": 64}, "seed": 5})

    def build():
        ds = PoolDataset(str(train_parquet), None, None, config)
        sampler = PoolBatchSampler(ds, strategy, train_batch_size=train, gen_batch_size=gen_batch_size)
        return ds, sampler, make_train_dataloader(ds, sampler)

    ds, sampler, loader = build()
    it = iter(loader)
    _run(loader, sampler, it, steps=6, chunks_per_step=chunks, first_step=0)  # past the cold pass: scored picks
    assert ds.pool.counters()["reinserted"] > 0 and ds.pool.counters()["sampled_cold"] < 6 * train
    sampler.set_step(6)
    half = [next(it) for _ in range(chunks // 2)]  # checkpoint in the middle of a selection
    for batch in half:
        sampler.on_feedback(_outcomes(batch), 6)
    blob = io.BytesIO()
    torch.save(loader.state_dict(), blob)  # what verl writes to data.pt
    pool_at_save = ds.pool.state_dict()
    expected_rest = [next(it)["index"].tolist() for _ in range(chunks - chunks // 2)]

    ds2, sampler2, loader2 = build()
    blob.seek(0)
    loader2.load_state_dict(torch.load(blob, weights_only=False))
    it2 = iter(loader2)  # torchdata restores the dataset (pool) and the sampler here
    assert ds2.pool.state_dict() == pool_at_save and sampler2.step == 6
    assert [next(it2)["index"].tolist() for _ in range(chunks - chunks // 2)] == expected_rest

    # feed back the rest of step 6 identically in both runs; the next two steps must match too
    for s in (sampler, sampler2):
        s.on_feedback(_outcomes({"index": [i for ids in expected_rest for i in ids]}), 6)
    a = _run(loader, sampler, it, steps=2, chunks_per_step=chunks, first_step=7)
    b = _run(loader2, sampler2, it2, steps=2, chunks_per_step=chunks, first_step=7)
    assert a == b
    assert ds.pool.state_dict() == ds2.pool.state_dict()
    assert sampler.state_dict() == sampler2.state_dict()


def test_restore_happens_when_the_iterator_is_created(train_parquet, tmp_path):
    config = _data_config(tmp_path)
    ds = PoolDataset(str(train_parquet), None, None, config)
    sampler = PoolBatchSampler(ds, "boundary", train_batch_size=8)
    loader = make_train_dataloader(ds, sampler)
    it = iter(loader)
    sampler.on_feedback(_outcomes(next(it)), 0)
    state = loader.state_dict()
    ds2 = PoolDataset(str(train_parquet), None, None, config)
    sampler2 = PoolBatchSampler(ds2, "boundary", train_batch_size=8)
    loader2 = make_train_dataloader(ds2, sampler2)
    loader2.load_state_dict(state)
    assert ds2.pool.counters()["fed_back"] == 0  # not yet: the trainer must call iter() right after loading
    iter(loader2)
    assert ds2.pool.counters()["fed_back"] == 8 and len(ds2.pool.archived_ids()) == 8


def test_pool_goes_to_its_own_file_beside_data_pt(train_parquet, tmp_path):
    """With ``checkpoint_dir`` set the pool is written to ``pool_state.pkl`` (atomically) and ``data.pt`` keeps a
    reference; the checkpoint still loads after the folder moves, and a file from another checkpoint is refused."""
    config = _data_config(tmp_path)
    ds = PoolDataset(str(train_parquet), None, None, config)
    sampler = PoolBatchSampler(ds, "boundary", train_batch_size=8)
    loader = make_train_dataloader(ds, sampler)
    it = iter(loader)
    sampler.on_feedback(_outcomes(next(it)), 0)
    inline = io.BytesIO()
    torch.save(loader.state_dict(), inline)
    step = tmp_path / "ckpt" / "global_step_1"
    ds.checkpoint_dir = str(step)
    blob = io.BytesIO()
    torch.save(loader.state_dict(), blob)
    assert len(blob.getvalue()) < len(inline.getvalue()) / 2  # data.pt holds a reference, not the pool
    assert (step / "pool_state.pkl").exists() and not list(step.glob("*.tmp*"))
    pool_at_save = ds.pool.state_dict()

    moved = tmp_path / "moved"
    (step / "pool_state.pkl").rename(tmp_path / "pool_state.pkl")
    moved.mkdir()
    (tmp_path / "pool_state.pkl").rename(moved / "pool_state.pkl")

    def restore(folder):
        ds2 = PoolDataset(str(train_parquet), None, None, config)
        ds2.checkpoint_dir = folder
        loader2 = make_train_dataloader(ds2, PoolBatchSampler(ds2, "boundary", train_batch_size=8))
        blob.seek(0)
        loader2.load_state_dict(torch.load(blob, weights_only=False))
        iter(loader2)
        return ds2

    assert restore(str(moved)).pool.state_dict() == pool_at_save
    with pytest.raises(FileNotFoundError, match="pool file of this checkpoint is missing"):
        restore(str(step))
    ds.pool.add_seed("one more", "1", "toy")
    ds.checkpoint_dir = str(moved)
    ds.state_dict()  # overwrites moved/pool_state.pkl with a pool of another size
    with pytest.raises(ValueError, match="belongs to another checkpoint"):
        restore(str(moved))


# ------------------------------------------------------------------------------------------------ allocation
def test_allocation_spreads_each_selection_and_resumes(train_parquet, tmp_path):
    """``heapa.allocation``: a selection's prompts share ``k * n`` responses within the bounds, each id's count is
    read once, the allocator learns from the feedback, and a checkpoint in the middle of a selection resumes with the
    same counts and the same later allocations."""
    from verl_ext.allocation import AllocationConfig, Allocator

    train, n = 8, 4
    config = _data_config(tmp_path, heapa={"pool": {"max_pool_size": 64}, "seed": 3})

    def build():
        ds = PoolDataset(str(train_parquet), None, None, config)
        sampler = PoolBatchSampler(ds, "uniform", train_batch_size=train, gen_batch_size=4,
                                   allocator=Allocator(AllocationConfig(enabled=True, minimum=2), n))
        return ds, sampler, make_train_dataloader(ds, sampler)

    def step(sampler, it, s, chunks=2):
        sampler.set_step(s)
        counts = {}
        for _ in range(chunks):
            ids = next(it)["index"].tolist()
            sizes = sampler.rollout_n(ids)
            counts.update(zip(ids, sizes))
            # record r passes (r * 3) % (m + 1) of its m responses: some groups all-wrong, some mixed
            sampler.on_feedback({rid: ((m // 2, 0, m)[rid % 3], m) for rid, m in zip(ids, sizes)}, s)
        return counts

    ds, sampler, loader = build()
    it = iter(loader)
    history = [step(sampler, it, s) for s in range(6)]
    for counts in history:
        assert sum(counts.values()) == train * n and all(2 <= m <= 4 * n for m in counts.values())
    assert any(m != n for counts in history[1:] for m in counts.values())  # measured prompts move responses
    assert sampler.metrics()["select/alloc_measured_frac"] > 0
    assert len(sampler.allocator.recent) == 6 * train
    with pytest.raises(KeyError, match="already read"):
        sampler.rollout_n(list(history[-1])[:1])

    sampler.set_step(6)
    first = next(it)["index"].tolist()
    blob = io.BytesIO()
    torch.save(loader.state_dict(), blob)  # mid-selection: the other half's counts are still to be read
    rest = next(it)["index"].tolist()
    expected = sampler.rollout_n(first + rest)
    ds2, sampler2, loader2 = build()
    blob.seek(0)
    loader2.load_state_dict(torch.load(blob, weights_only=False))
    it2 = iter(loader2)
    assert next(it2)["index"].tolist() == rest
    assert sampler2.rollout_n(first + rest) == expected
    for s in (sampler, sampler2):
        s.on_feedback({rid: (1, m) for rid, m in zip(first + rest, expected)}, 6)
    assert step(sampler, it, 7) == step(sampler2, it2, 7)
    assert sampler.state_dict() == sampler2.state_dict()

    plain = PoolBatchSampler(PoolDataset(str(train_parquet), None, None, config), "uniform", train_batch_size=train)
    with pytest.raises(ValueError, match="heapa.allocation is on"):
        sampler2.load_state_dict(plain.state_dict())
