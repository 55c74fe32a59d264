"""The context a transformer receives with each message.

Owns :class:`TransformContext`, the one implementation of
:class:`gateway.interfaces.ITransformContext`.  The caller (STOMP session,
bridge) builds one per message; the chain hands each transformer a copy
carrying that transformer's own options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from zope.interface import implementer

from gateway.interfaces import ITransformContext

Direction = Literal["inbound", "outbound"]
"""``inbound``: STOMP client → target; ``outbound``: target → STOMP subscriber."""

DIRECTIONS: tuple[Direction, ...] = ("inbound", "outbound")

_NO_OPTIONS: Mapping[str, Any] = MappingProxyType({})


@implementer(ITransformContext)
@dataclass(slots=True)
class TransformContext:
    """What a transformer knows about the message it is given.

    Not frozen (a frozen dataclass costs three times as much to build, and
    the chain builds one per transformer per message); each transformer gets
    its own instance, so changing it affects nothing else.

    :ivar direction: ``inbound`` (STOMP → target) or ``outbound`` (target → STOMP).
    :ivar source: where the message comes from: the SEND's destination
        (inbound) or the target-side destination (outbound).
    :ivar target: where it goes: the target-side destination (inbound; the
        SEND's destination if routing has not mapped it yet) or the STOMP
        subscription's destination (outbound).
    :ivar login: the STOMP connection's login, or None.
    :ivar options: the running transformer's own options (the chain fills it
        in; callers leave it empty).
    :ivar transformation: the STOMP ``transformation`` header of the SEND
        (inbound) or SUBSCRIBE (outbound), or None.
    """

    direction: Direction
    source: str
    target: str
    login: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: _NO_OPTIONS)
    transformation: str | None = None

    @property
    def stomp_destination(self) -> str:
        """The STOMP-side destination: what ``[[transform.chain]]`` globs match
        (``source`` inbound, ``target`` outbound)."""
        return self.source if self.direction == "inbound" else self.target

    def with_options(self, options: Mapping[str, Any]) -> TransformContext:
        """This context carrying ``options`` (one per transformer in a chain)."""
        return TransformContext(self.direction, self.source, self.target, self.login, options, self.transformation)
