"""A small reference model of what the embedded broker guarantees (docs/stomp.md).

The model holds, for every *backlog* (a queue, a durable subscription, a
plain topic subscriber, a dead-letter queue), the copies of messages waiting
there, and for every subscription the copies delivered to it and not yet
acknowledged.  The model-based test (tests/unit/test_broker_model.py) applies
each client action to the model and to the real broker, then checks every
MESSAGE frame the broker wrote with :meth:`Model.delivered` and the state
after the step with :meth:`Model.check_settled`.

The rules it encodes:

- A receipted SEND is in every backlog it was addressed to (a queue, each
  topic subscriber and durable subscription whose selector it matches) until
  acknowledged, expired or dead-lettered; nothing else ever appears.
- An acknowledged copy never comes back; an ``auto`` delivery is acknowledged
  when it is written to the transport.
- A copy delivered and not acknowledged (NACK, ABORT, UNSUBSCRIBE, connection
  lost, restart) comes back once with its count raised by one and
  ``redelivered``; past ``max_redeliveries`` it goes to the dead-letter queue
  ``/queue/DLQ.<name>`` instead, keeping its count.
- Transactions are all or nothing: SENDs appear and ACKs / NACKs apply at a
  successful COMMIT only; a failed COMMIT or an ABORT redelivers what the
  transaction acknowledged (one count) and stores none of its SENDs.  An ACK
  in a transaction is final once committed, even if its subscription closed.
- Order: a subscription gets the best copy of its backlog first: higher
  priority, then the order the backlog received them.
- Flow: a ``client`` subscription holds at most ``prefetch`` unacknowledged
  copies (those acknowledged in an open transaction do not count); a consumer
  whose transport is full gets nothing more; a consumer with room and a
  matching copy waiting is never left without it.
- A restart from the store keeps persistent copies of queues and durable
  subscriptions (what was out for acknowledgement comes back counted) and
  nothing else; so does a crash right after a RECEIPT: the receipt covered
  every SEND the connection sent before it, persistent or not.
- Limits (``limits``: destination -> full policy, with room for
  :attr:`Model.room` messages in each of its backlogs, pending ones only):
  a SEND that finds a backlog full is refused as a whole under FAIL (an
  ERROR, nothing stored, the connection's later frames not handled), not
  copied there under DROP (still receipted), taken under BLOCK (its sender
  is held).  A COMMIT counts its SENDs in order and is refused as a whole
  under FAIL.
- Scheduling (``AMQ_SCHEDULED_DELAY``, ``_PERIOD``, ``_REPEAT``): a
  scheduled SEND (receipted once its job is kept; in a transaction, at the
  COMMIT) reaches its destination as an *occurrence* once due, never
  before, ``1 + repeat`` times ``period`` apart, each carrying
  ``scheduledJobId``; occurrences due together enter in due order (then the
  order the jobs were made), after what waited there.  Jobs survive a
  restart.
- Groups and paging (``group_window``): where the broker's search of the page
  for a message another consumer may take looks at one message a slice (the
  sliced-search machine), a copy behind a waiting copy of a group another
  subscription owns may wait for an ACK (docs/stomp.md, message groups: "one
  deeper than a slice waits for an ACK, as behind ActiveMQ's page-in window"),
  and a worse copy the subscription may take meanwhile (one in memory) passes it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

DLQ_PREFIX = "/queue/DLQ."


class Violation(AssertionError):
    """The broker did something the model forbids."""


@dataclass(frozen=True, slots=True)
class Sent:
    """A message as its producer sent it."""

    body: str
    destination: str
    persistent: bool
    priority: int
    expiration: int  # ms; 0: never
    color: str
    group: str | None = None  # JMSXGroupID
    delay: int = 0  # AMQ_SCHEDULED_DELAY (ms)
    period: int = 0  # AMQ_SCHEDULED_PERIOD (ms)
    repeat: int = 0  # AMQ_SCHEDULED_REPEAT (occurrences after the first)

    @property
    def scheduled(self) -> bool:
        return bool(self.delay or self.period or self.repeat)

    def expired(self, now_ms: int) -> bool:
        return self.expiration > 0 and self.expiration <= now_ms


@dataclass(slots=True)
class Copy:
    """One message in one backlog: its place (``seq``) and redelivery count."""

    sent: Sent
    seq: int
    count: int = 0
    cause: str | None = None  # why it was dead-lettered
    key: str | None = None  # its key in the backlog when not the body (a dead letter: body@origin)

    def better_than(self, other: Copy) -> bool:
        """Whether this copy must be delivered before ``other`` (priority, then arrival)."""
        if self.sent.priority != other.sent.priority:
            return self.sent.priority > other.sent.priority
        return self.seq < other.seq


@dataclass(slots=True)
class Job:
    """A scheduled SEND waiting for its next occurrence."""

    sent: Sent
    due: int  # ms
    seq: int  # (jobs due at the same ms are delivered in the order they were made)
    repeats_left: int
    occurrence: int = 0

    def occurrence_sent(self) -> Sent:
        """What reaches the destination now: the n-th repeat's body is known as ``<body>#<n>``."""
        return replace(self.sent, body=f"{self.sent.body}#{self.occurrence}" if self.occurrence else self.sent.body)


@dataclass(slots=True)
class Backlog:
    """What waits in one queue, durable subscription or topic subscriber."""

    name: str  # the destination the copies were sent to or moved to
    stored: bool  # whether persistent copies survive a restart
    available: dict[str, Copy] = field(default_factory=dict)
    alive: bool = True

    @property
    def dead_letter_queue(self) -> str:
        return DLQ_PREFIX + self.name.split("/", 2)[-1]


@dataclass(slots=True)
class Subscription:
    """A client's subscription as the model sees it."""

    connection: int
    id: str
    destination: str
    backlog: str  # key of its Backlog
    ack: str  # auto, client, client-individual
    prefetch: int
    color: str | None  # selector "color = '<color>'" or None
    durable: str | None = None
    inflight: dict[str, Copy] = field(default_factory=dict)  # ack id -> copy, in delivery order
    open: bool = True
    exclusive: bool = False  # activemq.exclusive:true (queues)

    def matches(self, sent: Sent) -> bool:
        return self.color is None or sent.color == self.color


@dataclass(slots=True)
class Transaction:
    sends: list[Sent] = field(default_factory=list)
    settled: list[tuple[str, Subscription, list[Copy]]] = field(default_factory=list)  # ("ack"|"nack", ...)
    fails: bool = False  # a SEND to a destination that does not exist


class Model:
    """The reference state; every method is one client-visible event."""

    def __init__(self, max_redeliveries: int, limits: dict[str, str] | None = None, room: int = 0,
                 group_window: bool = False) -> None:
        self.max_redeliveries = max_redeliveries
        self.group_window = group_window
        """Whether a copy may wait behind one of a group another subscription owns (see the module)."""
        self.limits = limits or {}
        """Destination -> ``FAIL``, ``DROP`` or ``BLOCK`` (``max_size`` with room for :attr:`room` messages)."""
        self.room = room
        self.backlogs: dict[str, Backlog] = {}
        self.subscriptions: dict[tuple[int, str], Subscription] = {}
        self.transactions: dict[int, Transaction] = {}
        self.durables: dict[str, tuple[str, str | None]] = {}  # key -> (topic, color)
        self.acknowledged: set[tuple[str, str]] = set()  # (backlog, body)
        self._seq = itertools.count()
        self.now_ms = 0
        self.step_start: dict[str, dict[str, Copy]] = {}
        self.step_deliveries: list[tuple[Subscription, Copy]] = []
        self.jobs: list[Job] = []
        """Scheduled SENDs not yet (or not wholly) delivered; they survive restarts (the schedule's file)."""
        self._job_seq = itertools.count()
        self.group_owners: dict[tuple[str, str], tuple[int, str]] = {}
        """(queue backlog, JMSXGroupID) -> the subscription that owns the group (its first delivery)."""

    # -- exclusive consumers and message groups ---------------------------------

    def exclusive_owner(self, backlog: str) -> Subscription | None:
        """The queue's exclusive consumer: the first open exclusive subscription, in subscription order."""
        return next((sub for sub in self.subscriptions.values()
                     if sub.open and sub.exclusive and sub.backlog == backlog), None)

    def held_back(self, sub: Subscription, copy: Copy) -> bool:
        """Whether ``copy`` may wait while ``sub`` has room: the queue has another exclusive consumer,
        or (without one) the copy's group belongs to another open subscription."""
        if not sub.destination.startswith("/queue/"):
            return False
        owner = self.exclusive_owner(sub.backlog)
        if owner is not None:
            return owner is not sub
        if copy.sent.group is None:
            return False
        holder = self.group_owners.get((sub.backlog, copy.sent.group))
        return holder is not None and holder != (sub.connection, sub.id) and holder in self.subscriptions

    def behind_a_held_group(self, sub: Subscription, copy: Copy) -> bool:
        """With :attr:`group_window`: whether a copy before ``copy`` in its backlog waits for
        the owner of its group, another subscription (the page's search may stop there)."""
        if not self.group_window or not sub.destination.startswith("/queue/"):
            return False
        for other in self.backlogs[sub.backlog].available.values():
            if other is copy or other.sent.group is None or not other.better_than(copy):
                continue
            holder = self.group_owners.get((sub.backlog, other.sent.group))
            if holder is not None and holder != (sub.connection, sub.id) and holder in self.subscriptions:
                return True
        return False

    # -- backlogs ------------------------------------------------------------

    def backlog(self, key: str, name: str, stored: bool) -> Backlog:
        backlog = self.backlogs.get(key)
        if backlog is None or not backlog.alive:
            backlog = self.backlogs[key] = Backlog(name, stored)
        return backlog

    def _queue(self, destination: str) -> Backlog:
        return self.backlog(destination, destination, stored=True)

    def _targets(self, sent: Sent) -> list[Backlog]:
        if sent.destination.startswith("/queue/"):
            return [self._queue(sent.destination)]
        targets = []
        for key, (topic, color) in self.durables.items():
            if topic == sent.destination and (color is None or color == sent.color):
                targets.append(self.backlogs[key])
        for sub in self.subscriptions.values():
            if sub.open and sub.durable is None and sub.destination == sent.destination and sub.matches(sent):
                targets.append(self.backlogs[sub.backlog])
        return targets

    def _admitted(self, sent: Sent, batch: dict[int, int] | None = None) -> list[Backlog] | None:
        """The backlogs ``sent`` enters; None when its destination's FAIL refuses it.  ``batch``
        counts what a transaction admitted before it (by backlog)."""
        targets = self._targets(sent)
        policy = self.limits.get(sent.destination)
        if policy is None:
            return targets
        kept = []
        for backlog in targets:
            pending = len(backlog.available) + (batch.get(id(backlog), 0) if batch is not None else 0)
            if pending >= self.room and policy != "BLOCK":
                if policy == "FAIL":
                    return None
                continue  # DROP: not this backlog
            kept.append(backlog)
        return kept

    def _publish(self, sent: Sent, targets: list[Backlog] | None = None) -> bool:
        """``sent`` enters its backlogs; False when FAIL refused it."""
        if targets is None:
            targets = self._admitted(sent)
            if targets is None:
                return False
        if sent.expired(self.now_ms):
            return True
        for backlog in targets:
            backlog.available[sent.body] = Copy(sent, next(self._seq))
        return True

    def _release(self, backlog_key: str, copy: Copy, dlq_seq: int | None = None) -> None:
        """A delivery failed: back to its backlog counted, or to the dead-letter queue."""
        backlog = self.backlogs[backlog_key]
        copy.count += 1
        if copy.sent.expired(self.now_ms):
            return
        if copy.count > self.max_redeliveries and not backlog.name.startswith(DLQ_PREFIX):
            dead = self._queue(backlog.dead_letter_queue)
            seq = dlq_seq if dlq_seq is not None else next(self._seq)
            # (a topic message's copies of several subscriptions may all end there)
            key = f"{copy.sent.body}@{backlog_key}"
            dead.available[key] = Copy(
                copy.sent, seq, copy.count, f"delivery failed {copy.count} times (limit {self.max_redeliveries})", key
            )
            return
        if backlog.alive:  # (under its own key: a dead-letter queue may hold copies of one body from several origins)
            backlog.available[copy.key or copy.sent.body] = copy

    # -- client actions --------------------------------------------------------

    def send(self, connection: int, sent: Sent, transactional: bool) -> bool:
        """False when the SEND is refused (FAIL): ERROR, and the connection's later frames are not handled."""
        if transactional:
            self.transactions[connection].sends.append(sent)
            return True
        if sent.scheduled:
            self._schedule(sent)
            return True
        return self._publish(sent)

    def _schedule(self, sent: Sent) -> None:
        """A scheduled SEND becomes a job: nothing reaches its destination before it is due."""
        self.jobs.append(Job(sent, self.now_ms + sent.delay, next(self._job_seq), sent.repeat))

    def send_failing(self, connection: int) -> None:
        """A SEND in a transaction to a destination that does not exist."""
        self.transactions[connection].fails = True

    def subscribe(self, sub: Subscription) -> None:
        if sub.durable is not None:
            key = sub.backlog
            if key not in self.durables:
                self.durables[key] = (sub.destination, sub.color)
                self.backlog(key, sub.destination, stored=True)
        elif sub.destination.startswith("/topic/"):
            self.backlog(sub.backlog, sub.destination, stored=False)
        else:
            self._queue(sub.destination)
        self.subscriptions[(sub.connection, sub.id)] = sub

    def ack(self, sub: Subscription, ack_id: str, transactional: bool, nack: bool = False) -> list[Copy]:
        """ACK or NACK ``ack_id`` (and, in ``client`` mode, all delivered before it)."""
        ids = list(sub.inflight)
        chosen = ids[: ids.index(ack_id) + 1] if sub.ack == "client" else [ack_id]
        copies = [sub.inflight.pop(i) for i in chosen]
        if transactional:
            self.transactions[sub.connection].settled.append(("nack" if nack else "ack", sub, copies))
        else:
            self._settle("nack" if nack else "ack", sub, copies)
        return copies

    def _settle(self, what: str, sub: Subscription, copies: list[Copy]) -> None:
        dlq_seq = next(self._seq)
        for copy in copies:
            if what == "ack":
                self.acknowledged.add((sub.backlog, copy.sent.body))
            else:
                self._release(sub.backlog, copy, dlq_seq)

    def begin(self, connection: int) -> None:
        self.transactions[connection] = Transaction()

    def commit(self, connection: int) -> bool:
        """Whether the COMMIT succeeds; a failed one rolls back (the connection then ends)."""
        transaction = self.transactions.pop(connection)
        batch: dict[int, int] = {}
        plan: list[tuple[Sent, list[Backlog]]] = []
        for sent in transaction.sends:
            if sent.scheduled:  # (made a job at the COMMIT, once the others are in)
                plan.append((sent, []))
                continue
            targets = self._admitted(sent, batch)
            if targets is None:
                transaction.fails = True
                break
            for backlog in targets:
                batch[id(backlog)] = batch.get(id(backlog), 0) + 1
            plan.append((sent, targets))
        if transaction.fails:
            self._rollback(transaction)
            return False
        for sent, targets in plan:
            if not sent.scheduled:
                self._publish(sent, targets)
        for sent, _ in plan:
            if sent.scheduled:
                self._schedule(sent)
        for what, sub, copies in transaction.settled:
            self._settle(what, sub, copies)
        return True

    def abort(self, connection: int) -> None:
        self._rollback(self.transactions.pop(connection))

    def _rollback(self, transaction: Transaction) -> None:
        dlq_seq = next(self._seq)
        for _, sub, copies in transaction.settled:
            for copy in copies:
                self._release(sub.backlog, copy, dlq_seq)

    def unsubscribe(self, sub: Subscription, delete: bool) -> None:
        sub.open = False
        del self.subscriptions[(sub.connection, sub.id)]
        for group in [g for g, holder in self.group_owners.items() if holder == (sub.connection, sub.id)]:
            del self.group_owners[group]  # (the group moves to the next consumer picked)
        dlq_seq = next(self._seq)
        if sub.durable is None and sub.destination.startswith("/topic/"):
            self.backlogs[sub.backlog].alive = False
            self.backlogs[sub.backlog].available.clear()
        for copy in sub.inflight.values():
            self._release(sub.backlog, copy, dlq_seq)
        sub.inflight.clear()
        if delete and sub.durable is not None:
            self.durables.pop(sub.backlog, None)
            backlog = self.backlogs[sub.backlog]
            backlog.alive = False
            backlog.available.clear()

    def connection_lost(self, connection: int) -> None:
        transaction = self.transactions.pop(connection, None)
        if transaction is not None:
            self._rollback(transaction)
        for (owner, _), sub in list(self.subscriptions.items()):
            if owner == connection:
                self.unsubscribe(sub, delete=False)

    def advance(self, now_ms: int) -> None:
        """Time passes: the jobs due by then deliver (in rounds, as the scheduler does: every job
        due, the earliest first, one occurrence each, then again while some are still due), then
        what expired goes."""
        self.now_ms = now_ms
        while True:
            due = sorted((job for job in self.jobs if job.due <= now_ms), key=lambda job: (job.due, job.seq))
            if not due:
                break
            for job in due:
                self._publish(job.occurrence_sent())
                if job.repeats_left:
                    job.due += job.sent.period
                    job.repeats_left -= 1
                    job.occurrence += 1
                else:
                    self.jobs.remove(job)
        for backlog in self.backlogs.values():
            for body in [b for b, c in backlog.available.items() if c.sent.expired(now_ms)]:
                del backlog.available[body]

    def restart(self, connections: list[int]) -> None:
        """The broker stops (a crash: what was out for acknowledgement counts as failed)
        and starts again from its store."""
        inflight: list[tuple[str, Copy]] = []
        for connection in connections:
            transaction = self.transactions.pop(connection, None)
            if transaction is not None:
                inflight += [(sub.backlog, copy) for _, sub, copies in transaction.settled for copy in copies]
        for sub in list(self.subscriptions.values()):
            inflight += [(sub.backlog, copy) for copy in sub.inflight.values()]
            sub.inflight.clear()
            sub.open = False
        self.subscriptions.clear()
        self.group_owners.clear()
        for backlog in self.backlogs.values():
            if not backlog.stored:
                backlog.alive = False
            for body in [b for b, c in backlog.available.items() if not c.sent.persistent or not backlog.stored]:
                del backlog.available[body]
        dlq_seq = next(self._seq)
        for key, copy in inflight:
            backlog = self.backlogs[key]
            if copy.sent.persistent and backlog.stored and backlog.alive:
                self._release(key, copy, dlq_seq)
        for backlog in self.backlogs.values():  # recovery re-numbers in stored order
            backlog.available = dict(sorted(backlog.available.items(), key=lambda item: item[1].seq))

    # -- what the broker wrote -------------------------------------------------

    def begin_step(self) -> None:
        self.step_start = {key: dict(b.available) for key, b in self.backlogs.items() if b.alive}
        self.step_deliveries = []

    def delivered(self, sub: Subscription, ack_id: str | None, headers: dict[str, str], body: str) -> None:
        """Check one MESSAGE frame and record the delivery."""
        backlog = self.backlogs.get(sub.backlog)
        where = f"{body} to subscription {sub.id} of connection {sub.connection} ({sub.destination})"
        if not sub.open:
            raise Violation(f"delivery to a closed subscription: {where}")
        waiting = [key for key, copy in backlog.available.items() if copy.sent.body == body] if backlog else []
        if not waiting:
            if (sub.backlog, body) in self.acknowledged:
                raise Violation(f"acknowledged message came back: {where}")
            raise Violation(f"delivery of a message that is not waiting there: {where}")
        assert backlog is not None
        cause = headers.get("dlqDeliveryFailureCause")
        key = next((key for key in waiting if backlog.available[key].cause == cause), waiting[0])
        copy = backlog.available.pop(key)
        sent = copy.sent
        if not sub.matches(sent):
            raise Violation(f"selector not applied: {where}")
        if sent.expired(self.now_ms):
            raise Violation(f"expired message delivered: {where}")
        redelivered = headers.get("redelivered") == "true"
        if redelivered != (copy.count > 0):
            raise Violation(f"redelivered:{redelivered} but the message failed {copy.count} times: {where}")
        if headers.get("priority") != str(sent.priority) or (headers.get("persistent") == "true") != sent.persistent:
            raise Violation(f"priority or persistence changed: {where}: {headers}")
        if sent.scheduled != ("scheduledJobId" in headers) or any(h.startswith("AMQ_SCHEDULED_") for h in headers):
            raise Violation(f"a scheduled message's occurrence carries scheduledJobId (only it), and no "
                            f"AMQ_SCHEDULED_*: {where}: {headers}")
        if copy.cause is not None and headers.get("dlqDeliveryFailureCause") != copy.cause:
            raise Violation(f"dead-letter cause {headers.get('dlqDeliveryFailureCause')!r}, "
                            f"expected {copy.cause!r}: {where}")
        if sub.destination.startswith("/queue/"):
            owner = self.exclusive_owner(sub.backlog)
            if owner is not None and owner is not sub:
                raise Violation(f"{where}: the queue's exclusive consumer is {owner.id} of connection "
                                f"{owner.connection}")
            if owner is None and sent.group is not None:
                group_key = (sub.backlog, sent.group)
                holder = self.group_owners.get(group_key)
                if holder is not None and holder != (sub.connection, sub.id) and holder in self.subscriptions:
                    raise Violation(f"{where}: group {sent.group} belongs to {holder[1]} of connection {holder[0]}")
                self.group_owners[group_key] = (sub.connection, sub.id)
        self.step_deliveries.append((sub, copy))
        if sub.ack == "auto":
            if len(waiting) == 1:  # (the last copy of that body there)
                self.acknowledged.add((sub.backlog, body))
        else:
            assert ack_id is not None
            sub.inflight[ack_id] = copy

    def check_settled(self, reading: set[int], check_order: bool) -> None:
        """After a step: order of this step's deliveries, prefetch bounds, nothing stuck."""
        if check_order:
            for sub, copy in self.step_deliveries:
                waited = self.step_start.get(sub.backlog, {})
                backlog = self.backlogs[sub.backlog]
                for key, other in backlog.available.items():
                    if (key in waited and sub.matches(other.sent) and not self.held_back(sub, other)
                            and not self.behind_a_held_group(sub, other)  # (it may wait: so it may be passed)
                            and not other.sent.expired(self.now_ms) and other.better_than(copy)):
                        raise Violation(f"{copy.sent.body} delivered to {sub.id} of connection {sub.connection} "
                                        f"before {other.sent.body}, which waited with a better place")
        held = self._held()
        for sub in self.subscriptions.values():
            pending = len(sub.inflight)
            if sub.ack != "auto" and pending > sub.prefetch:
                raise Violation(f"subscription {sub.id} of connection {sub.connection} holds {pending} "
                                f"unacknowledged deliveries, prefetch {sub.prefetch}")
            if sub.connection not in reading or (sub.ack != "auto" and pending >= sub.prefetch):
                continue
            for copy in self.backlogs[sub.backlog].available.values():
                if (sub.matches(copy.sent) and not copy.sent.expired(self.now_ms) and not self.held_back(sub, copy)
                        and not self.behind_a_held_group(sub, copy)):
                    raise Violation(f"{copy.sent.body} waits in {sub.backlog} while subscription {sub.id} of "
                                    f"connection {sub.connection} has room for it (held in transactions: "
                                    f"{held.get((sub.connection, sub.id), 0)})")

    def _held(self) -> dict[tuple[int, str], int]:
        held: dict[tuple[int, str], int] = {}
        for transaction in self.transactions.values():
            for _, sub, copies in transaction.settled:
                held[(sub.connection, sub.id)] = held.get((sub.connection, sub.id), 0) + len(copies)
        return held
