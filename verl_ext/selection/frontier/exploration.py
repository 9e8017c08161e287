"""How much of a batch explores never-measured (cold) records (issue 23): HeaPA's exploration rule.

``PoolConfig.exploration`` chooses the rule for the cold share ``c`` of a batch of ``k``:

- ``greedy`` (default): a seat goes to a cold record when the frontier draw has no pick left that is expected
  nearer the target than a cold draw. ``c = clip(1 - F_d / k, cold_fraction, 1)``, with ``d`` the distance from
  ``target_pass_rate`` a cold draw is expected to read (``ColdYield``: the discounted mean ``|v - target|`` of
  the estimates ``v`` that records drawn from the cold queue got at their first measurement: the scale the
  frontier is ranked on) and ``F_d`` the picks the frontier draw would make within ``d`` of the target: the
  scored seeds there, plus the children within ``d`` less the child distance penalty, at most the batch's
  child budget. The draw walks outwards from the target, so after ``F_d`` records its next pick is expected to
  be worse than a never-measured one. While the measured frontier is rich (``F_d >= (1 - cold_fraction) k``,
  the usual case) the share is the floor ``cold_fraction``, the ``fixed`` rule; it rises only where the
  frontier is thin relative to what the unmeasured part of the pool offers, and never where cold draws are
  worse than the frontier (mostly solved or hopeless pools). Before any cold draw was measured, and under
  ``boundary: median`` (whose draw is not centred on the target), ``c = cold_fraction``.
  ``revisit_penalty`` p (0 = off) counts a seed trained v times as ``p * v`` farther from the target in
  ``F_d``, as the ``target`` draw ranks it (``policy.py``): where re-training one prompt teaches less, a
  re-drawn frontier yields seats to cold records (docs/pool.md).
- ``fixed``: ``c = cold_fraction`` (0.25 was chosen in the simulator on scenarios that measure every seed well
  within the run).
- ``adaptive``: ``c = clip(1 - F / (frontier_batches * k), cold_fraction, 1)``, with ``F`` the measured seeds
  whose ranking value lies within ``frontier_band`` of ``target_pass_rate`` (the frontier set; children do not
  count, their priors are shrunk towards 0.5): it keeps ``frontier_batches`` batches' worth of frontier in stock
  whatever a cold draw is worth, and lost in the simulator where the frontier is thin by nature.

``max_window_visits`` (any rule; ``None`` = off) bounds re-selection: a frontier pick already trained that many
times in the last ``metrics_window`` steps goes back to the pool and its seat to a never-measured record while the
cold queue has any, then to the frontier draw's next pick among the records not trained that often (in the other
order under ``window_seat: frontier``); only when every scored record is (a pool smaller than a window of
batches) does the pick keep its seat. Once the cold queue is empty the frontier would otherwise re-draw the same
few records near the target every step: on the CPU task HeaPA-DAPO (33 prompts a step) emptied it by step 55-60
and by step 80 trained 131-151 distinct prompts per 10 steps, up to 8 times each, instead of ~350 once each
(docs/cpu_learning.md).

Every rule takes cold records only while the cold queue has some, and all of them when the scored records cannot
fill the batch. What the rule reads (``ColdYield``, ``F_d``, the frontier set, the records trained in the window)
is measured by the pool for every strategy and checkpointed with it (``verl_ext/pool/coverage.py``); the knobs are
``heapa.pool.*`` (``PoolConfig``), where users set them.
"""

from __future__ import annotations

from collections.abc import Callable

from verl_ext.pool import QueryPool


def greedy_cold_share(better: int, k: int, floor: float) -> float:
    """``clip(1 - better / k, floor, 1)``: the rule of ``exploration: greedy`` (``better`` = ``F_d``)."""
    if k <= 0:
        return floor
    return min(1.0, max(floor, 1.0 - better / k))


def adaptive_cold_share(frontier: int, k: int, frontier_batches: float, floor: float) -> float:
    """``clip(1 - frontier / (frontier_batches * k), floor, 1)``: the rule of ``exploration: adaptive``."""
    if k <= 0:
        return floor
    thin = 1.0 - frontier / (frontier_batches * k) if frontier_batches > 0 else 0.0
    return min(1.0, max(floor, thin))


def cold_share(pool: QueryPool, k: int) -> float:
    """The share of a batch of ``k`` the cold queue may take now (``exploration``: the rule above)."""
    cfg = pool.config
    if cfg.exploration == "fixed" or not pool.num_cold:
        return cfg.cold_fraction
    if cfg.exploration == "greedy":
        better = pool.better_than_cold(k) if cfg.boundary != "median" else None
        return cfg.cold_fraction if better is None else greedy_cold_share(better, k, cfg.cold_fraction)
    return adaptive_cold_share(pool.frontier_size(), k, cfg.frontier_batches, cfg.cold_fraction)


def cap_revisits(pool: QueryPool, picked: list[int],
                 redraw: Callable[[int], list[int]]) -> tuple[list[int], list[int], int]:
    """``max_window_visits``: withdrawn frontier picks trained that many times in the window go back to the buckets
    and their seats to cold records while there are any, then to ``redraw(n)`` (the frontier draw, run with every
    saturated record hidden from it); ``window_seat: frontier`` asks ``redraw`` first and the cold queue for what it
    cannot fill. Returns ``(kept and redrawn picks, cold replacements, number redrawn)``. O(picks + window)."""
    limit = pool.config.max_window_visits
    if limit is None or not picked:
        return picked, [], 0
    saturated = pool.recently_trained(limit)
    drop = [rid for rid in picked if rid in saturated]
    if not drop:
        return picked, [], 0

    def cold(n: int) -> list[int]:
        return pool.pop_cold(min(n, pool.num_cold))

    def next_picks(n: int) -> list[int]:  # the frontier draw with every saturated record hidden from it
        if n <= 0:
            return []
        hidden = sorted(rid for rid in saturated if rid in pool.buckets)
        pool.withdraw(hidden)
        picks = redraw(n)
        pool.restore(hidden)
        return picks

    if pool.config.window_seat == "frontier":
        redrawn = next_picks(len(drop))
        fresh = cold(len(drop) - len(redrawn))
    else:
        fresh = cold(len(drop))
        redrawn = next_picks(len(drop) - len(fresh))
    # Seats nothing could take stay with the first saturated picks; the others go back.
    back = drop[len(drop) - len(fresh) - len(redrawn):]
    pool.restore(back)
    pool.draw_progress.forget(back)
    gone = set(back)
    return [rid for rid in picked if rid not in gone] + redrawn, fresh, len(redrawn)
