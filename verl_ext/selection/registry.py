"""Name -> ``Strategy`` class registry, so configs select a method by name (``heapa.selection.name=hive``).

Strategies register with ``@register_strategy("name")``. ``build_strategy`` imports every module of this package
on first use, so a new strategy file registers itself without editing any list.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any, TypeVar

from verl_ext.selection.base import Strategy

_REGISTRY: dict[str, type[Strategy]] = {}
_SKIP_MODULES = {"base", "registry"}
_discovered = False

S = TypeVar("S", bound=type[Strategy])


class UnknownStrategyError(KeyError):
    """A strategy name nobody registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown strategy"


def register_strategy(name: str) -> Callable[[S], S]:
    """Class decorator: register a ``Strategy`` subclass under ``name`` and set its ``name`` attribute."""

    def decorate(cls: S) -> S:
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise TypeError(f"register_strategy({name!r}) decorates Strategy subclasses, got {cls!r}")
        existing = _REGISTRY.get(name)
        # Re-registering the same class (a module imported twice under one name) is harmless; a second class is not.
        if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"strategy name {name!r} is already registered by {existing.__module__}."
                             f"{existing.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _discover() -> None:
    """Import every module of this package once, so their ``@register_strategy`` decorators run."""
    global _discovered
    if _discovered:
        return
    package = importlib.import_module("verl_ext.selection")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _SKIP_MODULES and not info.name.startswith("_"):
            importlib.import_module(f"verl_ext.selection.{info.name}")
    _discovered = True


def available_strategies() -> list[str]:
    """Sorted names of all registered strategies."""
    _discover()
    return sorted(_REGISTRY)


def get_strategy_class(name: str) -> type[Strategy]:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownStrategyError(
            f"unknown selection strategy {name!r}; known: {', '.join(sorted(_REGISTRY)) or '(none)'}"
        ) from None


def build_strategy(name: str, **kwargs: Any) -> Strategy:
    """Instantiate the strategy registered as ``name``; bad keyword arguments raise ``ValueError`` naming it."""
    cls = get_strategy_class(name)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        raise ValueError(f"strategy {name!r} does not accept arguments {sorted(kwargs)}: {err}") from None
    return cls(**kwargs)
