"""The ``hf`` rollout server: a Ray actor serving HF ``model.generate`` token-in/token-out on the CPU.

verl's agent loop calls ``server.generate.remote(request_id=..., prompt_ids=..., sampling_params=...)`` and
expects a ``TokenOutput``; the trainer's sleep/wake/abort calls are no-ops here (nothing to free on a host).
The actor owns its own copy of the model; the actor worker pushes fresh weights after every PPO update
through ``load_weights`` (see ``hf_rollout.HFServerAdapter``), so rollouts always come from the current policy.
Generation is serialised by one lock and runs in a worker thread so the actor's event loop stays responsive.

Requests that arrive together are generated together: verl's agent loop sends a step's prompts concurrently, and
one left-padded ``generate`` over up to ``max_batch`` of them costs about what one prompt costs on a small model
(measured: 128 concurrent requests to the tiny model, 2.4 s one at a time, 0.24 s batched). Requests are grouped
by sampling settings and token budget; those with stop strings run alone (HF checks stop strings batch-wide).

Common random numbers (``crn``, the default): a request's sample depends only on (seed, weights' step, prompt,
sampling settings, its n-th identical request at those weights), never on which requests share its batch. Two
runs that ask the same model the same questions get the same answers: the step-0 validation of every method of a
seed is identical, and later validations of two methods differ only by what their models learned. It takes three
things: each row samples by the Gumbel-max trick from its own seeded generator (``RowNoise``); every batch is
left-padded to one fixed width (``pad_to``, the rollout's prompt length); and a batch has at least
``MIN_BATCH_ROWS`` rows (dummy copies), because the CPU matrix kernels for 1-3 rows sum in another order than
for 4 or more (measured on the ``learn`` model: logits differ by up to 8e-6 between those, and are bit-identical
across every batch of 4-128 rows at one width).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import torch

logger = logging.getLogger(__name__)

MIN_BATCH_ROWS = 4  # below this the CPU GEMM kernels change their summation order (see the module docstring)


def request_seed(*key: Any) -> int:
    """A 63-bit seed from a key's ``repr`` (stable across processes, unlike ``hash``)."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


class RowNoise:
    """Per-row sampling for a greedy ``generate``: HF's own temperature, top-k and top-p warpers, then Gumbel noise
    drawn from each row's own generator, so argmax is a sample of that row's distribution whatever else shares the
    batch.

    A HF logits processor (called with the batch's ``input_ids`` and next-token ``scores``). Rows draw a full
    vocabulary of noise every position, finished or not, so a row's n-th draw is always its n-th position.
    """

    def __init__(self, seeds: list[int], temperature: float, top_p: float = 1.0, top_k: int = -1):
        from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                            TopPLogitsWarper)

        if temperature <= 0:
            raise ValueError(f"RowNoise samples: temperature must be > 0, got {temperature}")
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.warpers = [TemperatureLogitsWarper(float(temperature))]
        if int(top_k) > 0:
            self.warpers.append(TopKLogitsWarper(int(top_k)))
        if float(top_p) < 1.0:
            self.warpers.append(TopPLogitsWarper(float(top_p)))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        tiny = torch.finfo(torch.float32).tiny
        vocab = scores.shape[-1]
        uniform = torch.stack([torch.rand(vocab, generator=g) for g in self.generators]).clamp_(min=tiny)
        return scores - torch.log(-torch.log(uniform))


def sampled_logprobs(logits: tuple[torch.Tensor, ...], tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probability of each generated token under the sampling distribution's temperature, for a whole batch.

    ``logits`` holds one ``[batch, vocab]`` tensor per generated position and ``tokens`` is ``[batch, steps]``;
    one log-softmax over the stacked logits serves every row. verl compares these with the actor's own log-probs
    (``logits / temperature``), so both sides use the same scaling; greedy decoding (temperature 0) reports the
    untempered distribution.
    """
    scale = temperature if temperature > 0 else 1.0
    stacked = torch.stack(logits, dim=1).float() / scale  # [batch, steps, vocab]
    return torch.log_softmax(stacked, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@dataclass
class _Pending:
    """Requests waiting for one batched generate: same sampling settings and token budget."""

    params: dict[str, Any]
    budget: int
    prompts: list[list[int]] = field(default_factory=list)
    seeds: list[int | None] = field(default_factory=list)  # per request under crn, else None
    futures: list[asyncio.Future] = field(default_factory=list)


def token_output(fields: dict[str, Any]) -> Any:
    """verl's ``TokenOutput`` of ``fields``, built where the answer lands (verl's agent loop)."""
    from verl.workers.rollout.replica import TokenOutput

    return TokenOutput(**fields)


@dataclass(frozen=True)
class ServedTokens:
    """One generation's answer as verl's ``TokenOutput`` has it (the same fields), unpickled as a ``TokenOutput``:
    the server's process never imports verl, which sits on the critical path of every start (importing this module:
    0.9 s instead of 4.0 s; the server's process 4.0 CPU-s a start instead of 4.8, tiny assets)."""

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str
    extra_fields: dict[str, Any]

    def __reduce__(self):
        return token_output, ({"token_ids": self.token_ids, "log_probs": self.log_probs,
                               "stop_reason": self.stop_reason, "extra_fields": self.extra_fields},)


class HFServer:
    """Serves one HF causal LM; ``generate`` is the only hot method."""

    def __init__(self, model_path: str, response_length: int, max_model_len: int, seed: int = 0,
                 trust_remote_code: bool = False, num_threads: int = 1, max_batch: int = 64,
                 batch_wait_s: float = 0.005, deterministic: bool = False, crn: bool = True,
                 pad_to: int | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        torch.set_num_threads(max(1, num_threads))
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
        ).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.response_length = int(response_length)
        self.max_model_len = int(max_model_len)
        self.global_steps: int | None = None
        self.weight_versions = 0
        self._lock = asyncio.Lock()
        if max_batch < 1:
            raise ValueError(f"engine_kwargs.hf.max_batch must be >= 1, got {max_batch}")
        # deterministic: one request per generate, seeded by (seed, weights' step, prompt, its n-th request at those
        # weights), so a run's samples do not depend on which requests happened to share a batch or arrive first.
        self.deterministic = bool(deterministic)
        # crn: batched, with per-request randomness (module docstring); the deterministic mode keeps its own
        # one-request path (the pinned trace was recorded with it).
        self.crn = bool(crn) and not self.deterministic
        self.pad_to = int(pad_to) if pad_to else 0
        self.seed = int(seed)
        self._seen: dict[tuple, int] = {}
        self.max_batch = 1 if self.deterministic else int(max_batch)
        self.batch_wait_s = float(batch_wait_s)
        self._pending: dict[tuple, _Pending] = {}
        self._drainer: asyncio.Task | None = None
        self.batches = 0  # generate calls made, for tests and logs
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = eos if isinstance(eos, list) else [eos]
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_ids[0]
        logger.debug("HFServer loaded %s (%d params)", model_path, sum(p.numel() for p in self.model.parameters()))

    def _max_new_tokens(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        requested = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        limit = self.response_length if requested is None else int(requested)
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(f"prompt of {prompt_len} tokens leaves no room within max_model_len={self.max_model_len}")
        return max(1, min(limit, room))

    def _generate_sync(self, prompts: list[list[int]], sampling_params: dict[str, Any], max_new_tokens: int,
                       seeds: list[int] | None = None) -> list[tuple[list[int], list[float]]]:
        """One left-padded ``generate`` over ``prompts``; each row's tokens end at its first EOS (kept). With
        ``seeds`` (one per prompt) the batch is sampled by ``RowNoise``, padded to ``pad_to`` and to
        ``MIN_BATCH_ROWS`` rows, so every row's result is independent of the rest of the batch."""
        rows = len(prompts)
        if seeds is not None and rows < MIN_BATCH_ROWS:  # dummy rows, dropped below
            prompts = prompts + [prompts[0]] * (MIN_BATCH_ROWS - rows)
            seeds = seeds + [seeds[0]] * (MIN_BATCH_ROWS - rows)
        temperature = float(sampling_params.get("temperature", 1.0))
        top_k = int(sampling_params.get("top_k", -1))
        stop = sampling_params.get("stop") or None
        if isinstance(stop, str):
            stop = [stop]
        kwargs: dict[str, Any] = dict(
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        if seeds is not None and temperature > 0:  # sampled by per-row noise on top of a greedy decode
            from transformers import LogitsProcessorList

            kwargs.update(do_sample=False, logits_processor=LogitsProcessorList([RowNoise(
                seeds, temperature, top_p=float(sampling_params.get("top_p", 1.0)), top_k=top_k)]))
        elif temperature > 0:
            kwargs.update(temperature=temperature, top_p=float(sampling_params.get("top_p", 1.0)),
                          top_k=top_k if top_k > 0 else 0)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        width = max(len(p) for p in prompts)
        if seeds is not None:
            width = max(width, self.pad_to)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):  # left padding: every row's next token is generated at the same column
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        if self.deterministic:
            torch.manual_seed(self._request_seed(prompts[0]))
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        self.batches += 1
        new_tokens = out.sequences[:, width:]
        logprobs = sampled_logprobs(out.logits, new_tokens, temperature).tolist()
        eos = set(self.eos_ids)
        results = []
        for row, row_logprobs in zip(new_tokens.tolist()[:rows], logprobs[:rows]):
            end = next((j + 1 for j, tok in enumerate(row) if tok in eos), len(row))  # finished rows are padded
            results.append((row[:end], row_logprobs[:end]))
        return results

    def _request_seed(self, prompt: list[int]) -> int:
        key = (self.global_steps, tuple(prompt))
        n = self._seen[key] = self._seen.get(key, -1) + 1
        return request_seed(self.seed, key, n)

    def _crn_seed(self, prompt: list[int], settings: tuple) -> int:
        """The request's own seed: identical requests at the same weights are numbered in arrival order (they are
        exchangeable, so the order does not change what a run sees)."""
        key = ("crn", self.global_steps, tuple(prompt), settings)
        n = self._seen[key] = self._seen.get(key, -1) + 1
        return request_seed(self.seed, key, n)

    async def _batched(self, prompt_ids: list[int],
                       sampling_params: dict[str, Any]) -> tuple[tuple[list[int], list[float]], int | None]:
        """The request's tokens and log-probs, and the weights' ``global_steps`` they were generated with (read under
        the lock: a weight push waiting on it lands before this request's caller resumes)."""
        settings = tuple(sorted((k, repr(v)) for k, v in sampling_params.items()))
        # The seed leaves out whether log-probs are returned: it does not change what is sampled, and a method that
        # asks for them (AR3PO's reuse correction) must see the same samples as one that does not.
        sampling = tuple(kv for kv in settings if kv[0] != "logprobs")
        seed = self._crn_seed(prompt_ids, sampling) if self.crn else None
        if sampling_params.get("stop"):
            async with self._lock:
                budget = self._max_new_tokens(len(prompt_ids), sampling_params)
                version = self.global_steps
                return (await asyncio.to_thread(self._generate_sync, [prompt_ids], sampling_params, budget,
                                                None if seed is None else [seed]))[0], version
        future = asyncio.get_running_loop().create_future()
        budget = self._max_new_tokens(len(prompt_ids), sampling_params)
        key = (budget, settings)
        pending = self._pending.setdefault(key, _Pending(sampling_params, budget))
        pending.prompts.append(prompt_ids)
        pending.seeds.append(seed)
        pending.futures.append(future)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        """Serve queued requests in batches until none wait; a failed batch fails only its own requests."""
        await asyncio.sleep(self.batch_wait_s)  # a step's requests arrive over a few ms: let them gather
        while self._pending:
            key = next(iter(self._pending))
            pending = self._pending[key]
            prompts, futures = pending.prompts[: self.max_batch], pending.futures[: self.max_batch]
            seeds = pending.seeds[: self.max_batch] if self.crn else None
            del pending.prompts[: self.max_batch], pending.futures[: self.max_batch], pending.seeds[: self.max_batch]
            if not pending.prompts:
                del self._pending[key]
            try:
                async with self._lock:
                    version = self.global_steps
                    results = await asyncio.to_thread(self._generate_sync, prompts, pending.params, pending.budget,
                                                      seeds)
            except Exception as err:  # not swallowed: each waiting request raises it (a waiter must never hang)
                for fut in futures:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            except asyncio.CancelledError:  # the actor is going away: release everyone still waiting
                for fut in futures + [f for p in self._pending.values() for f in p.futures]:
                    if not fut.done():
                        fut.cancel()
                self._pending.clear()
                raise
            for fut, result in zip(futures, results):
                if not fut.done():  # the caller may have been cancelled meanwhile
                    fut.set_result((result, version))

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, **_kwargs: Any) -> ServedTokens:
        if image_data is not None or video_data is not None:
            raise NotImplementedError("the hf CPU rollout serves text-only models")
        prompt_ids = [int(t) for t in prompt_ids]
        (tokens, logprobs), version = await self._batched(prompt_ids, dict(sampling_params))
        want_logprobs = bool(sampling_params.get("logprobs", False))
        return ServedTokens(
            token_ids=tokens,
            log_probs=logprobs if want_logprobs else None,
            stop_reason="completed",  # EOS, a stop string or the length cap (vLLM reports all as completed)
            extra_fields={"global_steps": version},
        )

    async def load_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Copy the actor's weights in; returns how many tensors matched (0 matches is an error)."""
        # state_dict (not named_parameters) also lists tied weights such as lm_head.weight under their own name.
        own = self.model.state_dict(keep_vars=True)
        matched = [n for n in named_tensors if n in own]
        if not matched:
            raise RuntimeError(
                f"weight push matched none of the rollout model's {len(own)} tensors "
                f"(first incoming: {sorted(named_tensors)[:3]}): actor and rollout disagree on names"
            )
        unknown = sorted(set(named_tensors) - set(own))
        if unknown:
            logger.warning("weight push carries %d unknown tensors, e.g. %s", len(unknown), unknown[:3])
        async with self._lock:  # the version changes with the weights: a batch reads both under this lock
            with torch.no_grad():
                for name in matched:
                    own[name].copy_(named_tensors[name].to(own[name].dtype))
            self.global_steps = global_steps
            self.weight_versions += 1
            self._seen.clear()  # request counts are per weights
        return len(matched)

    async def get_weight_versions(self) -> int:
        return self.weight_versions

    # The trainer's lifecycle calls: nothing to release or resume on a host.
    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def abort_all_requests(self, *args: Any, **kwargs: Any) -> dict:
        return {}

    async def resume_generation(self, *args: Any, **kwargs: Any) -> dict:
        return {}

    async def clear_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def release_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def resume_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def start_profile(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def stop_profile(self, *args: Any, **kwargs: Any) -> None:
        return None
