"""Typed reading of the broker's messages in tests.

A sink or a queue hands back :class:`Message`; the tests mostly send text.
:func:`text_of` reads a text body and fails clearly on any other kind.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.message.model import Message, TextMessage


def text_of(message: Message) -> str | None:
    """The body of a :class:`TextMessage` (AssertionError for any other kind)."""
    assert isinstance(message, TextMessage), f"not a TextMessage: {message!r}"
    return message.text


def texts_of(messages: Iterable[Message]) -> list[str]:
    """The bodies of the text messages among ``messages``, in order (AssertionError for one without text)."""
    texts: list[str] = []
    for message in messages:
        if isinstance(message, TextMessage):
            assert message.text is not None, f"a text message without text: {message!r}"
            texts.append(message.text)
    return texts
