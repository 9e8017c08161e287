"""The hf rollout server, called directly (no Ray): caps, stop strings, log-probs and weight pushes are real."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from verl_ext.augment.protocol import TAG_END, build_messages
from verl_ext.cpu.assets import CPU_AUGMENT_PROMPT
from verl_ext.cpu.hf_server import HFServer


@pytest.fixture(scope="module")
def server(tiny_assets):
    return HFServer(str(tiny_assets / "model"), response_length=48, max_model_len=256, seed=0)


def _gen(server, ids, **params):
    params.setdefault("temperature", 0.0)
    return asyncio.run(server.generate("t", prompt_ids=ids, sampling_params=params))


def _augment_prompt(server, problem="What is 3 + 4?"):
    messages = build_messages(problem, CPU_AUGMENT_PROMPT)
    return server.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]


def test_max_tokens_cap_applies(server):
    ids = _augment_prompt(server)
    assert len(_gen(server, ids, max_tokens=3).token_ids) == 3
    assert len(_gen(server, ids, max_new_tokens=5).token_ids) == 5


def test_stop_string_ends_generation(server):
    ids = _augment_prompt(server)
    free = server.tokenizer.decode(_gen(server, ids).token_ids)
    stopped = server.tokenizer.decode(_gen(server, ids, stop=[TAG_END]).token_ids)
    assert TAG_END in free, f"the warm-started model should write the tagged format, got {free!r}"
    assert stopped.rstrip().endswith(TAG_END) and len(stopped) <= len(free)
    stopped_early = server.tokenizer.decode(_gen(server, ids, stop=["<DIFFICULTY>"]).token_ids)
    assert "<DIFFICULTY>" in stopped_early and TAG_END not in stopped_early


def test_logprobs_match_a_plain_forward(server):
    ids = _augment_prompt(server)
    out = _gen(server, ids, temperature=1.0, logprobs=True, max_tokens=8)
    assert out.log_probs is not None and len(out.log_probs) == len(out.token_ids)
    with torch.no_grad():
        logits = server.model(torch.tensor([ids + out.token_ids])).logits[0]
    ref = torch.log_softmax(logits.float(), -1)
    for i, tok in enumerate(out.token_ids):
        assert abs(out.log_probs[i] - float(ref[len(ids) - 1 + i, tok])) < 1e-4


def test_weight_push_changes_generation_and_rejects_foreign_names(server):
    state = {k: v.clone() for k, v in server.model.state_dict().items()}
    try:
        zeroed = {k: torch.zeros_like(v) for k, v in state.items()}
        assert asyncio.run(server.load_weights(zeroed, global_steps=7)) == len(state)
        assert server.global_steps == 7
        assert all(float(p.detach().abs().sum()) == 0.0 for p in server.model.parameters())
        with pytest.raises(RuntimeError, match="matched none"):
            asyncio.run(server.load_weights({"not.a.weight": torch.zeros(1)}))
    finally:
        asyncio.run(server.load_weights(state))


def test_concurrent_requests_share_one_generate_and_match_single_ones(server):
    """A step's requests arrive together: they are generated as one left-padded batch, each row cut at its EOS,
    and greedy results equal the one-at-a-time ones (padding changes nothing)."""
    tok = server.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {a} + {b}?"}],
                                       add_generation_prompt=True, tokenize=True)["input_ids"]
               for a, b in ((1, 2), (12, 7), (3, 45), (9, 9), (123, 4))]
    assert len({len(p) for p in prompts}) > 1  # different lengths: padding is exercised
    single = [_gen(server, p, logprobs=True) for p in prompts]

    async def together():
        return await asyncio.gather(*(server.generate(f"r{i}", prompt_ids=p,
                                                      sampling_params={"temperature": 0.0, "logprobs": True})
                                      for i, p in enumerate(prompts)))

    before = server.batches
    batched = asyncio.run(together())
    assert server.batches - before == 1
    eos = server.eos_ids[0]
    for one, many in zip(single, batched):
        assert many.token_ids == one.token_ids and many.token_ids.count(eos) <= 1
        assert all(abs(a - b) < 1e-4 for a, b in zip(many.log_probs, one.log_probs))


def test_sampled_batch_logprobs_match_a_plain_forward(server):
    tok = server.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {a} * 3?"}],
                                       add_generation_prompt=True, tokenize=True)["input_ids"] for a in (2, 17, 250)]

    async def together():
        return await asyncio.gather(*(server.generate(f"s{i}", prompt_ids=p,
                                                      sampling_params={"temperature": 1.0, "logprobs": True})
                                      for i, p in enumerate(prompts)))

    for ids, out in zip(prompts, asyncio.run(together())):
        with torch.no_grad():
            ref = torch.log_softmax(server.model(torch.tensor([ids + out.token_ids])).logits[0].float(), -1)
        for i, t in enumerate(out.token_ids):
            assert abs(out.log_probs[i] - float(ref[len(ids) - 1 + i, t])) < 1e-4


def test_a_weight_push_during_a_batch_does_not_relabel_its_responses(server, monkeypatch):
    """Responses carry the weights' ``global_steps`` they were generated with: a push that waits on the server's lock
    while a batch generates lands before the batch's callers resume, and must not lend them its version (verl's
    ``trajectory_staleness`` reads the label)."""
    ids = _augment_prompt(server)
    state = {k: v.clone() for k, v in server.model.state_dict().items()}
    started, release = threading.Event(), threading.Event()
    generate = server._generate_sync

    def held(*args, **kwargs):
        started.set()
        assert release.wait(30), "the test never released the batch"
        return generate(*args, **kwargs)

    async def race():
        await server.load_weights(state, global_steps=3)
        monkeypatch.setattr(server, "_generate_sync", held)
        request = asyncio.create_task(server.generate("r", prompt_ids=ids, sampling_params={"max_tokens": 2}))
        assert await asyncio.to_thread(started.wait, 30), "the batch never started"
        push = asyncio.create_task(server.load_weights(state, global_steps=4))
        await asyncio.sleep(0.05)
        assert not push.done(), "the push must wait for the batch's lock"
        release.set()
        return await request, await push

    try:
        out, _ = asyncio.run(race())
        assert out.extra_fields["global_steps"] == 3 and server.global_steps == 4
    finally:
        release.set()
        monkeypatch.undo()
        asyncio.run(server.load_weights(state))


def test_a_failing_batch_fails_its_requests_instead_of_hanging(server):
    ids = _augment_prompt(server)

    async def bad():
        return await asyncio.wait_for(server.generate("x", prompt_ids=ids, sampling_params={"temperature": "hot"}), 30)

    with pytest.raises(ValueError):
        asyncio.run(bad())


def test_deterministic_mode_samples_the_same_whatever_the_arrival_order(tiny_assets):
    """``engine_kwargs.hf.deterministic``: each request is seeded by (seed, weights' step, prompt, its n-th request),
    so two servers given the same requests in different orders, concurrently, sample the same responses."""
    prompts = [[1, 305, 201, 263, 262, 223, 18, 264], [1, 312, 201, 20, 265], [1, 305, 201, 263, 262, 223, 18, 264]]
    params = {"temperature": 1.0, "max_tokens": 8}

    async def run(order):
        server = HFServer(str(tiny_assets / "model"), response_length=16, max_model_len=64, seed=3,
                          deterministic=True)
        outs = await asyncio.gather(*(server.generate(f"r{i}", prompt_ids=prompts[i], sampling_params=params)
                                      for i in order))
        return server, {i: tuple(o.token_ids) for i, o in zip(order, outs)}

    a_server, a = asyncio.run(run([0, 1, 2]))
    _, b = asyncio.run(run([2, 1, 0]))
    assert a_server.max_batch == 1
    assert a[1] == b[1]  # a prompt's samples do not depend on the other requests
    assert sorted([a[0], a[2]]) == sorted([b[0], b[2]])  # the same prompt twice: the same pair of samples
    assert a[0] != a[2]  # its n-th request gets its own seed


def _arith_prompts(server, pairs):
    tok = server.tokenizer
    return [tok.apply_chat_template([{"role": "user", "content": f"What is {a} + {b}?"}],
                                    add_generation_prompt=True, tokenize=True)["input_ids"] for a, b in pairs]


def test_crn_samples_do_not_depend_on_batching_or_arrival(tiny_assets):
    """Common random numbers: two servers of one seed, asked the same questions in other batches and another order
    (one of them a batch of one), sample the same tokens with the same log-probs; another seed samples others."""
    params = {"temperature": 1.0, "logprobs": True, "max_tokens": 12}

    def serve(seed, order, max_batch):
        server = HFServer(str(tiny_assets / "model"), response_length=16, max_model_len=96, seed=seed, pad_to=64,
                          max_batch=max_batch)
        prompts = _arith_prompts(server, [(1, 2), (12, 7), (3, 45), (9, 9), (123, 4), (1, 2)])

        async def together():
            return await asyncio.gather(*(server.generate(f"r{i}", prompt_ids=prompts[i], sampling_params=params)
                                          for i in order))

        outs = dict(zip(order, asyncio.run(together())))
        return server, [(tuple(outs[i].token_ids), tuple(outs[i].log_probs)) for i in range(len(prompts))]

    a_server, a = serve(5, [0, 1, 2, 3, 4, 5], max_batch=64)
    b_server, b = serve(5, [5, 3, 1, 4, 0, 2], max_batch=1)
    assert a_server.batches == 1 and b_server.batches == 6  # really batched differently
    assert a[1:5] == b[1:5]
    assert sorted([a[0], a[5]]) == sorted([b[0], b[5]])  # the same prompt twice: the same pair of samples
    _, c = serve(6, [0, 1, 2, 3, 4, 5], max_batch=64)
    assert c != a


def test_crn_samples_do_not_depend_on_asking_for_log_probs(tiny_assets):
    """AR3PO's presets ask for log-probs, the others do not: the same seed must sample the same tokens for both."""
    server = HFServer(str(tiny_assets / "model"), response_length=16, max_model_len=96, seed=5, pad_to=64)
    prompts = _arith_prompts(server, [(12, 7), (3, 4), (25, 16), (9, 9), (41, 8), (7, 30)])
    with_lp = {"temperature": 1.0, "logprobs": True, "max_tokens": 12}
    without = {"temperature": 1.0, "max_tokens": 12}
    other = HFServer(str(tiny_assets / "model"), response_length=16, max_model_len=96, seed=5, pad_to=64)
    changed = []
    for i, prompt in enumerate(prompts):
        a = asyncio.run(server.generate(f"a{i}", prompt_ids=prompt, sampling_params=with_lp))
        b = asyncio.run(other.generate(f"b{i}", prompt_ids=prompt, sampling_params=without))
        assert a.token_ids == b.token_ids, i
        hotter = asyncio.run(other.generate(f"c{i}", prompt_ids=prompt,
                                            sampling_params={**without, "temperature": 2.0}))
        changed.append(hotter.token_ids != a.token_ids)
    # a setting that changes sampling changes the draws: the same Gumbel noise at twice the temperature can still
    # pick every token of one confident answer (it did on one CPU's model), not of six
    assert any(changed), changed


def test_crn_greedy_equals_a_plain_greedy_decode(tiny_assets):
    server = HFServer(str(tiny_assets / "model"), response_length=16, max_model_len=96, seed=0, pad_to=64)
    [ids] = _arith_prompts(server, [(21, 5)])
    out = asyncio.run(server.generate("g", prompt_ids=ids, sampling_params={"temperature": 0.0}))
    with torch.no_grad():
        ref = server.model.generate(input_ids=torch.tensor([ids]), max_new_tokens=16, do_sample=False,
                                    eos_token_id=server.eos_ids, pad_token_id=server.pad_id)[0, len(ids):].tolist()
    assert out.token_ids == ref[: len(out.token_ids)]
