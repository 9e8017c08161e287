"""Simulated on-policy augmentation: the policy writes children of the batch's prompts, a teacher validates them
asynchronously, accepted children enter the real pool with lineage edges to their parents.

Only the generation and the teacher's verdict are simulated; the rest is the project's own code path: parents are
chosen by ``verl_ext.augment.config.select_parents``, children enter through ``QueryPool.add_child`` (prior from
the parent's value and the reported difficulty factor, eviction of the hardest when full) and are linked with
``LineageRefresher.link``. A child whose parent was evicted while its verdict was pending is dropped, as the
recipe's integrate step must do. Costs are counted separately from training rollouts: one generation per
candidate and one teacher call per candidate that parses.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import numpy as np

from verl_ext.augment.config import AugmentConfig, select_parents
from verl_ext.sim.config import SimAugmentConfig
from verl_ext.sim.world import SyntheticWorld

D_MIN, D_MAX = 0.75, 1.33  # the paper's clamp of the reported difficulty factor


class SimAugmenter:
    """Fires augmentation for a batch and integrates verdicts ``delay_steps`` later. Counters in ``counts``."""

    def __init__(self, config: SimAugmentConfig, world: SyntheticWorld, pool: Any, refresher: Any | None,
                 rng: np.random.Generator) -> None:
        self.config = config
        self.parent_config = AugmentConfig(enabled=True, **config.parents)
        self.world, self.pool, self.refresher = world, pool, refresher
        self._rng = rng
        self._parent_rng = random.Random(int(rng.integers(2**63)))
        self._pending: deque[tuple[int, list[tuple[int, float, float, bool]]]] = deque()
        self.counts = dict.fromkeys(("generations", "parse_failed", "teacher_calls", "accepted", "accepted_invalid",
                                     "rejected", "dropped_parent_gone", "linked", "unlinked"), 0)

    def fire(self, ids: np.ndarray, passes: np.ndarray, n: int | np.ndarray, step: int) -> None:
        """Ask the policy for children of the chosen parents of this batch; verdicts become ready later.
        ``n``: the group size, one for all or one per group (AR3PO's groups differ)."""
        cfg, rng = self.config, self._rng
        sizes = np.broadcast_to(n, np.shape(ids))
        rates = {int(i): float(p) / int(m) for i, p, m in zip(ids, passes, sizes)}
        parents = select_parents(self.parent_config, rates, self._parent_rng)
        per = self.parent_config.num_per_prompt
        m = len(parents) * per
        if m == 0:
            return
        self.counts["generations"] += m
        parent_arr = np.repeat(np.asarray(parents, dtype=np.int64), per)
        delta = cfg.child_difficulty_shift + cfg.child_difficulty_std * rng.standard_normal(m)
        reported = delta + cfg.report_noise * rng.standard_normal(m)
        factor = np.clip(np.exp(cfg.report_scale * reported), D_MIN, D_MAX)
        parsed = rng.random(m) >= cfg.parse_fail_rate
        invalid = rng.random(m) < cfg.invalid_rate
        verdict_u = rng.random(m)
        accepted = np.where(invalid, verdict_u < cfg.invalid_slip, verdict_u < cfg.teacher_accept) & parsed
        self.counts["parse_failed"] += int((~parsed).sum())
        self.counts["teacher_calls"] += int(parsed.sum())
        self.counts["rejected"] += int((parsed & ~accepted).sum())
        difficulty = self.world.difficulty[parent_arr] + delta
        ready = [(int(p), float(f), float(d), bool(not bad))
                 for p, f, d, bad, ok in zip(parent_arr, factor, difficulty, invalid, accepted) if ok]
        self._pending.append((step + cfg.delay_steps, ready))

    def integrate(self, step: int) -> int:
        """Add every child whose verdict is ready by ``step`` to the pool; return how many entered."""
        added = 0
        while self._pending and self._pending[0][0] <= step:
            for parent, factor, difficulty, valid in self._pending.popleft()[1]:
                added += self._add(parent, factor, difficulty, valid, step)
        return added

    def _add(self, parent: int, factor: float, difficulty: float, valid: bool, step: int) -> int:
        if parent not in self.pool:
            self.counts["dropped_parent_gone"] += 1
            return 0
        # Ids are allocated by the pool; the latent properties are registered before anything can read them.
        child = self.pool.add_child(f"child of {parent}", "0", "sim", parent_id=parent, difficulty_factor=factor,
                                    step=step)
        self.world.register(np.array([child]), np.array([difficulty]),
                            np.array([self.world.topic[parent]]), np.array([valid]))
        self.counts["accepted"] += 1
        self.counts["accepted_invalid"] += int(not valid)
        if child not in self.pool or self.refresher is None:
            return 1
        if parent not in self.pool:  # a child's child: the full pool evicted the farthest child, its parent
            self.counts["unlinked"] += 1
        elif self.refresher.link(child):
            self.counts["linked"] += 1
        return 1
