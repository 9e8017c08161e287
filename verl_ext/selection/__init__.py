"""Prompt-selection strategies behind one interface (``Strategy``) and a name registry.

Built in: ``boundary`` (HeaPA), ``uniform`` (GRPO baseline), ``prioritized`` (PS), ``hive``, ``mopps``, ``greso``
and ``oracle`` (simulator only). Strategy modules in this package register themselves on discovery, so a new
method is a new file plus ``@register_strategy("name")``. Pure Python + numpy.
"""

from verl_ext.selection.base import Strategy
from verl_ext.selection.registry import (
    UnknownStrategyError,
    available_strategies,
    build_strategy,
    get_strategy_class,
    register_strategy,
)
from verl_ext.selection.boundary import BoundaryStrategy  # noqa: E402  (registers "boundary")
from verl_ext.selection.uniform import UniformStrategy  # noqa: E402  (registers "uniform")

__all__ = [
    "BoundaryStrategy", "Strategy", "UniformStrategy", "UnknownStrategyError", "available_strategies",
    "build_strategy", "get_strategy_class", "register_strategy",
]
