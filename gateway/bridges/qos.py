"""A bridge's quality of service: one strategy class per mode, found in :data:`QOS_STRATEGIES`.

A mode names what a bridge promises (``AT_MOST_ONCE``, ``DUPLICATES_OK``,
``ONCE_AND_ONLY_ONCE``); a strategy is how it keeps the promise with the two
connectors it joins.  :data:`~gateway.bridges.config.QOS_STRATEGIES` lists each mode's strategies in the
order they are tried (:func:`strategies_for`): the first whose :meth:`QualityOfService.build` answers builds
the bridge (an :class:`~gateway.interfaces.IBridge`).  ONCE_AND_ONLY_ONCE has three:
Kafka transactions (:class:`TransactionalCopy`, both sides an
:class:`~gateway.interfaces.IExactlyOnceSource` / ``IExactlyOnceTarget`` of one
cluster), one local transaction of a JMS provider (:class:`LocalTransaction`), and
the duplicate store (:class:`OnceAndOnlyOnce`), which works for any two connectors.

The per-batch strategies (:class:`BatchQuality`) run inside
:class:`~gateway.bridges.bridge.Bridge`: they say in which order a batch is sent,
recorded and acknowledged (asking for each step through a :class:`BatchPort`, never the
bridge's private members), and answer the questions its failure handling asks.
Adding a mode is one class here and one line in the registry,
:data:`gateway.bridges.config.QOS_STRATEGIES` (the ``qos`` option accepts its names).  This module must not know a
connector by name: it asks :mod:`gateway.interfaces`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from gateway.bridges.config import AT_MOST_ONCE, DUPLICATES_OK, ONCE_AND_ONLY_ONCE, QOS_STRATEGIES, WINDOW
from gateway.bridges.dedup import DuplicateStore
from gateway.bridges.outgoing import source_key
from gateway.bridges.transactional_copy import TransactionalCopyBridge
from gateway.interfaces import IBridge, IConnector, IExactlyOnceSource, IExactlyOnceTarget, ILocalTransactionSource
from gateway.message.model import Message

if TYPE_CHECKING:  # pragma: no cover
    from gateway.bridges.config import BridgeConfig
    from gateway.bridges.metrics import BridgeMetrics

DEDUP_DATABASE = "bridges.sqlite"

log = Logger()


@dataclass
class BuildContext:
    """What strategies need to build the bridges of one :class:`~gateway.bridges.service.BridgeService`.

    :ivar chains: the transformer chain of a bridge's config (or None).
    :ivar engine: the per-batch engine a :class:`BatchQuality` runs in
        (:class:`~gateway.bridges.bridge.Bridge`; given by the service, so this module
        does not import the engine that imports it).
    :ivar dedup: the shared duplicate store, made in ``data_dir`` by the first bridge that
        needs it unless one was given.
    """

    reactor: Any
    metrics: BridgeMetrics
    chains: Callable[[BridgeConfig], Any]
    engine: Callable[..., IBridge]
    data_dir: str = "var"
    dedup: DuplicateStore | None = None
    dedup_users: list[BridgeConfig] = field(default_factory=list)
    """The bridges that use :attr:`dedup` (their windows are registered with it)."""

    def duplicate_store(self, config: BridgeConfig) -> DuplicateStore:
        """The shared duplicate store, ``config``'s bridge counted as one of its users."""
        if self.dedup is None:
            self.dedup = DuplicateStore(os.path.join(self.data_dir, DEDUP_DATABASE), self.reactor)
        self.dedup_users.append(config)
        return self.dedup


class QualityOfService:
    """A strategy keeping a mode's promise (see the module docstring)."""

    mode: ClassVar[str]
    needs_held_ids: ClassVar[bool] = False
    """The mode resolves a lost confirmation by asking the target what it holds, so a target
    that can never tell (:func:`gateway.bridges.probe.why_cannot_tell`) is a configuration error."""

    @classmethod
    def build(cls, config: BridgeConfig, source: IConnector, target: IConnector,
              context: BuildContext) -> IBridge | None:
        """The bridge of ``config`` under this strategy, or None when it does not apply."""
        raise NotImplementedError


class BatchPort(Protocol):
    """What a per-batch strategy asks of its bridge (:class:`~gateway.bridges.bridge.Bridge`
    provides it): each call is one step of a batch; the strategy chooses their order."""

    def not_yet_delivered(self, batch: list[Any]) -> Deferred[Any]:
        """(deliveries to send, ``(consumer, tag)`` pairs only to acknowledge): the duplicate
        store's and the batch's repeats and non-persistent messages left out."""

    def send(self, outgoing: list[Message]) -> Deferred[None]:
        """Send until the target confirms (retried; a send in doubt resolved per the strategy)."""

    def record(self, ids: list[str]) -> Deferred[None]:
        """Record source ids as delivered in the duplicate store."""

    def acknowledge(self, tags: list[Any]) -> Deferred[None]:
        """Acknowledge at the source and wait for it."""

    def acknowledge_behind(self, tags: list[Any]) -> None:
        """Acknowledge at the source without holding up the next batch."""

    def send_and_acknowledge_locally(self, outgoing: list[Message], tags: list[Any]) -> Deferred[None]:
        """Send and acknowledge in one local transaction of the source's provider."""


class BatchQuality(QualityOfService):
    """A per-batch strategy of :class:`~gateway.bridges.bridge.Bridge`: it owns the order of a
    batch's steps, which it asks for through a :class:`BatchPort`."""

    acknowledges_first: ClassVar[bool] = False
    """A batch is acknowledged at the source before it is sent: what then cannot be sent is
    lost (counted dropped), and a batch whose acknowledgement failed is not sent."""
    derives_ids: ClassVar[bool] = True
    """Copies get an id derived from the source id (:func:`~gateway.bridges.probe.target_message_id`),
    so the target can be asked whether it holds them."""
    resends_in_doubt: ClassVar[bool] = True
    """A send whose confirmation was lost is sent again only without what the target holds."""
    checks_target_at_start: ClassVar[bool] = False
    """Before consuming, count what the target already holds as delivered."""
    uses_dedup: ClassVar[bool] = False
    """Needs the duplicate store."""
    window: ClassVar[int] = WINDOW
    """Batches in flight at once (the next is sent while the target confirms the previous ones;
    each is settled on its own, in this mode's order)."""
    waits_for_answer: ClassVar[bool] = False
    """A send in doubt, or a start-up check, waits until the target answers what it holds
    (the bridge is ``in_doubt`` meanwhile) instead of going on without the answer."""

    @classmethod
    def accepts(cls, config: BridgeConfig, source: IConnector, target: IConnector) -> bool:
        """Whether this strategy can join ``source`` and ``target``."""
        return True

    @classmethod
    def build(cls, config: BridgeConfig, source: IConnector, target: IConnector,
              context: BuildContext) -> IBridge | None:
        if not cls.accepts(config, source, target):
            return None
        dedup = context.duplicate_store(config) if cls.uses_dedup else None
        return context.engine(config, source, target, clock=context.reactor, metrics=context.metrics, dedup=dedup,
                              chains=context.chains(config), qos=cls())

    def select(self, port: BatchPort, batch: list[Any]) -> Deferred[Any]:
        """(deliveries to send, ``(consumer, tag)`` pairs only to acknowledge) of ``batch``."""
        return succeed((batch, []))

    def forward(self, port: BatchPort, outgoing: Deferred[list[Any]], accepted: list[Any],
                tags: list[Any]) -> None:
        """Chain onto ``outgoing`` (the transformed copies) the send and acknowledgement of a batch,
        in this mode's order, through ``port``."""
        raise NotImplementedError


class AtMostOnce(BatchQuality):
    """Acknowledge at the source, then send: a failure loses the batch, never duplicates it."""

    mode = AT_MOST_ONCE
    acknowledges_first = True
    window = 1  # what is acknowledged and not yet sent is lost on a failure: keep it to one batch

    def forward(self, port: BatchPort, outgoing: Deferred[list[Any]], accepted: list[Any],
                tags: list[Any]) -> None:
        outgoing.addCallback(lambda messages: port.acknowledge(tags).addCallback(lambda _: messages))
        outgoing.addCallback(port.send)


class DuplicatesOk(BatchQuality):
    """Send, wait for the target's confirmation, then acknowledge: a failure may duplicate."""

    mode = DUPLICATES_OK
    derives_ids = False
    resends_in_doubt = False

    def forward(self, port: BatchPort, outgoing: Deferred[list[Any]], accepted: list[Any],
                tags: list[Any]) -> None:
        outgoing.addCallback(port.send)
        outgoing.addCallback(lambda _: port.acknowledge_behind(tags))


class OnceAndOnlyOnce(BatchQuality):
    """DUPLICATES_OK plus the duplicate store: what was delivered is skipped, a confirmed
    batch's ids are recorded before the acknowledgement; persistent messages only.  A send
    whose outcome is in doubt is resolved by asking the target until it answers
    (:mod:`gateway.bridges.in_doubt`), never by sending again blind."""

    mode = ONCE_AND_ONLY_ONCE
    needs_held_ids = True
    checks_target_at_start = True
    uses_dedup = True
    waits_for_answer = True

    def select(self, port: BatchPort, batch: list[Any]) -> Deferred[Any]:
        return port.not_yet_delivered(batch)

    def forward(self, port: BatchPort, outgoing: Deferred[list[Any]], accepted: list[Any],
                tags: list[Any]) -> None:
        ids = [key for key in (source_key(message) for _, message, _ in accepted) if key]
        outgoing.addCallback(port.send)
        outgoing.addCallback(lambda _: port.record(ids))
        outgoing.addCallback(lambda _: port.acknowledge_behind(tags))


class LocalTransaction(OnceAndOnlyOnce):
    """ONCE_AND_ONLY_ONCE within one provider: consume and send in one local transaction of
    an :class:`~gateway.interfaces.ILocalTransactionSource` (no duplicate store)."""

    checks_target_at_start = False
    uses_dedup = False
    window = 1  # the provider's session settles one batch before it hands out the next

    @classmethod
    def accepts(cls, config: BridgeConfig, source: IConnector, target: IConnector) -> bool:
        transacted = ILocalTransactionSource(source, None)
        return transacted is not None and bool(transacted.shares_transactions_with(target))

    def forward(self, port: BatchPort, outgoing: Deferred[list[Any]], accepted: list[Any],
                tags: list[Any]) -> None:
        outgoing.addCallback(lambda messages: port.send_and_acknowledge_locally(messages, tags))


class TransactionalCopy(QualityOfService):
    """ONCE_AND_ONLY_ONCE between two destinations of one log cluster (Kafka): the copies and
    the source positions commit in one transaction
    (:class:`~gateway.bridges.transactional_copy.TransactionalCopyBridge`)."""

    mode = ONCE_AND_ONLY_ONCE
    needs_held_ids = True

    @classmethod
    def build(cls, config: BridgeConfig, source: IConnector, target: IConnector,
              context: BuildContext) -> IBridge | None:
        log_source, log_target = IExactlyOnceSource(source, None), IExactlyOnceTarget(target, None)
        if log_source is None or log_target is None:
            return None
        copy = log_source.transactional_copy(
            config.source.destination, log_target, config.target.destination, bridge=config.name,
            durable_name=config.subscription_name, client_id=config.client_id,
            from_earliest=not config.source.is_topic or config.durable)
        if isinstance(copy, str):
            log.warn("bridge {name}: ONCE_AND_ONLY_ONCE without Kafka transactions ({why}); it uses the duplicate "
                     "store", name=config.name, why=copy)
            return None
        return TransactionalCopyBridge(config, copy, clock=context.reactor, metrics=context.metrics,
                                       chains=context.chains(config))


_resolved: dict[str, tuple[type[QualityOfService], ...]] = {}


def strategies_for(mode: str) -> tuple[type[QualityOfService], ...]:
    """The strategy classes of ``mode``, in the order they are tried (KeyError if unknown)."""
    found = _resolved.get(mode)
    if found is None:
        classes = []
        for path in QOS_STRATEGIES[mode]:
            module, _, name = path.partition(":")
            classes.append(getattr(importlib.import_module(module), name))
        found = _resolved[mode] = tuple(classes)
    return found


def batch_quality(config: BridgeConfig, source: IConnector, target: IConnector) -> BatchQuality:
    """The per-batch strategy a :class:`~gateway.bridges.bridge.Bridge` of ``config`` runs."""
    for strategy in strategies_for(config.qos):
        if issubclass(strategy, BatchQuality) and strategy.accepts(config, source, target):
            return strategy()
    raise ValueError(f"bridge {config.name}: no per-batch strategy for {config.qos}")


def build_bridge(config: BridgeConfig, source: IConnector, target: IConnector, context: BuildContext) -> IBridge:
    """The bridge of ``config``: the first of its mode's strategies that applies."""
    for strategy in strategies_for(config.qos):
        bridge = strategy.build(config, source, target, context)
        if bridge is not None:
            return bridge
    raise ValueError(f"bridge {config.name}: no strategy of {config.qos} joins these connectors")
