"""``hive``: HIVE (arXiv 2603.25184): history-informed candidate selection, then online verification.

The learning signal sits at the "learning edge" (intermediate difficulty and high uncertainty), which moves as the
policy trains, so history alone goes stale. Two stages per batch of k:

1. **History** (coarse, free). Per record a recency-weighted pass rate ``p = S/W`` (``S <- decay*S + s``,
   ``W <- decay*W + 1`` per visit) and an entropy term ``h`` in [0, 1]; utility ``u = 4 p (1-p) +
   entropy_weight * h``. Two entropies exist and they live on different scales (response-token entropy of the
   record's rollouts, prompt entropy of the probe), so each is normalised against its *own* history: ``h`` is
   the record's percentile rank among the last ``norm_window`` measurements of the same kind (ties count half).
   ``h`` = rank of its recency-weighted response entropy when the record was trained, else rank of its
   recency-weighted prompt entropy when it was verified, else ``h0`` (never seen: optimistic, so it gets tried).
   The top ``ceil(candidate_ratio * k)`` *eligible* records by utility are the candidates.
2. **Online verification** (a forward pass per prompt, no generation): ``prompt_entropy(ids) -> {id: H}`` measures
   each candidate under the current policy. A candidate is **pruned** when
   - *collapsed*: it has a prompt-entropy history and ``H_now < collapse_ratio * H_hist``, or
   - *low*: ``H_now`` ranks below ``prune_quantile`` among this verification's candidates
     (``prune_reference: candidates``, the default), or among the last ``norm_window`` prompt-entropy measurements
     taken before it (``window``; the candidates' own values at the very first one). A real policy's prompt
     entropy falls as a whole while it trains (1.3 -> 0.4 nats over the CPU comparison's 40 steps), so a window of
     older measurements ranks every new candidate low: the window rule's prune rate climbed from 0.1 to 0.4-0.5 and
     the batch filled with the hardest prompts (71 % all-wrong groups). Under ``candidates`` every reading is also
     divided by the median of its verification before it is compared or stored, so the collapse test below and the
     entropy history compare a record with its peers under the same policy, not with an older policy's scale.
   Pruning sticks: a pruned record is not eligible again until ``reverify_after`` steps have passed; then it may
   become a candidate, is measured again, and is cleared when it passes (or pruned again, the clock restarted).
   Only when fewer than ``candidate_ratio * k`` records are eligible do the most useful pruned ones join the
   candidates early (and are measured again) — a small pool is never starved.
   The batch is the top k survivors by utility, then the eligible records ranked just below the candidates
   (unverified), and only then the pruned candidates (``hive/pruned_selected`` counts them). Every measurement
   updates the record's prompt-entropy history and the reference window.

In the recipe ``prompt_entropy`` is a forward pass of the policy (``recipe/heapa/stages/hive_verify.py``); in the simulator
a function of the latent solve probability. Without a callback stage 2 is skipped (history-only selection, nothing
pruned, ``select/verified = 0``). ``observe_response_entropy`` takes each trained record's response entropy.

*Unverified* (the paper's exact formula was not available; all are knobs): the utility's form and
``entropy_weight`` (0.5), ``decay`` (0.7), ``entropy_decay`` (0.5), ``p0`` (0.5), ``h0`` (1.0),
``candidate_ratio`` (2.0), ``collapse_ratio`` (0.5), ``prune_quantile`` (0.1), ``prune_reference``
(``candidates``), ``reverify_after`` (8 steps), ``norm_window`` (4096) and the fill order. O(n + k log k + w) per step; statistics, reference windows and RNG are
checkpointed; the callback is never pickled. Scalars: ``select/*`` (the last selection) and ``hive/*`` (the step's
selections together: ``hive/prune_rate`` = pruned / verified).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from verl_ext.config_model import Float, Fraction, NonNegInt, PositiveInt
from verl_ext.selection.registry import register_strategy
from verl_ext.selection.table import TableStrategy, check_k, results_arrays, top_k

logger = logging.getLogger(__name__)
EntropyFn = Callable[[list[int]], Mapping[int, float]]
# 2: per-source reference windows, sticky pruning (``pruned_at``); 3: ``prompt_scale`` names the scale of the stored
# prompt entropies (``relative`` to each verification's median under ``prune_reference: candidates``, else ``raw``)
HIVE_STATE_VERSION = 3
_READABLE_VERSIONS = (2, 3)
PRUNE_REFERENCES = ("candidates", "window")
_STEP_COUNTERS = ("verified", "pruned", "collapsed", "low", "cleared", "pruned_selected", "from_rest", "selected")


class RunningRank:
    """Percentile rank against the last ``window`` values of one source (a bounded, checkpointed reference)."""

    def __init__(self, window: int) -> None:
        self.window = int(window)
        self._values = np.empty(0)
        self._sorted: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._values)

    def add(self, values: np.ndarray) -> None:
        self._values = np.concatenate([self._values, np.asarray(values, dtype=np.float64)])[-self.window:]
        self._sorted = None

    def rank(self, values: np.ndarray) -> np.ndarray:
        """Fraction of the reference below each value, ties counting half; NaN where the value is NaN or the
        reference is empty."""
        values = np.asarray(values, dtype=np.float64)
        if not len(self._values):
            return np.full(len(values), np.nan)
        if self._sorted is None:
            self._sorted = np.sort(self._values)
        lo = np.searchsorted(self._sorted, values, side="left")
        hi = np.searchsorted(self._sorted, values, side="right")
        out = (lo + hi) / (2.0 * len(self._sorted))
        return np.where(np.isnan(values), np.nan, out)

    def state_dict(self) -> list[float]:
        return self._values.tolist()

    def load_state_dict(self, values: list[float]) -> None:
        self._values = np.asarray(values, dtype=np.float64)[-self.window:]
        self._sorted = None


@register_strategy("hive")
class HiveStrategy(TableStrategy):
    """History-ranked candidates, pruned by an online entropy check that sticks. See the module docstring."""

    COLUMNS = {"rate_sum": 0.0, "rate_weight": 0.0, "ent_sum": 0.0, "ent_weight": 0.0, "resp_sum": 0.0,
               "resp_weight": 0.0, "pruned_at": -1.0}

    def __init__(self, prompt_entropy: EntropyFn | None = None,
                 candidate_ratio: Annotated[Float, Field(ge=1.0, le=1e6)] = 2.0,
                 entropy_weight: Annotated[Float, Field(ge=0.0, le=1e6)] = 0.5, decay: Fraction = 0.7,
                 entropy_decay: Fraction = 0.5, p0: Fraction = 0.5, h0: Fraction = 1.0, collapse_ratio: Fraction = 0.5,
                 prune_quantile: Annotated[Float, Field(ge=0.0, lt=1.0)] = 0.1,
                 prune_reference: Literal[PRUNE_REFERENCES] = "candidates", reverify_after: PositiveInt = 8,
                 norm_window: PositiveInt = 4096, seed: NonNegInt = 0) -> None:
        super().__init__(seed)
        self.prompt_entropy = prompt_entropy
        self.candidate_ratio, self.entropy_weight, self.decay = candidate_ratio, entropy_weight, decay
        self.entropy_decay, self.p0, self.h0, self.collapse_ratio = entropy_decay, p0, h0, collapse_ratio
        self.prune_quantile, self.prune_reference = prune_quantile, prune_reference
        self.reverify_after, self.norm_window = reverify_after, norm_window
        self.ref_prompt = RunningRank(self.norm_window)  # prompt entropies the probe measured
        self.ref_response = RunningRank(self.norm_window)  # response entropies of trained records
        self._step: int | None = None
        self._counts = dict.fromkeys(_STEP_COUNTERS, 0)
        self._blocked = 0

    # ------------------------------------------------------------------ history
    def _mean(self, total: str, weight: str, ids: np.ndarray, empty: float) -> np.ndarray:
        w = self.stats.get(weight, ids)
        return np.where(w > 0, self.stats.get(total, ids) / np.maximum(w, 1e-12), empty)

    def pass_rate(self, ids: np.ndarray) -> np.ndarray:
        """Recency-weighted pass rate (``p0`` where never observed)."""
        return self._mean("rate_sum", "rate_weight", ids, self.p0)

    def history_entropy(self, ids: np.ndarray) -> np.ndarray:
        """Recency-weighted measured prompt entropy (NaN where never measured)."""
        return self._mean("ent_sum", "ent_weight", ids, np.nan)

    def response_entropy(self, ids: np.ndarray) -> np.ndarray:
        """Recency-weighted entropy of the record's past responses (NaN where none was observed)."""
        return self._mean("resp_sum", "resp_weight", ids, np.nan)

    def normalised_entropy(self, ids: np.ndarray) -> np.ndarray:
        """The utility's entropy term in [0, 1]: the response entropy's rank among recent response entropies where
        the record was trained, else its prompt entropy's rank among recent prompt entropies, else ``h0``."""
        ids = np.asarray(ids, dtype=np.int64)
        h = self.ref_response.rank(self.response_entropy(ids))
        missing = np.isnan(h)
        if missing.any():
            h[missing] = self.ref_prompt.rank(self.history_entropy(ids[missing]))
        return np.where(np.isnan(h), self.h0, h)

    def utility(self, ids: np.ndarray) -> np.ndarray:
        p = self.pass_rate(ids)
        return 4.0 * p * (1.0 - p) + self.entropy_weight * self.normalised_entropy(ids)

    def pruned(self, ids: np.ndarray) -> np.ndarray:
        """Whether each record is pruned (waiting for a verification that clears it)."""
        return self.stats.get("pruned_at", ids) >= 0

    def observe_response_entropy(self, entropies: Mapping[int, float], step: int) -> None:
        """The step's mean response-token entropy per record (the trainer reads it from verl's old-log-prob pass):
        the paper's history entropy. It feeds the utility (ranked among response entropies) only; the collapse
        check of stage 2 keeps comparing prompt entropies with prompt entropies."""
        if not entropies:
            return
        ids = np.fromiter((int(i) for i in entropies), dtype=np.int64, count=len(entropies))
        h = np.array([float(v) for v in entropies.values()])
        if not np.all(np.isfinite(h)) or np.any(h < 0):
            raise ValueError("hive: response entropies must be finite and non-negative")
        rows = self.stats.ensure(ids)
        s, w = self.stats.column("resp_sum"), self.stats.column("resp_weight")
        s[rows] = self.entropy_decay * s[rows] + h
        w[rows] = self.entropy_decay * w[rows] + 1.0
        self.ref_response.add(h)

    # ------------------------------------------------------------------ selection
    def select(self, pool: Any, k: int, step: int) -> list[int]:
        k = check_k(k)
        self._start_step(step)
        self.stats.maybe_prune(pool)
        ids = pool.available_ids()
        k = min(k, len(ids))
        n_cand = min(len(ids), int(np.ceil(self.candidate_ratio * k)))
        u = self.utility(ids)
        pruned_at = self.stats.get("pruned_at", ids)
        blocked = (pruned_at >= 0) & (step - pruned_at < self.reverify_after)
        open_pos, blocked_pos = np.flatnonzero(~blocked), np.flatnonzero(blocked)
        # Rank only as deep as the batch can reach: the candidates plus k fill records below them.
        ranked = open_pos[top_k(u[open_pos], n_cand + k, self._rng)]
        cand, rest = ranked[:n_cand], ranked[n_cand:]
        if len(cand) < n_cand:  # too few eligible: the most useful pruned records are measured again early
            early = blocked_pos[top_k(u[blocked_pos], n_cand - len(cand), self._rng)]
            cand = np.concatenate([cand, early])
            cand = cand[np.argsort(-u[cand], kind="stable")]
        survivors, pruned = self._verify(ids, cand, step)
        order = np.concatenate([survivors, rest, pruned]).astype(np.int64)[:k]
        from_rest = int(np.isin(order, rest).sum())
        n_pruned = int(np.isin(order, pruned).sum())
        self._counts["from_rest"] += from_rest
        self._counts["pruned_selected"] += n_pruned
        self._counts["selected"] += len(order)
        self._blocked = int(blocked.sum())
        self._last.update({"select/n_candidates": float(n_cand),
                           "select/frac_from_rest": from_rest / len(order) if len(order) else 0.0})
        return self._take(pool, ids[order], step)

    def _verify(self, ids: np.ndarray, cand: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2: split candidate positions (kept in utility order) into survivors and pruned; record the
        measurements and the prune state (set on pruned candidates, cleared on survivors)."""
        if self.prompt_entropy is None or not len(cand):
            self._last = {"select/verified": 0.0, "select/frac_pruned": 0.0}
            return cand, cand[:0]
        cand_ids = ids[cand]
        measured = self.prompt_entropy([int(i) for i in cand_ids])
        missing = [int(i) for i in cand_ids if int(i) not in measured]
        if missing:
            raise ValueError(f"hive: prompt_entropy returned no value for ids {missing[:10]}")
        h_now = np.array([float(measured[int(i)]) for i in cand_ids])
        if not np.all(np.isfinite(h_now)) or np.any(h_now < 0):
            raise ValueError("hive: prompt_entropy must return finite, non-negative entropies")
        if self.prune_reference == "candidates":
            # Relative to what the same policy reads on this verification's candidates, so that the policy-wide
            # fall of prompt entropy during training is neither "low" nor a "collapse"; history stores it too.
            typical = float(np.median(h_now))
            h_now = h_now / typical if typical > 0 else np.ones_like(h_now)
        h_hist = self.history_entropy(cand_ids)
        collapsed = ~np.isnan(h_hist) & (h_now < self.collapse_ratio * np.nan_to_num(h_hist))
        if self.prune_reference == "window" and len(self.ref_prompt):
            low = self.ref_prompt.rank(h_now) < self.prune_quantile
        else:  # the candidates are their own reference (always, or at the window rule's first verification)
            own = RunningRank(len(h_now))
            own.add(h_now)
            low = own.rank(h_now) < self.prune_quantile
        prune = collapsed | low
        rows = self.stats.ensure(cand_ids)
        was_pruned = self.stats.column("pruned_at")[rows] >= 0
        self.stats.column("pruned_at")[rows] = np.where(prune, float(step), -1.0)
        s, w = self.stats.column("ent_sum"), self.stats.column("ent_weight")
        s[rows] = self.entropy_decay * s[rows] + h_now
        w[rows] = self.entropy_decay * w[rows] + 1.0
        self.ref_prompt.add(h_now)
        for key, n in (("verified", len(cand)), ("pruned", prune.sum()), ("collapsed", collapsed.sum()),
                       ("low", low.sum()), ("cleared", (was_pruned & ~prune).sum())):
            self._counts[key] += int(n)
        self._last = {"select/verified": float(len(cand)), "select/frac_pruned": float(prune.mean())}
        return cand[~prune], cand[prune]

    def observe(self, results: Mapping[int, tuple[int, int]], step: int) -> None:
        ids, passes, n = results_arrays(results)
        rows = self.stats.ensure(ids)
        s, w = self.stats.column("rate_sum"), self.stats.column("rate_weight")
        s[rows] = self.decay * s[rows] + passes / n
        w[rows] = self.decay * w[rows] + 1.0

    # ------------------------------------------------------------------ metrics and state
    def _start_step(self, step: int) -> None:
        if step != self._step:  # the step's selections (DAPO refills included) are counted together
            self._step = step
            self._counts = dict.fromkeys(_STEP_COUNTERS, 0)

    def metrics(self) -> dict[str, float]:
        """``select/*`` of the last selection plus ``hive/*`` over the step's selections: how many candidates were
        verified, pruned (collapsed / low), cleared by a re-verification, pruned records used to fill a batch,
        unverified fill, and the pruned records waiting (``hive/blocked``, at the last selection)."""
        c = self._counts
        out = dict(self._last)
        out.update({f"hive/{key}": float(v) for key, v in c.items() if key != "selected"})
        out.update({"hive/prune_rate": c["pruned"] / c["verified"] if c["verified"] else 0.0,
                    "hive/collapse_rate": c["collapsed"] / c["verified"] if c["verified"] else 0.0,
                    "hive/frac_pruned_selected": c["pruned_selected"] / c["selected"] if c["selected"] else 0.0,
                    "hive/blocked": float(self._blocked)})
        return out

    def _prompt_scale(self) -> str:
        return "relative" if self.prune_reference == "candidates" else "raw"

    def _extra_state(self) -> dict[str, Any]:
        return {"hive": {"version": HIVE_STATE_VERSION, "prompt_scale": self._prompt_scale(),
                         "ref_prompt": self.ref_prompt.state_dict(), "ref_response": self.ref_response.state_dict()}}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        hive = state.get("hive")
        if hive is None:  # a checkpoint from before the reference windows: they start empty, nothing is pruned
            self.ref_prompt.load_state_dict([])
            self.ref_response.load_state_dict([])
            return
        if hive.get("version") not in _READABLE_VERSIONS:
            raise ValueError(f"hive state has version {hive.get('version')!r}; this code reads {_READABLE_VERSIONS}")
        self.ref_response.load_state_dict(hive["ref_response"])
        saved_scale = hive.get("prompt_scale", "raw")  # version 2 stored raw readings under either rule
        if saved_scale == self._prompt_scale():
            self.ref_prompt.load_state_dict(hive["ref_prompt"])
            return
        # Readings on another scale would be compared with this run's in the collapse rule (a raw 0.4-1.3 nats
        # against readings near 1): the prompt-entropy history restarts instead; pass rates and pruning state stay.
        logger.warning("hive: the checkpoint's prompt entropies are %s, this run stores them %s "
                       "(prune_reference=%s): their history restarts", saved_scale, self._prompt_scale(),
                       self.prune_reference)
        self.ref_prompt.load_state_dict([])
        self.stats.column("ent_sum")[:] = 0.0
        self.stats.column("ent_weight")[:] = 0.0
