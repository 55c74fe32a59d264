"""Issue 39: the Python calls one plain SEND makes between the decoded frame and the broker.

A plain SEND (no receipt, no transaction, no transformer applying, a queue) is handled by the
session through :class:`gateway.stomp.sending.Sender`, :func:`gateway.message.convert.frame_to_message`
and the receipt line before the broker takes it.  Each test pins a call that path no longer makes
(the calls are counted with :func:`sys.setprofile`) and checks that the unusual SEND still gets the
full treatment, so the shortcut changes no outcome."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from types import FrameType
from typing import Any

import pytest

from gateway.message.convert import frame_to_message
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.wire.frame import Frame


@contextmanager
def python_calls() -> Iterator[list[str]]:
    """The gateway's Python functions called inside the block, as ``module:function`` (a dataclass's
    ``__init__`` counts in its class's module)."""
    called: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            module = frame.f_globals.get("__name__", "")
            if module.startswith("gateway."):
                called.append(f"{module}:{code.co_name}")

    sys.setprofile(profile)
    try:
        yield called
    finally:
        sys.setprofile(None)


def _send(headers: dict[str, str], body: bytes = b"hello") -> Frame:
    return Frame("SEND", {"destination": "/queue/a", **headers}, body)


@pytest.mark.parametrize("headers", [{}, {"content-length": "5"}, {"content-type": "text/plain", "content-length": "5"},
                                     {"persistent": "true"}])
def test_a_plain_send_becomes_a_message_without_a_python_call(headers: dict[str, str]) -> None:
    """frame_to_message makes the message's id and timestamp in place and the message without its
    constructor: no ``new_message_id``, ``now_millis``, dataclass ``__init__`` or header helper."""
    frame = _send(headers)
    with python_calls() as called:
        message = frame_to_message(frame)
    assert called == ["gateway.message.convert:frame_to_message"]
    assert message.message_id.startswith("ID:")


def _field_values(message: Message) -> dict[str, Any]:
    return {f.name: getattr(message, f.name) for f in fields(message)}


@pytest.mark.parametrize(("headers", "body", "expected"), [
    ({}, "grüße".encode(), TextMessage(destination="/queue/a", text="grüße")),
    ({"content-length": "3"}, b"a\x00b", BytesMessage(destination="/queue/a", body=b"a\x00b")),
    ({"content-type": "text/plain", "x": "1", "persistent": "true"}, b"t",
     TextMessage(destination="/queue/a", text="t", persistent=True,
                 properties={"content-type": "text/plain", "x": "1"})),
    ({"correlation-id": "c", "reply-to": "/queue/r", "type": "t", "priority": "0", "expires": "9",
      "amq-msg-type": "bytes", "receipt": "r", "transaction": "tx"}, b"b",
     BytesMessage(destination="/queue/a", body=b"b", correlation_id="c", reply_to="/queue/r", type="t", priority=0,
                  expiration=9)),
    ({"content-type": "text/plain; charset=ISO-8859-1"}, "é".encode("latin-1"),
     TextMessage(destination="/queue/a", text="é", properties={"content-type": "text/plain; charset=utf-8"})),
])
def test_every_field_is_set_as_the_constructor_sets_it(headers: dict[str, str], body: bytes,
                                                       expected: Message) -> None:
    """The fields set in place are every field of the class, with the constructor's defaults (a field
    added to the model and not to frame_to_message fails here)."""
    message = frame_to_message(_send(headers, body), now_ms=7)
    assert type(message) is type(expected)
    values = _field_values(message)
    assert values.pop("message_id").startswith("ID:")
    wanted = _field_values(expected)
    del wanted["message_id"]
    wanted["timestamp"] = 7
    assert values == wanted
    copy = message.copy()  # (every slot readable)
    assert _field_values(copy) == _field_values(message)


def test_message_ids_stay_unique_across_both_makers() -> None:
    """The SEND conversion and new_message_id share one count."""
    from gateway.message.model import new_message_id
    ids = [frame_to_message(_send({})).message_id if n % 2 else new_message_id() for n in range(100)]
    assert len(set(ids)) == 100


def _calls(make: Callable[[], object]) -> list[str]:
    with python_calls() as called:
        make()
    return called
