"""``StagePlanner``: AR3PO's adaptive rollout as a pure, deterministic state machine over one step.

Why a planner apart from the agent loop: the decision "who gets more responses" is the algorithm; sending
requests to vLLM/SGLang is plumbing. Keeping the decision here makes it testable in microseconds and reusable by
the simulator and by any framework. In training, verl's agent-loop workers drive one planner per prompt
(``verl_ext.adapters.ar3po_agent_loop``), so a prompt's next stage starts as soon as its own results are in:

    plan = planner.begin(ids)                  # {id: k1}
    while plan:
        planner.record(generate(plan))         # {id: [acc, ...]}; may arrive in several calls per stage
        plan = planner.next_stage()            # {id: k_s} for still-unsolved prompts, {} when finished
    groups = planner.groups()                  # {id: [acc, ...]} for GRPO and for reuse

Rules (``extend: unsolved``, the paper's): a prompt stops once any response is correct; an unsolved prompt
continues while stages < ``max_stages`` and responses < ``max_per_prompt`` (the last grant is trimmed to the cap).
``extend: mixed`` (the default) continues only prompts whose group holds both a correct and a wrong response.
``extend: measured`` applies ``unsolved`` to the prompts ``begin`` names as measured and ``mixed`` to the others.
Order follows ``begin``'s order.
Complexity: ``begin``/``next_stage``/``summary`` O(prompts); ``record`` O(responses recorded).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from verl_ext.ar3po.config import AR3POConfig
from verl_ext.ar3po.stats import check_accs, group_stats
from verl_ext.state_schema import check_schema

SCHEMA_VERSION = 2  # 2: the prompts named measured (1 still loads: none)


class PlannerError(RuntimeError):
    """The planner was driven out of order (record before begin, next_stage with results missing, ...)."""


class StagePlanner:
    """Decides, stage by stage, how many more responses each prompt of the step gets."""

    def __init__(self, config: AR3POConfig) -> None:
        self.config = config
        self._reset()

    def _reset(self) -> None:
        self._order: list[Hashable] = []
        self._accs: dict[Hashable, list[float]] = {}
        self._solved_at: dict[Hashable, int] = {}  # id -> stage (1-based) of its first correct response
        self._pending: dict[Hashable, int] = {}  # id -> responses still owed for the current stage
        self._measured: set[Hashable] = set()  # prompts ``extend: measured`` treats by the paper's rule
        self._stage = 0
        self._finished = False

    # ---- driving -----------------------------------------------------------------------------------------------
    def begin(self, ids: Iterable[Hashable], measured: Iterable[Hashable] = ()) -> dict[Hashable, int]:
        """Start a step: every prompt gets ``k1`` responses. Forgets the previous step. ``measured``: the prompts
        whose pass rate the caller knows (read only under ``extend: measured``; ids outside ``ids`` are ignored)."""
        order = list(ids)
        if len(set(order)) != len(order):
            seen: set = set()
            dups = [i for i in order if i in seen or seen.add(i)]
            raise ValueError(f"StagePlanner.begin: duplicate prompt ids {dups[:5]}")
        self._reset()
        self._order = order
        self._accs = {pid: [] for pid in order}
        self._measured = set(measured) & set(order)
        self._stage = 1
        self._pending = {pid: self.config.k1 for pid in order}
        self._finished = not order
        return dict(self._pending)

    def record(self, stage_results: Mapping[Hashable, Sequence[float]]) -> None:
        """Add rewards for the current stage; a prompt's results may come in several calls (as trajectories end).

        Raises on an id not asked for in this stage, on more results than asked, or on a non-finite reward.
        """
        if self._stage == 0:
            raise PlannerError("StagePlanner.record called before begin")
        checked = {}
        for pid, raw in stage_results.items():
            if pid not in self._pending:
                raise ValueError(f"StagePlanner.record: prompt {pid!r} was not asked for in stage {self._stage}")
            accs = check_accs(pid, raw)
            if len(accs) > self._pending[pid]:
                raise ValueError(f"StagePlanner.record: prompt {pid!r} got {len(accs)} results in stage "
                                 f"{self._stage}, only {self._pending[pid]} still owed")
            checked[pid] = accs
        for pid, accs in checked.items():  # validate everything first: a bad call changes nothing
            self._accs[pid].extend(accs)
            self._pending[pid] -= len(accs)
            if not self._pending[pid]:
                del self._pending[pid]
            if pid not in self._solved_at and any(self.config.is_correct(a) for a in accs):
                self._solved_at[pid] = self._stage

    def _grants(self) -> dict[Hashable, int]:
        """What the next stage would ask for, without committing to it."""
        cfg = self.config
        if self._finished or self._stage >= cfg.max_stages:
            return {}
        grants = {}
        for pid in self._order:
            if not self._extends(pid):
                continue
            room = cfg.max_per_prompt - len(self._accs[pid])
            if room > 0:
                grants[pid] = min(cfg.k_s, room)
        return grants

    def _extends(self, pid: Hashable) -> bool:
        """Whether prompt ``pid`` gets a later stage under the ``extend`` rule."""
        rule = self.config.extend
        if rule == "unsolved" or (rule == "measured" and pid in self._measured):
            return pid not in self._solved_at
        accs = self._accs[pid]
        return pid in self._solved_at and not all(self.config.is_correct(a) for a in accs)

    def next_stage(self) -> dict[Hashable, int]:
        """``{id: n}`` for the next stage; ``{}`` once finished (then ``done()`` is True)."""
        if self._stage == 0:
            raise PlannerError("StagePlanner.next_stage called before begin")
        if self._pending:
            missing = list(self._pending.items())[:5]
            raise PlannerError(f"stage {self._stage} still owes results (id, n): {missing}")
        grants = self._grants()
        if not grants:
            self._finished = True
            return {}
        self._stage += 1
        self._pending = dict(grants)
        return dict(grants)

    def done(self) -> bool:
        """True when the step needs no more responses (all results in and no further stage would be granted)."""
        return self._stage > 0 and not self._pending and not self._grants()

    # ---- reading -----------------------------------------------------------------------------------------------
    @property
    def stage(self) -> int:
        """Current stage (1-based; 0 before ``begin``)."""
        return self._stage

    def groups(self) -> dict[Hashable, list[float]]:
        """All rewards collected so far, per prompt, in ``begin`` order (copies)."""
        return {pid: list(self._accs[pid]) for pid in self._order}

    def responses(self) -> dict[Hashable, int]:
        return {pid: len(self._accs[pid]) for pid in self._order}

    def solved_at(self) -> dict[Hashable, int]:
        """Stage (1-based) at which each solved prompt got its first correct response."""
        return dict(self._solved_at)

    def unsolved(self) -> list[Hashable]:
        return [pid for pid in self._order if pid not in self._solved_at]

    def summary(self) -> dict[str, Any]:
        """JSON-safe account of the step: cost per prompt, stages used, who was solved when, signal before reuse."""
        stats = group_stats(self._accs, self.config.success_threshold)
        stages_used = self._stage if self._order else 0
        per_stage = [0] * stages_used
        for st in self._solved_at.values():
            per_stage[st - 1] += 1
        return {
            "prompts": len(self._order),
            "stages_used": stages_used,
            "responses_total": stats.responses,
            "responses_per_prompt_mean": stats.responses_per_prompt_mean,
            "responses_hist": dict(stats.hist),
            "solved_per_stage": per_stage,
            "unsolved": len(self._order) - len(self._solved_at),
            "zero_adv_before": stats.zero_adv,
            "zero_adv_before_frac": stats.frac(stats.zero_adv),
            "all_correct": stats.all_correct,
            "all_wrong": stats.all_wrong,
        }

    def metrics(self, prefix: str = "rollout/") -> dict[str, float]:
        """``summary`` as flat tracker scalars."""
        s = self.summary()
        m = {
            f"{prefix}stages_used": float(s["stages_used"]),
            f"{prefix}responses_total": float(s["responses_total"]),
            f"{prefix}responses_per_prompt_mean": float(s["responses_per_prompt_mean"]),
            f"{prefix}unsolved": float(s["unsolved"]),
            f"{prefix}zero_adv_before": float(s["zero_adv_before_frac"]),
        }
        for i, n in enumerate(s["solved_per_stage"], start=1):
            m[f"{prefix}solved_stage/{i}"] = float(n)
        for size, n in s["responses_hist"].items():
            m[f"{prefix}responses_hist/{size}"] = float(n)
        return m

    # ---- checkpointing -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-safe snapshot (ids must be int or str). A checkpoint normally falls between steps, but a
        mid-step snapshot also resumes exactly."""
        return {
            "schema_version": SCHEMA_VERSION,
            "config": self.config.to_dict(),
            "stage": self._stage,
            "finished": self._finished,
            "order": list(self._order),
            "accs": [list(self._accs[pid]) for pid in self._order],
            "solved_at": [[pid, st] for pid, st in self._solved_at.items()],
            "pending": [[pid, n] for pid, n in self._pending.items()],
            "measured": [pid for pid in self._order if pid in self._measured],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_schema(state, "StagePlanner", 1, SCHEMA_VERSION)
        order = list(state["order"])
        accs = state["accs"]
        if len(accs) != len(order) or len(set(order)) != len(order):
            raise ValueError("StagePlanner state: 'order' and 'accs' disagree or ids repeat")
        known = set(order)
        measured = list(state.get("measured", []))
        named = {"solved_at": [pid for pid, _ in state["solved_at"]], "pending": [pid for pid, _ in state["pending"]],
                 "measured": measured}
        for key, ids in named.items():
            bad = [pid for pid in ids if pid not in known]
            if bad:
                raise ValueError(f"StagePlanner state: {key} names unknown prompt ids {bad[:5]}")
        self._reset()
        self._order = order
        self._accs = {pid: check_accs(pid, a) for pid, a in zip(order, accs)}
        self._solved_at = {pid: int(st) for pid, st in state["solved_at"]}
        self._pending = {pid: int(n) for pid, n in state["pending"]}
        self._measured = set(measured)
        self._stage = int(state["stage"])
        self._finished = bool(state["finished"])
