"""``SyntheticWorld``: the latent truth of a simulation: prompts, a learner, rollouts and the held-out test set.

Why this model: the strategies under comparison differ only in which prompts they spend rollouts on, so the
learner needs exactly the properties that make that choice matter, and nothing more:

- a prompt's solve probability is an item-response curve of the policy's ability
  (``sigmoid(a * (ability[topic] + memo - difficulty))``), so the capability frontier is where it is near 0.5;
- each step draws ``n`` Bernoulli rollouts per prompt (AR3PO: a size per group); groups with all-equal outcomes
  carry no GRPO signal, so only the reward spread of mixed groups (``2*sqrt(q(1-q))``, the mean |advantage| per
  response, 1 at q=0.5) moves the ability, averaged over the batch's responses as GRPO's loss averages over rows
  (zero-variance groups dilute the update; a group of m responses weighs m);
- gains go mostly to the group's topic and partly (``transfer``) to all topics, scaled per topic by
  ``topic_rates`` where a scenario sets them (levels that are separate skills, some harder to learn than others:
  ``prompts.topic_per_component`` makes each difficulty component a topic); per-prompt memorisation
  (``memo``) makes re-training one prompt worth less and does not reach the test set; opt-in, ``repeat_decay``
  discounts a prompt's share of the update by how often it was trained before (diminishing returns), and
  ``repeat_harm`` makes each re-training cost its level (sharpening: the share can go below zero); a random walk
  (``drift_std``) and the learning itself move the frontier, so statistics go stale.

Latent state is kept in arrays indexed by record id (the pool allocates ids densely from 0), so every query is
vectorised. Accuracy on the test set is the expected pass@1 (mean solve probability): exact, no sampling noise.
"""

from __future__ import annotations

import numpy as np

from verl_ext.sim.config import LearnerConfig, PromptsConfig


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def draw_components(rng: np.random.Generator, comps: list[dict[str, float]],
                    size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` draws from a normal mixture ``[{weight, mean, std}, ...]`` and the component each came from."""
    weights = np.array([c["weight"] for c in comps])
    which = rng.choice(len(comps), size=size, p=weights / weights.sum())
    means = np.array([c["mean"] for c in comps])[which]
    stds = np.array([c["std"] for c in comps])[which]
    return means + stds * rng.standard_normal(size), which


def draw_mixture(rng: np.random.Generator, comps: list[dict[str, float]], size: int) -> np.ndarray:
    """``size`` draws from a normal mixture ``[{weight, mean, std}, ...]``."""
    return draw_components(rng, comps, size)[0]


class SyntheticWorld:
    """Latent prompts and learner. ``rng_init`` builds the data; ``rng_roll`` draws rollouts (and the drift under
    ``learner.drift_stream: roll``); ``rng_drift`` the drift under ``own``; ``rng_verify`` the noise of HIVE's
    entropy probe (separate streams, so one consumer cannot shift another)."""

    def __init__(self, prompts: PromptsConfig, learner: LearnerConfig, rng_init: np.random.Generator,
                 rng_roll: np.random.Generator, rng_verify: np.random.Generator, entropy_noise: float = 0.05,
                 rng_drift: np.random.Generator | None = None) -> None:
        if learner.drift_stream == "own" and rng_drift is None:
            raise ValueError("learner.drift_stream 'own' needs rng_drift, the walk's own stream")
        self.learner = learner
        self._drift = rng_drift if learner.drift_stream == "own" else rng_roll
        self.n_topics = prompts.n_topics
        self.ability = np.full(prompts.n_topics, float(learner.init_ability))
        self._roll, self._verify = rng_roll, rng_verify
        self.entropy_noise = entropy_noise
        cap = max(16, prompts.n_train)
        self.difficulty = np.zeros(cap)
        self.topic = np.zeros(cap, dtype=np.int64)
        self.valid = np.zeros(cap, dtype=bool)
        self.memo = np.zeros(cap)
        self.known = np.zeros(cap, dtype=bool)
        self.trained = np.zeros(cap)  # trainings per record (``repeat_decay``)
        self.updates = 0  # policy updates so far (``prompt_entropy_decay``)
        self.seed_difficulty, seed_level = draw_components(rng_init, prompts.difficulty, prompts.n_train)
        self.seed_topic = rng_init.integers(prompts.n_topics, size=prompts.n_train)
        test_mix = prompts.test_difficulty if prompts.test_difficulty is not None else prompts.difficulty
        self.test_difficulty, test_level = draw_components(rng_init, test_mix, prompts.n_test)
        self.test_topic = rng_init.integers(prompts.n_topics, size=prompts.n_test)
        if prompts.topic_per_component:  # levels: the component is the skill (the uniform draws stay consumed)
            self.seed_topic, self.test_topic = seed_level.astype(np.int64), test_level.astype(np.int64)
        self.topic_rates = None if learner.topic_rates is None else np.asarray(learner.topic_rates, dtype=np.float64)

    # ------------------------------------------------------------------ prompts
    def register(self, ids: np.ndarray, difficulty: np.ndarray, topic: np.ndarray, valid: np.ndarray) -> None:
        """Attach latent properties to pool record ids."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        need = int(ids.max()) + 1
        if need > len(self.difficulty):
            size = max(need, 2 * len(self.difficulty))
            for name in ("difficulty", "topic", "valid", "memo", "known", "trained"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:len(old)] = old
                setattr(self, name, new)
        self.difficulty[ids] = difficulty
        self.topic[ids] = topic
        self.valid[ids] = valid
        self.memo[ids] = 0.0
        self.trained[ids] = 0.0
        self.known[ids] = True

    def solve_prob(self, ids: np.ndarray) -> np.ndarray:
        """True pass rate of each record under the current policy (0 for invalid, unsolvable items)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self.known[ids].all():
            raise KeyError(f"records {ids[~self.known[ids]][:10].tolist()} have no latent properties")
        logit = self.ability[self.topic[ids]] + self.memo[ids] - self.difficulty[ids]
        return np.where(self.valid[ids], sigmoid(self.learner.discrimination * logit), 0.0)

    def prompt_entropy(self, ids: list[int]) -> dict[int, float]:
        """HIVE's online probe, simulated: normalised binary entropy of the solve probability plus noise (a
        forward pass measures the policy's uncertainty, which collapses as a prompt becomes solved or hopeless)."""
        arr = np.asarray(ids, dtype=np.int64)
        p = np.clip(self.solve_prob(arr), 1e-12, 1 - 1e-12)
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
        h = np.maximum(h + self.entropy_noise * self._verify.standard_normal(len(arr)), 0.0)
        # the policy-wide fall scales every reading alike (noise included): it moves the scale, not the information
        h = h * (1.0 - self.learner.prompt_entropy_decay) ** self.updates
        return dict(zip(arr.tolist(), h.tolist()))

    # ------------------------------------------------------------------ training
    def rollout(self, ids: np.ndarray, n: int | np.ndarray) -> np.ndarray:
        """Passes out of ``n`` Bernoulli rollouts per record (``n``: one count for all, or one per record)."""
        return self._roll.binomial(n, self.solve_prob(ids))

    def learn(self, ids: np.ndarray, passes: np.ndarray, n: int | np.ndarray, batch_size: int | None = None) -> None:
        """One policy update from the batch's groups, then the drift of the frontier (see module docstring).

        ``n``: the group size, one for all or one per group. Every response weighs the same, as in GRPO's loss
        (docs/ar3po.md "The update is GRPO's, whatever the group sizes"): the gain is ``sum m*spread / sum m``.
        Group weights are ``m / mean(m)``, exactly 1.0 when all sizes are equal, so fixed-n runs are unchanged.
        The gain is then scaled by groups / ``batch_size`` (the nominal batch; default the groups given): a
        strategy that hands out a short batch gets a proportionally smaller update, not a full one for fewer
        rollouts. Memorisation follows each group's own spread, whatever its size."""
        cfg = self.learner
        ids = np.asarray(ids, dtype=np.int64)
        self.updates += 1
        if len(ids):
            sizes = np.broadcast_to(np.asarray(n, dtype=np.float64), ids.shape)
            q = passes / sizes
            spread = 2.0 * np.sqrt(q * (1.0 - q))
            teach = spread if cfg.repeat_decay == 1.0 else spread * cfg.repeat_decay ** self.trained[ids]
            if cfg.repeat_harm:
                teach = teach - cfg.repeat_harm * spread * (self.trained[ids] > 0)
            teach = teach * (sizes / sizes.mean())
            own = np.bincount(self.topic[ids], weights=teach, minlength=self.n_topics)
            gain = (1.0 - cfg.transfer) * self.n_topics * own + cfg.transfer * teach.sum()
            if self.topic_rates is not None:
                gain = gain * self.topic_rates
            self.ability += cfg.learning_rate * gain / max(len(ids), batch_size or 0)
            self.memo[ids] += cfg.item_learning_rate * spread
            self.trained[ids] += 1.0
        if cfg.drift_std > 0:
            self.ability += cfg.drift_std * self._drift.standard_normal(self.n_topics)

    def test_accuracy(self) -> float:
        """Expected pass@1 on the held-out test set."""
        logit = self.ability[self.test_topic] - self.test_difficulty
        return float(sigmoid(self.learner.discrimination * logit).mean())
