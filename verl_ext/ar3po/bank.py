"""``ResponseBank``: AR3PO's bounded store of earlier correct responses, and the reuse plans drawn from it.

Why: a prompt whose group stays all-wrong after the last stage gives GRPO no signal. If the policy solved that
prompt at an earlier visit, putting that correct response into the group restores a non-zero advantage.

A response is an opaque JSON-safe payload (``token_ids``, ``text``, ``acc``, plus anything the adapter needs);
the bank stamps it with the ``step`` it was generated at. Bounds: ``per_prompt`` responses per prompt (newest
win) and ``capacity`` responses in all; past capacity the least recently used prompt (put or reused) is evicted
whole. Every drop is counted. Complexity: ``put``/``get``/``reuse_for_group`` O(1) amortised plus the payload
copy; eviction O(evicted).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_ext.ar3po.config import AR3POConfig
from verl_ext.ar3po.stats import check_accs
from verl_ext.state_schema import check_schema

SCHEMA_VERSION = 1
COUNTERS = ("put", "duplicates", "replaced", "evicted", "evicted_prompts", "reused", "miss", "stale")


def _json_safe(value: Any, where: str) -> Any:
    """Deep copy restricted to JSON types: the bank's state must survive ``json.dumps`` in a checkpoint."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite float {value!r} is not JSON-safe")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            out[k] = _json_safe(v, f"{where}.{k}")
        return out
    raise ValueError(f"{where}: {type(value).__name__} is not JSON-safe")


def _check_id(pid: Any) -> None:
    if isinstance(pid, bool) or not isinstance(pid, (int, str)):
        raise ValueError(f"ResponseBank: prompt id {pid!r} must be an int or a str (it is saved in checkpoints)")


@dataclass(frozen=True)
class ReusePlan:
    """Put ``response`` into the group of ``prompt_id``: at ``index`` (replace) or at the end (append).

    ``age`` is steps since the response was generated; ``weight`` is the configured loss weight for the sample.
    """

    prompt_id: Hashable
    mode: str
    index: int
    response: dict[str, Any]
    age: int
    weight: float

    def apply(self, accs: Sequence[float]) -> list[float]:
        """The group's rewards after the plan (the recipe applies the same edit to the batch rows)."""
        out = list(accs)
        acc = float(self.response["acc"])
        if self.mode == "replace":
            out[self.index] = acc
        else:
            out.append(acc)
        return out


class ResponseBank:
    """Bounded LRU-by-prompt store of correct responses."""

    def __init__(self, config: AR3POConfig) -> None:
        self.config = config
        self.reuse = config.reuse
        self._store: OrderedDict[Hashable, list[dict[str, Any]]] = OrderedDict()  # LRU first; newest entry last
        self._size = 0
        self._counters = dict.fromkeys(COUNTERS, 0)
        self.capacity: int | None = self.reuse.capacity or None  # None: not sized yet (0 = from the dataset)

    def set_capacity(self, capacity: int) -> None:
        """Bound the bank (``reuse.capacity: 0`` is sized by the caller, e.g. from the dataset); evicts the excess."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < self.reuse.per_prompt:
            raise ValueError(f"ResponseBank.set_capacity({capacity!r}): must be an integer >= per_prompt "
                             f"({self.reuse.per_prompt})")
        self.capacity = capacity
        self._evict()

    def __len__(self) -> int:
        return self._size

    def __contains__(self, pid: Hashable) -> bool:
        return pid in self._store

    # ---- writing -----------------------------------------------------------------------------------------------
    def put(self, pid: Hashable, response: Mapping[str, Any], step: int) -> bool:
        """Store one correct response; returns False for an exact duplicate (same ``token_ids``) already stored.

        Raises on a wrong response (the caller filters; storing one would teach a wrong answer) or a malformed one.
        """
        _check_id(pid)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"ResponseBank.put({pid!r}): step={step!r} must be an integer >= 0")
        entry = self._validate(pid, response)
        entry["step"] = step
        entries = self._store.get(pid)
        if entries is None:
            entries = self._store[pid] = []
        self._store.move_to_end(pid)
        if any(e["token_ids"] == entry["token_ids"] for e in entries):
            self._counters["duplicates"] += 1
            return False
        entries.append(entry)
        self._size += 1
        self._counters["put"] += 1
        if len(entries) > self.reuse.per_prompt:
            drop = len(entries) - self.reuse.per_prompt
            del entries[:drop]
            self._size -= drop
            self._counters["replaced"] += drop
        self._evict()
        return True

    def put_correct(self, pid: Hashable, responses: Sequence[Mapping[str, Any]], step: int) -> int:
        """Store the correct ones among a group's fresh responses (last ``per_prompt`` of them); returns how many.

        Only freshly generated responses belong here: putting a reused one back would make it look new.
        """
        ok = [r for r in responses if self.config.is_correct(self._acc_of(pid, r))]
        return sum(self.put(pid, r, step) for r in ok[-self.reuse.per_prompt:])

    def _acc_of(self, pid: Hashable, response: Mapping[str, Any]) -> float:
        if not isinstance(response, Mapping) or "acc" not in response:
            raise ValueError(f"ResponseBank: response for prompt {pid!r} must be a mapping with an 'acc' field")
        return check_accs(pid, [response["acc"]])[0]

    def _validate(self, pid: Hashable, response: Mapping[str, Any]) -> dict[str, Any]:
        acc = self._acc_of(pid, response)
        if not self.config.is_correct(acc):
            raise ValueError(f"ResponseBank.put({pid!r}): acc={acc} is not correct "
                             f"(needs > success_threshold={self.config.success_threshold})")
        tokens = response.get("token_ids")
        if not isinstance(tokens, (list, tuple)) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise ValueError(f"ResponseBank.put({pid!r}): 'token_ids' must be a list of ints")
        if not isinstance(response.get("text", ""), str):
            raise ValueError(f"ResponseBank.put({pid!r}): 'text' must be a str")
        entry = _json_safe(response, f"response[{pid!r}]")
        entry["acc"] = acc
        entry.setdefault("text", "")
        return entry

    def _evict(self) -> None:
        """Drop least recently used prompts until the total fits (the prompt just touched is the newest)."""
        while self.capacity is not None and self._size > self.capacity:
            _, entries = self._store.popitem(last=False)
            self._size -= len(entries)
            self._counters["evicted"] += len(entries)
            self._counters["evicted_prompts"] += 1

    # ---- reading -----------------------------------------------------------------------------------------------
    def get(self, pid: Hashable, step: int | None = None) -> dict[str, Any] | None:
        """Most recent stored response (a copy), or None; with ``step`` and ``max_age`` set, stale ones are skipped."""
        entries = self._store.get(pid)
        if not entries:
            return None
        entry = entries[-1]
        if step is not None and self.reuse.max_age and step - entry["step"] > self.reuse.max_age:
            return None
        return _json_safe(entry, f"response[{pid!r}]")

    def reuse_for_group(self, pid: Hashable, group_accs: Sequence[float], step: int | None = None) -> ReusePlan | None:
        """A plan for an all-wrong group, or None (reuse off, group has a correct response, nothing stored, stale).

        Replace picks the wrong response with the lowest reward, the last such on ties (deterministic). A used
        prompt becomes most recently used: a prompt that keeps needing help keeps its bank entry.
        """
        accs = check_accs(pid, group_accs)
        if not self.reuse.enabled or any(self.config.is_correct(a) for a in accs):
            return None
        if self.reuse.mode == "replace" and not accs:
            return None
        entries = self._store.get(pid)
        if not entries:
            self._counters["miss"] += 1
            return None
        response = self.get(pid, step)
        if response is None:
            self._counters["stale"] += 1
            return None
        self._store.move_to_end(pid)
        self._counters["reused"] += 1
        if self.reuse.mode == "replace":
            low = min(accs)
            index = max(i for i, a in enumerate(accs) if a == low)
        else:
            index = len(accs)
        age = step - response["step"] if step is not None else 0
        return ReusePlan(pid, self.reuse.mode, index, response, age, self.reuse.weight)

    def plan_reuse(
        self, groups: Mapping[Hashable, Sequence[float]], step: int | None = None,
        record_of: Mapping[Hashable, Hashable] | None = None,
    ) -> dict[Hashable, ReusePlan]:
        """``reuse_for_group`` over a step's groups; only groups that get a plan appear (keyed as ``groups``).

        ``record_of`` maps a group key to its prompt id when they differ (a prompt with two groups in one batch):
        only the first group of a prompt is considered, so one stored response is never reused twice in a step.
        """
        plans, seen = {}, set()
        for key, accs in groups.items():
            pid = record_of[key] if record_of is not None else key
            if pid in seen:
                continue
            seen.add(pid)
            plan = self.reuse_for_group(pid, accs, step)
            if plan is not None:
                plans[key] = plan
        return plans

    def unapplied(self, plan: ReusePlan) -> None:
        """A planned reuse the caller could not apply (e.g. an incompatible entry): not counted as reused."""
        self._counters["reused"] -= 1

    def ages(self, step: int) -> list[int]:
        """Age in steps of every stored response at ``step``."""
        return [step - e["step"] for entries in self._store.values() for e in entries]

    # ---- metrics and checkpointing -----------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    def metrics(self, prefix: str = "rollout/") -> dict[str, float]:
        """Cumulative bank scalars (size now; drops, reuses and misses since construction or restore)."""
        c = self._counters
        return {
            f"{prefix}bank_size": float(self._size),
            f"{prefix}bank_prompts": float(len(self._store)),
            f"{prefix}bank_evicted": float(c["evicted"]),
            f"{prefix}bank_evicted_prompts": float(c["evicted_prompts"]),
            f"{prefix}bank_replaced": float(c["replaced"]),
            f"{prefix}bank_duplicates": float(c["duplicates"]),
            f"{prefix}bank_reused_total": float(c["reused"]),
            f"{prefix}bank_miss_total": float(c["miss"]),
            f"{prefix}bank_stale_total": float(c["stale"]),
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe snapshot: entries in LRU order (so eviction continues identically) and counters."""
        return {
            "schema_version": SCHEMA_VERSION,
            "reuse": self.reuse.to_dict(),
            "entries": [[pid, [dict(e) for e in entries]] for pid, entries in self._store.items()],
            "counters": dict(self._counters),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a snapshot; if the current capacities are smaller, the excess is trimmed and counted."""
        check_schema(state, "ResponseBank", SCHEMA_VERSION)
        counters = state["counters"]
        unknown = sorted(set(counters) - set(COUNTERS))
        if unknown:
            raise ValueError(f"ResponseBank state: unknown counters {unknown}")
        store: OrderedDict[Hashable, list[dict[str, Any]]] = OrderedDict()
        for pid, entries in state["entries"]:
            _check_id(pid)
            if pid in store:
                raise ValueError(f"ResponseBank state: prompt {pid!r} appears twice")
            for e in entries:
                if not isinstance(e.get("step"), int):
                    raise ValueError(f"ResponseBank state: entry of prompt {pid!r} lacks an integer 'step'")
            store[pid] = [_json_safe(e, f"state[{pid!r}]") for e in entries]
        self._store = store
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._counters.update({k: int(v) for k, v in counters.items()})
        self._size = sum(len(v) for v in store.values())
        for entries in store.values():
            drop = max(0, len(entries) - self.reuse.per_prompt)
            del entries[:drop]
            self._size -= drop
            self._counters["replaced"] += drop
        self._evict()
