"""Name -> ``Strategy`` class registry, so configs select a method by name (``heapa.selection.name=hive``).

Strategies register with ``@register_strategy("name")``. ``build_strategy`` imports every module of this package
on first use, so a new strategy file registers itself without editing any list.

Each strategy's options are typed by its ``__init__`` signature (``candidate_ratio: Annotated[Float, Field(ge=1)]``):
registration derives a pydantic options model from it (``options_model``) and validates every construction against
it before the body runs, so ``heapa.selection.kwargs.candidate_ratio=abc`` fails naming that key.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, create_model

from verl_ext.config_model import CONFIG, explain
from verl_ext.pool.config import PoolConfig
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
        if not getattr(cls.__init__, "__typed_options__", False):
            cls.__init__ = _validating_init(cls)  # type: ignore[method-assign]
        _REGISTRY[name] = cls
        return cls

    return decorate


def options_model(cls: type[Strategy]) -> type[BaseModel]:
    """The pydantic model of ``cls``'s options: one field per constructor parameter, typed by its annotation, plus
    its ``pool_fields``, typed and defaulted as on ``PoolConfig``."""
    model = cls.__dict__.get("__options_model__")
    if model is None:
        init = inspect.unwrap(cls.__init__)
        hints = typing.get_type_hints(init, include_extras=True)
        params = list(inspect.signature(init).parameters.values())[1:]
        fields = {p.name: (hints.get(p.name, Any), ... if p.default is p.empty else p.default) for p in params
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        fields.update(_pool_options(cls.pool_fields))
        model = create_model(f"{cls.__name__}Options", __config__=CONFIG, **fields)
        cls.__options_model__ = model  # type: ignore[attr-defined]
    return model


def _pool_options(names: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    if not names:
        return {}
    hints = typing.get_type_hints(PoolConfig, include_extras=True)
    defaults = {f.name: f.default for f in dataclasses.fields(PoolConfig)}
    return {name: (hints[name], defaults[name]) for name in names}


def split_options(name: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` of strategy ``name`` as (constructor arguments, ``PoolConfig`` fields it sets)."""
    pool_fields = set(get_strategy_class(name).pool_fields)
    return ({k: v for k, v in options.items() if k not in pool_fields},
            {k: v for k, v in options.items() if k in pool_fields})


def _validated(cls: type[Strategy], kwargs: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    model = options_model(cls)
    try:
        checked = model.model_validate(dict(kwargs))
    except ValidationError as err:
        raise ValueError(explain(err, prefix, model)) from None
    return {name: getattr(checked, name) for name in kwargs}


def _validating_init(cls: type[Strategy]) -> Callable[..., None]:
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Strategy, *args: Any, **kwargs: Any) -> None:
        bound = inspect.signature(init).bind(self, *args, **kwargs)
        options = {k: v for k, v in list(bound.arguments.items())[1:]}
        init(self, **_validated(cls, options, cls.name))

    __init__.__typed_options__ = True  # type: ignore[attr-defined]
    return __init__


def validate_options(name: str, kwargs: Mapping[str, Any], prefix: str | None = None) -> dict[str, Any]:
    """``kwargs`` checked against strategy ``name``'s options model and converted to the declared types; a bad
    one raises ``ValueError`` whose key starts with ``prefix`` (default: the strategy's name)."""
    return _validated(get_strategy_class(name), kwargs, name if prefix is None else prefix)


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
