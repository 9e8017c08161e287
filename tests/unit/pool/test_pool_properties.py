"""Stateful property test: random sequences of every pool operation keep all invariants.

Invariants after each step: every record ever added is in exactly one of {cold, pooled, in flight, archived,
evicted}; statuses match the structures; live records never exceed capacity, nor the archive its bound; the
buckets are consistent and every pooled record sits in the bucket of its ranking value, in its origin's group.
"""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from verl_ext.pool import PoolConfig, PoolFullError, QueryPool, ReinsertionConfig
from verl_ext.selection.frontier import draw_batch


class PoolMachine(RuleBasedStateMachine):
    @initialize(
        cap=st.integers(3, 16),
        archive=st.integers(0, 8),
        low_fraction=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
        mode=st.sampled_from(["medium_only", "mixed"]),
        estimator=st.sampled_from(["last", "ema", "beta"]),
        trigger=st.sampled_from(["below_batch", "always", "never"]),
        rate=st.none() | st.integers(1, 4),
        streak=st.integers(0, 2),
        max_visits=st.sampled_from([None, 1, 2]),
        seed=st.integers(0, 5),
        boundary=st.sampled_from(["target", "median"]),
        eviction=st.sampled_from(["farthest", "paper"]),
        cold_fraction=st.sampled_from([0.0, 0.25, 1.0]),
        child_cap=st.sampled_from([0.0, 0.5, 1.0]),
        resolution=st.sampled_from([1, 7, 1000]),
        exploration=st.sampled_from(["fixed", "adaptive", "greedy"]),
        window_visits=st.sampled_from([None, 1, 2]),
    )
    def setup(self, cap, archive, low_fraction, mode, estimator, trigger, rate, streak, max_visits, seed, boundary,
              eviction, cold_fraction, child_cap, resolution, exploration, window_visits):
        reinsertion = ReinsertionConfig(trigger=trigger, rate=rate, drop_solved_streak=streak, max_visits=max_visits)
        self.cfg = PoolConfig(max_pool_size=cap, archive_capacity=archive, low_fraction=low_fraction,
                              sampling_mode=mode, estimator=estimator, reinsertion=reinsertion, boundary=boundary,
                              eviction=eviction, cold_fraction=cold_fraction, max_child_fraction=child_cap,
                              resolution=resolution, exploration=exploration, max_window_visits=window_visits,
                              metrics_window=3)
        self.pool = QueryPool(self.cfg, seed=seed)
        self.added: set[int] = set()
        self.evicted: set[int] = set()
        self.step = 0

    def _drain(self):
        gone = self.pool.drain_evicted()
        assert not set(gone) & self.evicted, "an id was reported evicted twice"
        self.evicted |= set(gone)

    def _held(self, status=None):
        return sorted(r for r in self.added - self.evicted if status is None or self.pool.status(r) == status)

    @rule(n=st.integers(1, 3))
    def add_seeds(self, n):
        try:
            ids = self.pool.add_seeds_bulk([f"q{len(self.added) + i}" for i in range(n)], ["a"] * n, "s")
        except PoolFullError:
            return
        self.added |= set(ids)
        self._drain()

    @rule(priors=st.lists(st.floats(0, 1), min_size=1, max_size=4))
    def add_scored_seeds(self, priors):
        ids = self.pool.add_seeds_bulk(["p"] * len(priors), ["a"] * len(priors), "s", priors=priors)
        self.added |= set(ids)
        self._drain()

    @rule(data=st.data(), d=st.floats(0.75, 1.33))
    def add_child(self, data, d):
        held = self._held()
        if not held:
            return
        parent = data.draw(st.sampled_from(held))
        try:
            self.added.add(self.pool.add_child("c", "a", "s", parent, d, self.step))
        except PoolFullError:
            pass
        self._drain()

    @rule(k=st.integers(0, 5))
    def sample(self, k):
        available = self.pool.num_available
        batch = draw_batch(self.pool, k, self.step)
        assert len(batch) == min(k, available) and len(set(batch)) == len(batch)
        assert all(self.pool.status(r) == "in_flight" for r in batch)

    @rule(data=st.data())
    def take(self, data):
        pooled = self._held("pooled") + self._held("cold")
        ids = data.draw(st.lists(st.sampled_from(pooled), unique=True, max_size=3)) if pooled else []
        self.pool.take(ids, self.step)

    @precondition(lambda self: self.pool.in_flight_ids())
    @rule(data=st.data())
    def feedback(self, data):
        flying = self.pool.in_flight_ids()
        ids = data.draw(st.lists(st.sampled_from(flying), unique=True, min_size=1))
        results = {r: (data.draw(st.integers(0, 4)), 4) for r in ids}
        summary = self.pool.feedback(results, self.step)
        assert summary.n_records == len(ids)
        self.step += 1
        self._drain()

    @precondition(lambda self: self.pool.in_flight_ids())
    @rule(data=st.data())
    def release(self, data):
        flying = self.pool.in_flight_ids()
        self.pool.release(data.draw(st.lists(st.sampled_from(flying), unique=True, min_size=1)))

    @rule(batch=st.integers(1, 6))
    def reinsert(self, batch):
        self.pool.reinsert(self.step, batch)
        self._drain()

    @rule(data=st.data(), batch=st.integers(1, 4))
    def train_step(self, data, batch):
        """One whole trainer step: reinsert, sample a batch, feed every record back."""
        self.pool.reinsert(self.step, batch)
        ids = draw_batch(self.pool, batch, self.step)
        self.pool.feedback({r: (data.draw(st.sampled_from([0, 2, 4])), 4) for r in ids}, self.step)
        self.step += 1
        self._drain()

    @rule(data=st.data(), p=st.floats(0, 1))
    def refresh(self, data, p):
        held = self._held()
        if held:
            self.pool.set_ranking_value(data.draw(st.sampled_from(held)), p)

    @invariant()
    def partition_and_bounds(self):
        if not hasattr(self, "pool"):
            return
        pool = self.pool
        held = self.added - self.evicted
        assert {r for r in self.added if r in pool} == held and len(pool) == len(held)
        groups = {
            "cold": set(pool._cold), "pooled": set(pool.available_ids().tolist()) - set(pool._cold),
            "in_flight": set(pool.in_flight_ids()), "archived": set(pool.archived_ids()),
        }
        assert sum(map(len, groups.values())) == len(held) and set().union(*groups.values()) == held
        for status, ids in groups.items():
            assert all(pool.status(r) == status for r in ids)
        assert len(groups["cold"]) + len(groups["pooled"]) + len(groups["in_flight"]) <= self.cfg.max_pool_size
        assert len(groups["archived"]) <= self.cfg.archive_limit
        pool._scored.check()
        arrivals = [a for _, a in pool._cold.items()]  # the cold queue is a heap on arrival number
        assert all(arrivals[(i - 1) >> 1] < arrivals[i] for i in range(1, len(arrivals)))
        for rid in pool._scored:  # each pooled record sits in its origin's group, in the bucket of its value
            group = 1 if pool.get(rid).origin == "augmented" else 0
            assert pool._scored.locate(rid) == (group, pool._scored.bucket_of_value(pool.ranking_value(rid)))
        # coverage bookkeeping (issue 23): the measured count matches the records, the rule's share is in range
        assert pool._measured == sum(1 for r in held if pool.get(r).stat is not None)
        m = pool.metrics()
        assert self.cfg.cold_fraction <= m["pool/cold_share_rule"] <= 1.0 or m["pool/cold_share_rule"] == 0.0
        assert 0.0 <= m["pool/cold_share_drawn"] <= 1.0 and 0.0 <= m["pool/measured_share"] <= 1.0


    def teardown(self):
        if hasattr(self, "pool"):
            for name, value in self.pool.counters().items():
                COVERAGE[name] = COVERAGE.get(name, 0) + value


COVERAGE: dict[str, int] = {}  # counters summed over all runs: shows which paths the machine exercised
PoolMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
TestPoolMachine = PoolMachine.TestCase
