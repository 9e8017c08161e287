"""Lineage configuration, errors and value conversions (spec §6), shared by the ``lineage*`` modules.

Owns ``LineageConfig`` (the dataclass mirrored by the YAML ``lineage`` block, validated in ``__post_init__``),
``LineageError``, the ``RefreshResult`` a refresh returns, and the checks that turn caller input (record ids,
pass rates, difficulty factors) into the forest's internal form: ints, and values on the reward scale
r = 2p - 1 (NaN: no value).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import NamedTuple

from verl_ext.pool.errors import ConfigError
from verl_ext.pool.estimators import to_pass, to_reward

_METHODS = ("pathagg", "childagg")
_WEIGHTINGS = ("softmax", "linear")
_MODES = ("full", "incremental")
_MAX_DEPTH_CAP = 64


class LineageError(ValueError):
    """A structural error in the lineage (cycle, dangling reference, bad value or state)."""


@dataclass
class LineageConfig:
    """Topology-aware re-estimation settings (spec §6); defaults are the paper's PathAgg.

    - ``method``: ``pathagg`` (children weighted by descendant leaves) or ``childagg`` (plain mean).
    - ``blend``: weight of the node's own value a(u) in ``blend*a(u) + (1-blend)*m_u`` (paper: 0.5).
    - ``tau``/``weighting``: PathAgg weights. ``softmax`` is ``L_c^(1/tau) / sum L^(1/tau)`` (a softmax over
      ``log L / tau``); ``linear`` is ``L_c / sum L`` (tau ignored; equals softmax at tau=1).
    - ``max_depth``: None aggregates the whole subtree. An integer K truncates: a node's refreshed value
      uses only descendants at most K generations below it (K=1: children's own values only). Exactly:
      v_0 = a, v_j(u) = agg(a(u), {v_{j-1}(c)}), refreshed value = v_K.
    - ``cadence``: refresh every N training steps. ``mode``: ``incremental`` (ancestors of what changed) or
      ``full`` (every node); both give the same values.
    - ``max_nodes``: lineage capacity; a new edge that would exceed it is refused and counted.
    """

    enabled: bool = True
    method: str = "pathagg"
    blend: float = 0.5
    tau: float = 1.0
    weighting: str = "softmax"
    max_depth: int | None = None
    cadence: int = 1
    mode: str = "incremental"
    max_nodes: int = 1_000_000

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"lineage.enabled must be a bool, got {self.enabled!r}")
        if self.method not in _METHODS:
            raise ConfigError(f"lineage.method must be one of {_METHODS}, got {self.method!r}")
        if self.weighting not in _WEIGHTINGS:
            raise ConfigError(f"lineage.weighting must be one of {_WEIGHTINGS}, got {self.weighting!r}")
        if self.mode not in _MODES:
            raise ConfigError(f"lineage.mode must be one of {_MODES}, got {self.mode!r}")
        if not (isinstance(self.blend, (int, float)) and 0.0 <= self.blend <= 1.0):
            raise ConfigError(f"lineage.blend must be in [0, 1], got {self.blend!r}")
        if not (isinstance(self.tau, (int, float)) and math.isfinite(self.tau) and self.tau > 0):
            raise ConfigError(f"lineage.tau must be a finite number > 0, got {self.tau!r}")
        md = self.max_depth
        if md is not None and (isinstance(md, bool) or not isinstance(md, int) or not 1 <= md <= _MAX_DEPTH_CAP):
            raise ConfigError(f"lineage.max_depth must be None or an int in [1, {_MAX_DEPTH_CAP}], got {md!r}")
        if isinstance(self.cadence, bool) or not isinstance(self.cadence, int) or self.cadence < 1:
            raise ConfigError(f"lineage.cadence must be an int >= 1, got {self.cadence!r}")
        if isinstance(self.max_nodes, bool) or not isinstance(self.max_nodes, int) or self.max_nodes < 2:
            raise ConfigError(f"lineage.max_nodes must be an int >= 2, got {self.max_nodes!r}")
        self.blend = float(self.blend)
        self.tau = float(self.tau)


class RefreshResult(NamedTuple):
    """What a refresh produced: ``values`` {record id: refreshed pass rate} to write as ranking keys, and stats."""

    values: dict[int, float]
    stats: dict[str, float]


def _check_id(node_id: object) -> int:
    if isinstance(node_id, bool):
        raise LineageError(f"record id must be an int, got {node_id!r}")
    try:
        return operator.index(node_id)  # type: ignore[arg-type]
    except TypeError:
        raise LineageError(f"record id must be an int, got {node_id!r}") from None


def _to_reward(p: float | None) -> float:
    """Pass rate p in [0, 1] (or None: no value) to the reward scale 2p-1 (NaN: no value)."""
    if p is None:
        return math.nan
    p = float(p)
    if not 0.0 <= p <= 1.0:  # also rejects NaN
        raise LineageError(f"pass rate must be in [0, 1] or None, got {p!r}")
    return to_reward(p)


def _to_pass(r: float) -> float | None:
    return None if r != r else to_pass(r)


def _check_difficulty(d: float | None) -> float:
    if d is None:
        return 1.0
    d = float(d)
    if not (math.isfinite(d) and d > 0):
        raise LineageError(f"difficulty factor must be a finite number > 0, got {d!r}")
    return d

