"""Benchmark plugin: three transformers that pass every message on unchanged."""

from __future__ import annotations

from typing import Any

from zope.interface import implementer

from gateway.interfaces import IMessageTransformer, ITransformContext
from gateway.message.model import Message
from gateway.transform import hookimpl


@implementer(IMessageTransformer)
class PassThrough:
    """Returns the message it is given."""

    def __init__(self, name: str) -> None:
        self.name = name

    def transform(self, message: Message, context: ITransformContext) -> Message:
        return message


@hookimpl
def jmsgateway_transformers(config: Any) -> list[IMessageTransformer]:
    return [PassThrough("noop-1"), PassThrough("noop-2"), PassThrough("noop-3")]
