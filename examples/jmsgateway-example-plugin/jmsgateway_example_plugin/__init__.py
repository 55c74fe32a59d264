"""An example third-party jmsgateway plugin: the ``uppercase`` transformer.

Found by jmsgateway through the entry point ``example`` in group
``jmsgateway`` (setup.cfg), registered through the ``jmsgateway_transformers``
hook exactly like the built-in and shipped transformers.

``uppercase`` uppercases a TextMessage body (a BytesMessage is decoded as
UTF-8 and stays bytes) and the string properties listed in option
``properties``; other message types pass unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zope.interface import implementer

from gateway.errors import TransformError
from gateway.interfaces import IConfigurableTransformer, ITransformContext
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.transform import hookimpl
from gateway.transform.config import TransformConfig

__version__ = "0.1.0"


@implementer(IConfigurableTransformer)
class UppercaseTransformer:
    """Uppercase text bodies (and chosen string properties)."""

    name = "uppercase"

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = set(options) - {"properties"}
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(sorted(unknown))}; known: properties")
        names = options.get("properties", [])
        if not isinstance(names, Sequence) or isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ValueError("properties must be an array of property names")

    def transform(self, message: Message, context: ITransformContext) -> Message:
        if isinstance(message, TextMessage) and message.text is not None:
            message.text = message.text.upper()
        elif isinstance(message, BytesMessage):
            try:
                message.body = message.body.decode("utf-8").upper().encode("utf-8")
            except UnicodeDecodeError:
                raise TransformError("uppercase needs a UTF-8 body") from None
        for name in context.options.get("properties", ()):
            value = message.properties.get(name)
            if isinstance(value, str):
                message.properties[name] = value.upper()
        return message


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> list[IConfigurableTransformer]:
    """Register ``uppercase``."""
    return [UppercaseTransformer()]
