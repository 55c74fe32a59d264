"""The building blocks of the configuration models, and their errors in the project's words.

Every section of ``jmsgateway.toml`` is a pydantic model owned by its layer
(``gateway.config`` composes them).  This module gives them one base
(:class:`Section`: unknown keys refused, TOML types taken as they are, no
string-to-number guessing), the scalar types they use, and :func:`validate`,
which turns pydantic's ``ValidationError`` into one :class:`ConfigError`
naming the file, the dotted key (``connectors.activemq.max_retries``), what
is wrong and, for a misspelt key, the closest known one.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from gateway.errors import ConfigError, did_you_mean

__all__ = ["Bool", "Int", "KeyProblem", "NotNegative", "Positive", "Seconds", "Section", "Str", "Strings", "Table",
           "validate"]

Int = StrictInt
Str = StrictStr
Bool = StrictBool


def _seconds(value: Any, handler: ValidatorFunctionWrapHandler) -> float:
    try:
        return float(handler(value))
    except ValidationError:
        raise ValueError(f"must be a number of seconds >= 0 (0: no limit), not {value!r}") from None


Seconds = Annotated[StrictFloat, Field(ge=0), WrapValidator(_seconds)]
Strings = tuple[StrictStr, ...]
Positive = Annotated[StrictInt, Field(ge=1)]
"""An integer >= 1."""
NotNegative = Annotated[StrictInt, Field(ge=0)]
"""An integer >= 0."""


def _retries(value: Any, handler: ValidatorFunctionWrapHandler) -> int:
    try:
        return int(handler(value))
    except ValidationError as error:
        if error.errors()[0]["type"] != "greater_than_equal":
            raise
        raise ValueError(f"must be -1 (retry forever) or >= 0, got {value!r}") from None


Retries = Annotated[StrictInt, Field(ge=-1), WrapValidator(_retries)]
Table = dict[str, Any]

M = TypeVar("M", bound=BaseModel)


class Section(BaseModel):
    """Base of every configuration model: unknown keys are errors, values are TOML-typed."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    # (the fields' docstrings become descriptions only for the references: gateway.config_reference)


class KeyProblem(ValueError):
    """Raised by a model's validator: ``problem`` with its key below the model (``"on_error"``,
    ``("source", "connector")``), for checks that involve several fields."""

    def __init__(self, key: str | tuple[str | int, ...], problem: str) -> None:
        super().__init__(problem)
        self.key = (key,) if isinstance(key, str) else key
        self.problem = problem


CUSTOM_PROBLEMS: dict[str, Callable[[Any], tuple[str, str]]] = {}
"""Custom pydantic error type -> ``problem(input) -> (key below the location, message)``."""


def validate(model: type[M], raw: Any, *, path: str = "", prefix: str = "") -> M:
    """``raw`` (a TOML table) as ``model``; ConfigError naming ``path`` and ``prefix.key`` otherwise."""
    if isinstance(raw, model):
        return raw
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise config_error(error, model, path=path, prefix=prefix) from None


def config_error(error: ValidationError, model: type[BaseModel], *, path: str = "", prefix: str = "") -> ConfigError:
    """The first problem of ``error`` as a ConfigError with the dotted key."""
    errors = error.errors(include_url=False)
    first = errors[0]
    if first["type"] == "missing":  # a misspelt required key: name the misspelling
        first = next((e for e in errors if e["type"] == "extra_forbidden" and e["loc"][:-1] == first["loc"][:-1]),
                     first)
    loc = tuple(first["loc"])
    cause = (first.get("ctx") or {}).get("error")
    if first["type"] in CUSTOM_PROBLEMS:
        below, problem = CUSTOM_PROBLEMS[first["type"]](first.get("input"))
        cause = KeyProblem(below, problem)
    if isinstance(cause, KeyProblem):
        loc += cause.key
    keys, here = _walk(model, loc[:-1] if first["type"] == "extra_forbidden" else loc)
    key = prefix
    for part in keys:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    if first["type"] == "extra_forbidden" and loc:
        key += f".{loc[-1]}" if key else str(loc[-1])
        return ConfigError(f"unknown key{did_you_mean(str(loc[-1]), _keys_of(here))}", path=path, key=key)
    return ConfigError(cause.problem if isinstance(cause, KeyProblem) else _problem(first, here), path=path, key=key)


_KINDS = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "an array", dict: "a table"}


def kind(value: Any) -> str:
    """What a TOML value is, in words (``an integer``)."""
    return _KINDS.get(type(value), type(value).__name__)


class TomlKind(str):
    """Annotated metadata naming what a key takes in TOML's words, where the Python type
    says less (``Annotated[int, ..., TomlKind("a size ("64MB") or an integer")]``)."""

    __slots__ = ()


def _toml_kind(annotation: Any) -> str | None:
    while True:
        if typing.get_origin(annotation) is Annotated:
            found = [meta for meta in typing.get_args(annotation)[1:] if isinstance(meta, TomlKind)]
            if found:
                return str(found[0])
            annotation = typing.get_args(annotation)[0]
        elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
            members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return None
            annotation = members[0]
        else:
            return None


def expected(annotation: Any, plural: bool = False) -> str | None:
    """What an annotation takes, in TOML's words (``an array of strings``)."""
    if not plural and (kind := _toml_kind(annotation)) is not None:
        return kind
    annotation = unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple) and args:
        inner = expected(args[0], plural=True)
        return "arrays" if plural else f"an array of {inner}" if inner else "an array"
    if origin in (dict, Mapping) or (isinstance(annotation, type) and issubclass(annotation, BaseModel | dict)):
        return "tables" if plural else "a table"
    names = {str: ("a string", "strings"), int: ("an integer", "integers"), float: ("a number", "numbers"),
             bool: ("true or false", "booleans")}
    return names[annotation][plural] if annotation in names else None


_WANTED = {"int": "an integer", "string": "a string", "bool": "true or false", "float": "a number", "list": "an array",
           "tuple": "an array", "dict": "a table", "model": "a table", "model_attributes": "a table"}


def _problem(detail: Any, annotation: Any = None) -> str:
    kind_of, value, context = detail["type"], detail.get("input"), detail.get("ctx") or {}
    base = kind_of.removesuffix("_type").removesuffix("_parsing")
    if base != kind_of and base in _WANTED:
        return f"expected {expected(annotation) or _WANTED[base]}, got {kind(value)} {value!r}"
    if kind_of == "literal_error":
        choices = [c.strip("'") for part in str(context.get("expected", "")).split(" or ") for c in part.split(", ")]
        return f"must be one of {', '.join(choices)}, not {value!r}{did_you_mean(str(value), choices)}"
    if kind_of in ("value_error", "assertion_error"):
        return str(context.get("error", detail["msg"]))
    messages = {"missing": "missing", "string_too_short": "must not be empty",
                "too_short": f"needs at least {context.get('min_length')} item(s)",
                "greater_than_equal": f"must be at least {context.get('ge')}, got {value!r}"}
    return messages.get(kind_of, str(detail["msg"]))


def _walk(model: Any, loc: tuple[Any, ...]) -> tuple[list[str | int], Any]:
    """The key parts a user writes for a pydantic location (union tags and validator steps
    left out) and the annotation found at its end."""
    keys: list[str | int] = []
    current: Any = model
    for part in loc:
        current = unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = current.model_fields
            field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
            keys.append(part)
            current = field.annotation if field is not None else None
            continue
        origin, args = typing.get_origin(current), typing.get_args(current)
        if origin in (typing.Union, types.UnionType):
            tagged = [a for a in args if getattr(unwrap(a), "__tag__", None) == part]
            if tagged:
                current = tagged[0]
                continue
        if isinstance(part, str) and part.startswith("function-"):
            continue
        keys.append(part)
        if origin in (list, tuple) and args:
            current = args[0]
        elif origin in (dict, Mapping) and len(args) == 2:
            current = args[1]
        else:
            current = None
    return keys, unwrap(current)


def _keys_of(annotation: Any) -> list[str]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        names = [name for name, info in annotation.model_fields.items() if not info.exclude]
        return names + [info.alias for info in annotation.model_fields.values() if info.alias]
    return []


def unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return unwrap(members[0])
    return annotation
