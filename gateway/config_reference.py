"""The configuration models as references for people and editors.

:func:`json_schema_text` is the JSON Schema of ``jmsgateway.toml`` (shipped as
``etc/jmsgateway.schema.json``; Taplo / Even Better TOML validate and complete
with it); :func:`key_tables` renders every section's keys, types, defaults and
descriptions as the Markdown tables of ``docs/configuration.md``.  Both are
generated from :class:`gateway.config.GatewayConfig`, and tests check that the
shipped files equal them.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import textwrap
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from gateway.config import GatewayConfig
from gateway.connectors.jms_settings import JmsConnectorOptions
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.connectors.stomp_settings import StompConnectorOptions
from gateway.schema import TomlKind, expected, unwrap

SCHEMA_ID = "https://jmsgateway.example/jmsgateway.schema.json"


def _models(root: Any, found: dict[type[BaseModel], None], seen: set[Any]) -> dict[type[BaseModel], None]:
    """Every model reachable from the annotation ``root`` (its fields' models, in unions, lists and
    tables too), each once, the models it holds before itself."""
    root = unwrap(root)
    for arg in typing.get_args(root):
        _models(arg, found, seen)
    if isinstance(root, type) and issubclass(root, BaseModel) and root not in seen:
        seen.add(root)
        for info in root.model_fields.values():
            _models(info.annotation, found, seen)
        found[root] = None
    return found


def attribute_docstrings(model: type) -> dict[str, str]:
    """The string literal under each annotated attribute of ``model``'s class body and its bases'
    (a subclass's own first), as cleaned by :func:`inspect.cleandoc`."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if cls is object or cls.__module__.startswith(("pydantic", "builtins")):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        statements = body.body if isinstance(body, ast.ClassDef) else []
        for statement, after in itertools.pairwise(statements):
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                    and isinstance(after.value.value, str):
                docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs


_documented = False


def document_models() -> None:
    """Give the configuration models' fields their attribute docstrings as descriptions, for the
    references.  A gateway does not pay for this at every start (reading and parsing the models'
    source took 0.15 s of a 0.7 s start): only what renders a reference calls it, once."""
    global _documented
    if _documented:
        return
    roots: list[Any] = [GatewayConfig, StompConnectorOptions, KafkaSettings, JmsConnectorOptions]
    models: dict[type[BaseModel], None] = {}
    for root in roots:
        _models(root, models, set(models))
    for model in models:
        docs = attribute_docstrings(model)
        for name, info in model.model_fields.items():
            if info.description is None and name in docs:
                info.description = docs[name]
    for model in models:  # (the models a model holds come before it: their schemas are rebuilt first)
        model.model_rebuild(force=True)
    _documented = True


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``jmsgateway.toml``."""
    document_models()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            **GatewayConfig.model_json_schema()}


def json_schema_text() -> str:
    """:func:`json_schema` as the text shipped in ``etc/jmsgateway.schema.json``."""
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _tables() -> list[tuple[str, type[BaseModel]]]:
    fields = GatewayConfig.model_fields
    tables: list[tuple[str, type[BaseModel]]] = []
    for name, info in fields.items():
        if name == "connectors":  # one table per connector kind
            tables += [('[connectors.NAME] with uri = "stomp://…" or "stomp+ssl://…"', StompConnectorOptions),
                       ('[connectors.NAME] with uri = "kafka://…"', KafkaSettings),
                       ('[connectors.NAME] with type = "jms"', JmsConnectorOptions)]
        model = _model_in(info.annotation)
        if model is None:
            continue
        many = typing.get_origin(unwrap(info.annotation)) in (list, tuple)
        tables.append((f"[[{name}]]" if many else f"[{name}]", model))
        for sub_name, sub in model.model_fields.items():
            inner = _model_in(sub.annotation)
            if inner is not None:
                sub_many = typing.get_origin(unwrap(sub.annotation)) in (list, tuple)
                title = (f"{name}[].{sub_name}" + ("[]" if sub_many else "") if many
                         else f"[[{name}.{sub_name}]]" if sub_many else f"[{name}.{sub_name}]")
                tables.append((title, inner))
    return tables


def _model_in(annotation: Any) -> type[BaseModel] | None:
    annotation = unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple, dict) and args:
        return _model_in(args[-1] if origin is dict else args[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True) if info.default is PydanticUndefined else info.default
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, tuple):
        value = list(value)
    return "" if value is None or value == {} or value == [] else f"`{json.dumps(value)}`"


def key_tables() -> str:
    """Every section's keys as Markdown tables (the reference part of docs/configuration.md)."""
    document_models()
    out: list[str] = []
    for title, model in _tables():
        out += [f"#### `{title}`", "", (model.__doc__ or "").strip().splitlines()[0].replace("``", "`"), "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        for name, info in model.model_fields.items():
            if _model_in(info.annotation) is not None and title != "[bridges]" and name not in ("source", "target"):
                continue
            meaning = " ".join((info.description or "").split()).replace("|", "\\|").replace("``", "`")
            kind = next((str(meta) for meta in info.metadata if isinstance(meta, TomlKind)), None) \
                or expected(info.annotation) or _literal(info.annotation) or "see below"
            out.append(f"| `{name}` | {kind} | {_default(info)} | {meaning} |")
        out.append("")
    return "\n".join(out)


def _literal(annotation: Any) -> str:
    annotation = unwrap(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{json.dumps(arg)}`" for arg in typing.get_args(annotation))
    return ""
