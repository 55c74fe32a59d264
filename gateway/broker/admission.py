"""Admission to the embedded broker: which sends its memory and destination limits let in, and
which senders wait (docs/paging.md).

Owns the memory account (:class:`MemoryUsage`), the per-destination policies, the bytes on their
way into queues (:attr:`Admission.arriving`) or to the store (:attr:`Admission.writing`), the
senders held (a BLOCK destination's own :class:`Congestion`, everyone else's while the store is
behind) and the once-per-episode "full" log lines.
"""

from __future__ import annotations

from weakref import WeakValueDictionary

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger

from gateway.broker.destinations import Destinations, destination_kind
from gateway.broker.limits import (
    BLOCK,
    DROP,
    FAIL,
    PAGE,
    DestinationPolicies,
    DestinationPolicy,
    MemoryUsage,
    default_memory_limit,
    message_size,
)
from gateway.broker.metrics import BrokerMetrics
from gateway.broker.queue import MessageQueue
from gateway.broker.settings import BrokerSettings
from gateway.errors import DestinationFull, GatewayError
from gateway.flow import Congestion
from gateway.message.model import Message

Batch = dict[MessageQueue | None, int]
"""Bytes a transaction admitted before the message judged now, per queue (None: in all)."""


class Admission:
    """The limits of one embedded broker and the senders they hold."""

    log = Logger()

    def __init__(self, settings: BrokerSettings, metrics: BrokerMetrics, destinations: Destinations) -> None:
        self.metrics = metrics
        self.destinations = destinations
        limit = settings.memory_limit
        self.memory = MemoryUsage(default_memory_limit() if limit is None else limit)  # (0: no limit)
        self.memory.on_release = self.room_made
        self.policies = DestinationPolicies(settings.destinations)
        self.congestions: WeakValueDictionary[str, Congestion] = WeakValueDictionary()
        """Senders of each BLOCK destination, while anyone holds them (the destination map's cache of
        resolved names, a session waiting): a SEND to an invented name under a BLOCK policy leaves
        nothing behind.  Whether one is held follows the names (:attr:`blocked`, :attr:`store_held`),
        so one made again for a name comes paused when it must."""
        self.blocked: set[str] = set()
        """BLOCK destinations whose senders are held until room is made."""
        self._full: set[str] = set()
        """Destinations reported full (logged once per episode)."""
        self.store_congestion = Congestion("embedded broker message store")
        """The senders of every destination but the BLOCK ones, held while the store is behind."""
        self.writing = 0
        """Counted bytes of the messages waiting for the store to write them."""
        self.write_hold = max(1024 * 1024, min(self.memory.limit // 4, 32 * 1024 * 1024))
        """Past this many bytes waiting for the store, senders are held (until half of it)."""
        self.store_held = False
        self.arriving = 0
        """Counted bytes of the messages admitted and not yet in their queues (waiting for the
        store or for earlier messages): they count against the limits as if they were there."""

    @property
    def checking(self) -> bool:
        """Whether sends must be judged at all (policies configured, or memory full)."""
        return bool(self.policies) or self.memory.full

    def policy(self, destination: str) -> DestinationPolicy:
        return self.policies.for_destination(destination)

    # -- limits ------------------------------------------------------------

    def over(self, queue: MessageQueue, size: int, batch: Batch | None = None) -> bool:
        """Whether ``size`` more bytes (after those of ``batch``, admitted earlier in the same
        transaction) would pass ``queue``'s ``max_size`` (counting what it paged out) or the
        broker's ``memory_limit``."""
        return self.over_own(queue, size, batch) or \
            self.memory.used + self.arriving + size + (batch.get(None, 0) if batch else 0) > self.memory.limit

    @staticmethod
    def over_own(queue: MessageQueue, size: int, batch: Batch | None) -> bool:
        """Whether ``queue`` would pass its ``max_size``: what it holds (in memory and paged out),
        what is on the way to it (:attr:`MessageQueue.arriving`: in flight to the store), ``size``."""
        if not queue.max_size:
            return False
        return (queue.memory + queue.paged_size + queue.arriving + size + (batch.get(queue, 0) if batch else 0)
                > queue.max_size)

    def admit(self, message: Message, targets: list[MessageQueue], batch: Batch | None = None) -> Deferred[None] | None:
        """None when ``message`` may go on (PAGE, or room, or BLOCK: taken, senders held);
        a Deferred to answer the send with when its destination's policy is FAIL, or DROP
        and every target is full.  DROP removes the full targets from ``targets`` (a topic's
        subscribers are judged each on its own backlog).
        ``batch`` counts what a transaction admitted before this message."""
        destination = message.destination
        size = 0
        dropped = False
        for queue in list(targets):
            policy = queue.policy
            if policy.full_policy == PAGE:
                continue
            size = size or message_size(message)
            if not self.over(queue, size, batch):
                if batch is not None:
                    batch[queue] = batch.get(queue, 0) + size
                    batch[None] = batch.get(None, 0) + size
                continue
            if self.over_own(queue, size, batch):
                limit = f"max_size {queue.max_size} bytes"
            else:
                limit = f"memory_limit {self.memory.limit} bytes"
                self.memory.reached()
            self._report_full(destination, policy, limit)
            if policy.full_policy == BLOCK:
                self._block(destination)
                return None
            if policy.full_policy == DROP:
                # (only this backlog's copy: a topic's other subscribers still get it)
                self.metrics.dropped.inc()
                targets.remove(queue)
                dropped = True
                continue
            self.metrics.refused_full.inc()
            return fail(DestinationFull(
                f"{destination} is full: its queued messages reached {limit} (full_policy FAIL); "
                "the message was not stored"
            ))
        if dropped:
            return None if targets else succeed(None)
        if destination in self._full:
            self._full.discard(destination)
            self.log.info("{destination} has room again: sends are accepted", destination=destination)
        return None

    def _report_full(self, destination: str, policy: DestinationPolicy, limit: str) -> None:
        if destination in self._full:
            return
        self._full.add(destination)
        action = {BLOCK: "its senders are held until consumers make room", FAIL: "sends are refused",
                  DROP: "sends are discarded"}[policy.full_policy]
        self.log.warn("{destination} reached its {limit}: {action} (full_policy {policy})",
                      destination=destination, limit=limit, action=action, policy=policy.full_policy)

    # -- held senders --------------------------------------------------------

    def congestion_for(self, destination: str) -> Congestion:
        """The senders of ``destination``: its own for a BLOCK destination, else the senders of
        every destination (held while the store is behind)."""
        if self.policy(destination).full_policy != BLOCK:
            return self.store_congestion
        congestion = self.congestions.get(destination)
        if congestion is None:
            congestion = self.congestions[destination] = Congestion(f"embedded broker destination {destination}")
            if self.store_held or destination in self.blocked:
                congestion.pauseProducing()
        return congestion

    def _block(self, destination: str) -> None:
        self.blocked.add(destination)
        self.congestion_for(destination).pauseProducing()
        self.memory.waiting = True

    def room_made(self) -> None:
        """Memory was freed while BLOCK destinations wait: release those with room now."""
        for destination in list(self.blocked):
            try:
                targets = [self.destinations.queue(destination)] if destination_kind(destination) == "queue" \
                    else self.destinations.topics.get(destination, [])
            except GatewayError:
                targets = []
            if any(self.over(queue, 0) for queue in targets):
                continue
            self.blocked.discard(destination)
            self._full.discard(destination)
            self.log.info("{destination} has room again: its senders are released", destination=destination)
            congestion = self.congestions.get(destination)
            if congestion is not None and not self.store_held:
                congestion.resumeProducing()
        self.memory.waiting = bool(self.blocked)

    def writing_started(self, size: int) -> None:
        """``size`` bytes of messages wait for the store: past :attr:`write_hold`, senders are held
        (a pipelined sender of persistent messages must not outrun the disk without bound)."""
        self.writing += size
        if self.writing > self.write_hold and not self.store_held:
            self.store_held = True
            self.log.debug("{bytes} bytes wait for the message store: holding the senders", bytes=self.writing)
            self.store_congestion.pauseProducing()
            for congestion in self.congestions.values():
                congestion.pauseProducing()

    def writing_ended(self, size: int) -> None:
        self.writing -= size
        if self.store_held and self.writing <= self.write_hold // 2:
            self.store_held = False
            self.store_congestion.resumeProducing()
            for destination, congestion in list(self.congestions.items()):
                if destination not in self.blocked:
                    congestion.resumeProducing()
