"""Lineage configuration, errors and value conversions (spec §6), shared by the ``lineage*`` modules.

Owns ``LineageConfig`` (the dataclass mirrored by the YAML ``lineage`` block, its fields checked by pydantic
through ``verl_ext.config_model``),
``LineageError``, the ``RefreshResult`` a refresh returns, and the checks that turn caller input (record ids,
pass rates, difficulty factors) into the forest's internal form: ints, and values on the reward scale
r = 2p - 1 (NaN: no value).
"""

from __future__ import annotations

import math
import operator
from typing import Annotated, Literal, NamedTuple

from pydantic import Field

from verl_ext.config_model import Bool, Float, Fraction, PositiveInt, config_dataclass
from verl_ext.pool.errors import ConfigError
from verl_ext.pool.estimators import to_pass, to_reward

_METHODS = ("pathagg", "childagg")
_WEIGHTINGS = ("softmax", "linear")
_MODES = ("full", "incremental")
_MAX_DEPTH_CAP = 64


class LineageError(ValueError):
    """A structural error in the lineage (cycle, dangling reference, bad value or state)."""


@config_dataclass(name="lineage", error=ConfigError)
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

    enabled: Bool = True
    method: Literal[_METHODS] = "pathagg"
    blend: Fraction = 0.5
    tau: Annotated[Float, Field(gt=0.0)] = 1.0
    weighting: Literal[_WEIGHTINGS] = "softmax"
    max_depth: Annotated[PositiveInt, Field(le=_MAX_DEPTH_CAP)] | None = None
    cadence: PositiveInt = 1
    mode: Literal[_MODES] = "incremental"
    max_nodes: Annotated[PositiveInt, Field(ge=2)] = 1_000_000


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

