"""The one configuration mechanism of the project: pydantic v2 dataclasses with a shared policy and error text.

Why pydantic: types, ranges, choices and unknown keys are declared on the fields (``Annotated[int, Field(ge=1)]``,
``Literal[...]``) and checked by a maintained library instead of hand-written ``__post_init__`` code copied
between packages. The classes stay real dataclasses (kwargs construction, nested dicts accepted for nested
configs, ``dataclasses.asdict``/``fields``/``replace``), so callers and checkpoints do not change.

The policy (``CONFIG``): unknown keys are errors, NaN and infinities are never settings, and the scalar aliases
below are strict (a bool is not an integer, a string is not a number), except the ``Lax*`` ones, which accept what
a command line hands over (``"5"`` for a number, ``7`` for a string) but still no bools.

``config_dataclass(name=..., error=...)`` applies the policy and makes construction raise the package's own error
type; ``explain`` turns a pydantic ``ValidationError`` into one message that names the full key
(``heapa.pool.reinsertion.rate must be an integer >= 1 or null, got 0``). Pure Python: no verl, ray or torch.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar

import annotated_types as at
from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter
from pydantic import ValidationError
from pydantic.dataclasses import dataclass as _pydantic_dataclass
from pydantic.fields import FieldInfo

__all__ = ["CONFIG", "Bool", "Float", "Fraction", "Int", "Invalid", "LaxFloat", "LaxInt", "LaxStr", "NonNegInt",
           "PositiveInt", "Str", "config_dataclass", "describe", "explain", "parse"]

CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

Int = StrictInt
Float = StrictFloat  # accepts ints (stored as floats), never bools or strings
Bool = StrictBool
Str = StrictStr
Fraction = Annotated[StrictFloat, Field(ge=0.0, le=1.0)]
PositiveInt = Annotated[StrictInt, Field(ge=1)]
NonNegInt = Annotated[StrictInt, Field(ge=0)]


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise Invalid("")  # no sentence of its own: the message describes the field's type
    return value


def _number_to_str(value: Any) -> Any:
    # Hydra reads `model=7` as an int; a name is still a string.
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


LaxInt = Annotated[int, BeforeValidator(_no_bool)]
LaxFloat = Annotated[float, BeforeValidator(_no_bool)]
LaxStr = Annotated[str, BeforeValidator(_number_to_str)]


class Invalid(ValueError):
    """Raised by a validator: ``why`` completes "<key> ..."; ``field`` names a field when a model-level check
    blames one (``ar3po.k1 must be <= max_per_prompt (16), got 20``)."""

    _UNSET: Any = object()

    def __init__(self, why: str, field: str | None = None, value: Any = _UNSET) -> None:
        super().__init__(why)
        self.why, self.field, self.value = why, field, value


T = TypeVar("T")


def config_dataclass(*, name: str, error: type[Exception] = ValueError,
                     frozen: bool = False) -> Callable[[type[T]], type[T]]:
    """Class decorator: a pydantic dataclass under ``CONFIG`` whose constructor raises ``error`` with a message
    from ``explain`` (keys start with ``name``, e.g. ``pool``), instead of pydantic's own text. ``frozen``: immutable
    and hashable (a value object, e.g. the row format)."""

    def wrap(cls: type[T]) -> type[T]:
        model = _pydantic_dataclass(cls, config=CONFIG, frozen=frozen)
        init = model.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                init(self, *args, **kwargs)
            except ValidationError as err:
                raise error(explain(err, name, model)) from None

        model.__init__ = __init__  # type: ignore[method-assign]
        model.__config_name__ = name  # type: ignore[attr-defined]
        model.__config_error__ = error  # type: ignore[attr-defined]
        return model

    return wrap


def parse(cls: type[T], data: Any, *, name: str | None = None, error: type[Exception] | None = None) -> T:
    """Validate plain data (a dict from YAML/OmegaConf) into ``cls``; errors name keys under ``name``."""
    if isinstance(data, cls):
        return data
    if isinstance(data, Mapping):
        data = dict(data)
    try:
        return TypeAdapter(cls).validate_python(data)
    except ValidationError as err:
        err_type = error or getattr(cls, "__config_error__", ValueError)
        raise err_type(explain(err, name or getattr(cls, "__config_name__", cls.__name__), cls)) from None


def _join(prefix: str, loc: tuple[Any, ...]) -> str:
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key = f"{key}.{part}" if key else str(part)
    return key


def _fields_of(cls: Any) -> dict[str, FieldInfo]:
    return getattr(cls, "__pydantic_fields__", None) or {}


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], len(rest) < len(args)
    return annotation, False


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """The bare type of an annotation and its constraint metadata (``Annotated`` layers and ``Field`` infos)."""
    metas: list[Any] = []
    while typing.get_origin(annotation) is Annotated:
        annotation, *extra = typing.get_args(annotation)
        for m in extra:
            metas.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return annotation, metas


def _field_at(model: Any, loc: tuple[Any, ...]) -> FieldInfo | None:
    """The ``FieldInfo`` that ``loc`` points at, following nested config dataclasses; None when it leaves them."""
    field = None
    for part in loc:
        if field is not None:
            inner, _ = _strip_optional(_unwrap(field.annotation)[0])
            model = inner
        if not isinstance(part, str) or part not in _fields_of(model):
            return None
        field = _fields_of(model)[part]
    return field


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def describe(annotation: Any) -> str:
    """What a value of ``annotation`` must be, in words: ``an integer >= 1 or null``, ``a number in [0, 1]``."""
    annotation, nullable = _strip_optional(annotation)
    base, metas = _unwrap(annotation)
    base, inner_null = _strip_optional(base)
    nullable = nullable or inner_null
    base, more = _unwrap(base)
    metas += more
    origin = typing.get_origin(base) or base
    if origin is Literal:
        text = f"one of {tuple(typing.get_args(base))}"
    elif dataclasses.is_dataclass(base):
        text = f"a mapping of {base.__name__} fields"
    else:
        words = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
                 dict: "a mapping", Mapping: "a mapping"}
        text = words.get(origin, f"a {getattr(origin, '__name__', origin)}")
    lo = hi = None
    for m in metas:  # a later bound refines an earlier one (``Annotated[PositiveInt, Field(ge=2)]``)
        if isinstance(m, (at.Ge, at.Gt)):
            lo = ("[", m.ge) if isinstance(m, at.Ge) else ("(", m.gt)
        elif isinstance(m, (at.Le, at.Lt)):
            hi = (m.le, "]") if isinstance(m, at.Le) else (m.lt, ")")
    if lo and hi:
        text += f" in {lo[0]}{_num(lo[1])}, {_num(hi[0])}{hi[1]}"
    elif lo:
        text += f" {'>=' if lo[0] == '[' else '>'} {_num(lo[1])}"
    elif hi:
        text += f" {'<=' if hi[1] == ']' else '<'} {_num(hi[0])}"
    if any(isinstance(m, at.MinLen) and m.min_length > 0 for m in metas):
        text = "a non-empty " + text.removeprefix("a ").removeprefix("an ")
    return text + (" or null" if nullable else "")


def _one(error: Mapping[str, Any], prefix: str, model: Any) -> str:
    loc = tuple(error["loc"])
    key = _join(prefix, loc)
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, Invalid) and cause.why:
        if cause.field is not None:  # a model-level check: the input is the whole object, show the field's value
            got = "" if cause.value is Invalid._UNSET else f", got {cause.value!r}"
            return f"{_join(key, (cause.field,))} {cause.why}{got}"
        return f"{key} {cause.why}, got {error['input']!r}"
    if cause is not None and not isinstance(cause, Invalid):  # a plain ValueError from a check that writes its own sentence
        return f"{key}: {cause}" if key else str(cause)
    field = _field_at(model, loc)
    if field is not None and error["type"] != "missing":
        annotation = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        return f"{key} must be {describe(annotation)}, got {error['input']!r}"
    return f"{key}: {error['msg']}, got {error['input']!r}"


def explain(err: ValidationError, prefix: str, model: Any) -> str:
    """One message for every problem in ``err``; keys are ``prefix`` + the path pydantic reports. Unknown keys
    are grouped per mapping and listed with the known ones, so a typo shows its correct spelling."""
    unknown: dict[tuple[Any, ...], list[str]] = {}
    lines: list[str] = []
    for error in err.errors():
        if error["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            *parent, name = error["loc"]
            unknown.setdefault(tuple(parent), []).append(str(name))
        else:
            lines.append(_one(error, prefix, model))
    for parent, names in unknown.items():
        holder = model
        if parent:
            field = _field_at(model, parent)
            holder = _strip_optional(_unwrap(field.annotation)[0])[0] if field is not None else None
        known = sorted(_fields_of(holder)) if holder is not None else []
        lines.insert(0, f"{_join(prefix, parent) or 'config'}: unknown keys {sorted(names)}; known: {known}")
    return "; ".join(lines)
