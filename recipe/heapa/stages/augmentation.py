"""On-policy query augmentation inside the PPO step (HeaPA §5), wired to verl's rollout servers.

- ``fire``: at the start of a step, while the rollout servers are awake, ask the *current* policy for new
  problems close to chosen parents (last step's trained records). Prompts are tokenised here, in the trainer
  thread; the requests run on a background thread's event loop, concurrently with the step's own rollout.
- ``collect``: before verl puts the servers to sleep (``on_sample_end``), join those requests (bounded), decode,
  parse and filter the candidates and hand them to the asynchronous teacher. The step never waits for it.
- ``integrate``: after feedback, drain validated children into the pool (prior from the parent and the
  difficulty factor) with a lineage edge.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from verl_ext.adapters.rows import child_extra
from verl_ext.augment import (AsyncValidator, AugmentConfig, CandidateFilter, SeenHashes, TeacherConfig,
                              build_teacher, select_parents)
from verl_ext.augment.protocol import AugmentPrompt, build_messages
from verl_ext.config_model import Invalid
from verl_ext.pool import UnknownRecordError
from verl_ext.state_schema import check_schema

logger = logging.getLogger(__name__)
STATE_VERSION = 1
PROMPT_PRESETS = ("default", "tiny")


def _tiny_prompt_fields() -> dict[str, Any]:
    """The request text the tiny CPU model was warm-started on (verl_ext.cpu.assets)."""
    from verl_ext.cpu.assets import CPU_AUGMENT_PROMPT

    return {"instruction": CPU_AUGMENT_PROMPT.instruction, "answer_format": CPU_AUGMENT_PROMPT.answer_format,
            "shots": []}


def resolve_prompt_preset(block: Mapping[str, Any]) -> dict[str, Any]:
    """``heapa.augmentation`` with ``prompt_preset`` replaced by the prompt fields it names (``tiny``: the text
    the tiny CPU model was warm-started on), ready for ``AugmentConfig``'s own validation."""
    block = dict(block)
    preset = block.pop("prompt_preset", "default")
    if preset not in PROMPT_PRESETS:
        raise Invalid(f"must be one of {PROMPT_PRESETS}", field="prompt_preset", value=preset)
    if preset == "tiny":
        block.update(_tiny_prompt_fields())
    return block


def parse_augment_config(block: Mapping[str, Any]) -> AugmentConfig:
    """The ``heapa.augmentation`` block as an ``AugmentConfig`` (errors name ``augmentation.<field>``)."""
    try:
        return AugmentConfig.from_dict(resolve_prompt_preset(block))
    except Invalid as err:
        raise ValueError(f"augmentation.{err.field} {err.why}, got {err.value!r}") from None


def _user_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else ""


def _rng_state(rng: random.Random) -> dict[str, Any]:
    """``random.Random`` state as JSON (parent choice must continue identically after a resume)."""
    version, internal, gauss_next = rng.getstate()
    return {"version": version, "internal": list(internal), "gauss_next": gauss_next}


def canonical_order(prompts: list[list[int]], results: list[Any]) -> list[Any]:
    """``results`` with the outputs of identical requests (same prompt ids) sorted by their tokens and handed back
    to those requests in their order. The server's samples for a prompt are fixed, but which of its identical
    requests gets which follows arrival order: without this, two siblings (``num_per_prompt`` copies of one parent)
    could swap texts, and so child ids, between two runs of the same seed. Failed requests sort last."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault(tuple(prompt), []).append(i)
    out = list(results)
    for idx in groups.values():
        if len(idx) > 1:
            ranked = sorted((results[i] for i in idx), key=lambda r: (1, ()) if isinstance(r, BaseException)
                            else (0, tuple(r.token_ids)))
            for i, r in zip(idx, ranked):
                out[i] = r
    return out


class AugmentationStage:
    """Fire / collect / integrate, plus the bounded state that must survive a checkpoint."""

    def __init__(self, aug: AugmentConfig, teacher: TeacherConfig, tokenizer: Any, pool: Any, lineage: Any,
                 seed: int, instruction_suffix: str = "", suffix_separator: str = " ", join_timeout_s: float = 600.0):
        self.cfg = aug
        self.tokenizer, self.pool, self.lineage = tokenizer, pool, lineage
        self.suffix, self.sep = instruction_suffix, suffix_separator
        self.join_timeout_s = join_timeout_s
        self.spec: AugmentPrompt = aug.prompt_spec()
        self.rng = random.Random(seed)
        self.seen = SeenHashes(aug.seen_capacity)
        for rid in list(pool.available_ids()) + pool.in_flight_ids() + pool.archived_ids():
            self.seen.add_text(self._problem_text(pool.get(int(rid)).prompt))
        self.filter = CandidateFilter(aug.max_candidate_chars, self.seen)
        self.validator = AsyncValidator.from_config(build_teacher(teacher), teacher)
        self._thread: threading.Thread | None = None
        self._jobs: list[tuple[int, str]] = []  # (parent id, parent problem text) per request
        self._prompts: list[list[int]] = []  # the token ids each request sent
        self._results: list[Any] = []
        self.counters = {"fired": 0, "generated": 0, "gen_tokens": 0, "gen_failed": 0, "joined_late": 0,
                         "inserted": 0, "parent_gone": 0}
        self._last = {"gen_seconds": 0.0, "parents": 0}

    # ------------------------------------------------------------------------------------------- fire
    def _problem_text(self, prompt: Any) -> str:
        text = _user_text(prompt)
        if self.suffix and text.endswith(self.suffix):
            text = text[: -len(self.suffix)].rstrip()
        return text

    def fire(self, pass_rates: dict[int, float], client: Any) -> int:
        """Start generation for parents chosen among ``pass_rates`` (ids trained last step); returns #requests."""
        if self._thread is not None:
            raise RuntimeError("augmentation fired twice without collect()")
        parents = [p for p in select_parents(self.cfg, pass_rates, self.rng) if p in self.pool]
        jobs, prompts = [], []
        for pid in parents:
            text = self._problem_text(self.pool.get(pid).prompt)
            messages = build_messages(text, self.spec)
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = list(ids if isinstance(ids, list) else ids["input_ids"])  # transformers 5 returns a BatchEncoding
            for _ in range(self.cfg.num_per_prompt):
                jobs.append((pid, text))
                prompts.append(ids)
        self._jobs, self._results, self._prompts = jobs, [], prompts
        self._last["parents"] = len(parents)
        if not jobs:
            return 0
        params = {"temperature": self.cfg.temperature, "top_p": self.cfg.top_p, "max_tokens": self.cfg.max_new_tokens,
                  "stop": list(self.cfg.stop), "logprobs": False}
        start = time.perf_counter()

        async def _run() -> list[Any]:
            calls = [client.generate(uuid.uuid4().hex, prompt_ids=p, sampling_params=dict(params)) for p in prompts]
            return await asyncio.gather(*calls, return_exceptions=True)

        def _target() -> None:
            self._results = asyncio.run(_run())
            self._last["gen_seconds"] = time.perf_counter() - start

        self._thread = threading.Thread(target=_target, name="heapa-augment", daemon=True)
        self._thread.start()
        self.counters["fired"] += len(jobs)
        return len(jobs)

    # ------------------------------------------------------------------------------------------- collect
    def collect(self) -> int:
        """Join the generation (bounded), filter candidates, submit them to the teacher; returns #submitted."""
        if self._thread is None:
            return 0
        self._thread.join(self.join_timeout_s)
        if self._thread.is_alive():
            # The servers are about to sleep; results arriving later are dropped, counted, never waited for.
            self.counters["joined_late"] += len(self._jobs)
            logger.warning("augmentation generation exceeded %.0fs; %d requests dropped", self.join_timeout_s,
                           len(self._jobs))
            self._thread, self._jobs = None, []
            return 0
        self._thread = None
        submitted = 0
        for (pid, text), out in zip(self._jobs, canonical_order(self._prompts, self._results)):
            if isinstance(out, BaseException):
                self.counters["gen_failed"] += 1
                logger.warning("augmentation request for parent %s failed: %r", pid, out)
                continue
            self.counters["generated"] += 1
            self.counters["gen_tokens"] += len(out.token_ids)
            raw = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            submitted += self.validator.submit(self.filter.filter([raw], pid, text))
        self._jobs, self._results, self._prompts = [], [], []
        return submitted

    # ------------------------------------------------------------------------------------------- integrate
    def integrate(self, step: int) -> list[int]:
        """Insert the teacher-accepted children that finished since the last call; returns their ids."""
        added = []
        for cand, verdict in self.validator.drain():
            pid = int(cand.parent_id)
            if pid not in self.pool:
                self.counters["parent_gone"] += 1
                continue
            parent = self.pool.get(pid)
            problem = (verdict.clean_problem or cand.text).strip()
            content = problem + (self.sep + self.suffix if self.suffix else "")
            difficulty = verdict.difficulty if verdict.difficulty is not None else cand.difficulty
            try:
                cid = self.pool.add_child([{"role": "user", "content": content}], str(verdict.answer),
                                          parent.data_source, pid, float(difficulty), step,
                                          extra=child_extra(parent.extra, parent_id=pid, origin="augmented"))
            except UnknownRecordError:
                self.counters["parent_gone"] += 1
                continue
            self.seen.add_text(problem)
            self.counters["inserted"] += 1
            if self.lineage is not None and cid in self.pool:
                if pid in self.pool:
                    self.lineage.link(cid)
                else:  # the parent was a child too, and the full pool made room by evicting it
                    logger.info("augmentation: child %d entered a full pool in place of its parent %d (no "
                                "lineage edge)", cid, pid)
            added.append(cid)
        return added

    # ------------------------------------------------------------------------------------------- reporting
    def metrics(self) -> dict[str, float]:
        out = {f"augment/{k}": float(v) for k, v in self.counters.items()}
        out["augment/parents_last_step"] = float(self._last["parents"])
        out["augment/gen_seconds"] = float(self._last["gen_seconds"])
        out.update(self.filter.metrics())
        out.update(self.validator.metrics())
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"schema_version": STATE_VERSION, "validator": self.validator.state_dict(),
                "seen": self.seen.state_dict(), "filter": self.filter.state_dict(),
                "rng": _rng_state(self.rng),
                "counters": dict(self.counters)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_schema(state, "augmentation", STATE_VERSION)
        self.seen.load_state_dict(state["seen"])
        self.filter.load_state_dict(state["filter"])
        self.validator.load_state_dict(state["validator"])  # re-queues candidates that were in flight
        rng = state["rng"]
        self.rng.setstate((rng["version"], tuple(rng["internal"]), rng["gauss_next"]))
        self.counters.update(state["counters"])

    def close(self) -> None:
        self.validator.close()
