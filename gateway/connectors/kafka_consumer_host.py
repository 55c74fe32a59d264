"""A confluent-kafka ``Consumer`` that lives in a child process, so a crash of librdkafka
cannot take the gateway down.

librdkafka 2.16 dies with SIGSEGV in its own main thread when a broker answers a
fetch for a deleted topic with a current-leader tag and no topic id (Tansu does):
``rd_kafka_metadata_update_op`` looks the nameless topic up with ``strcmp(NULL, …)``.
No Python code is on the stack, so nothing in the gateway could catch it.  Each
subscription's consumer therefore runs in a process of its own (forked from a
``forkserver``, which imports confluent-kafka once), and
:class:`ConsumerProcess` stands in for it in the subscription's polling thread:
every method is a synchronous call over a pipe, and the rebalance callbacks
the child's ``consume()`` runs are called back in the parent (they may call the
consumer again).  If the child dies, every call raises :class:`ConsumerCrashed`
naming the signal; the subscription then fails like any other.

Records and partitions cross the pipe as plain values (:class:`Record`,
``(topic, partition, offset)`` tuples); this module owns that conversion and
must not know about subscriptions, offsets bookkeeping or STOMP.
"""

from __future__ import annotations

import multiprocessing
import signal
from typing import Any

from gateway.errors import ConnectorError

CALLBACKS = ("on_assign", "on_revoke", "on_lost")
"""The rebalance callbacks :meth:`ConsumerProcess.subscribe` forwards."""

TOPIC_GONE = frozenset({3, -188, 100})
"""Record errors meaning the subscribed topic is not there (deleted, or not created yet):
UNKNOWN_TOPIC_OR_PART, _UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID.  A consumer that got one does not
notice the topic (re)created before its next metadata refresh (``topic.metadata.refresh.interval.ms``,
5 minutes by default): whoever reads one ends that consumer and subscribes with a new one."""


class ConsumerCrashed(ConnectorError):
    """The child process holding the Kafka consumer ended unexpectedly."""


class ConsumerCallFailed(ConnectorError):
    """The consumer raised in the child; the message is the child's exception text, ``code`` its
    ``KafkaError`` code when it raised a ``KafkaException``."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class RecordError:
    """A record's error (the parts of confluent-kafka's ``KafkaError`` the gateway reads)."""

    __slots__ = ("_code", "_fatal", "_name", "_text")

    def __init__(self, code: int, name: str, text: str, fatal: bool) -> None:
        self._code, self._name, self._text, self._fatal = code, name, text, fatal

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text

    def fatal(self) -> bool:
        return self._fatal


class Record:
    """A consumed record (the parts of confluent-kafka's ``Message`` the gateway reads)."""

    __slots__ = ("_error", "_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(self, topic: str | None, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None, timestamp: tuple[int, int],
                 error: RecordError | None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers = key, value, headers
        self._timestamp, self._error = timestamp, error

    @classmethod
    def of(cls, message: Any) -> Record:
        """The plain copy of confluent-kafka's ``message``."""
        error = message.error()
        return cls(message.topic(), message.partition(), message.offset(), message.key(), message.value(),
                   message.headers(), message.timestamp(),
                   None if error is None else RecordError(error.code(), error.name(), error.str(), error.fatal()))

    def error(self) -> RecordError | None:
        return self._error

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


Partition = tuple[str, int, int]
"""``(topic, partition, offset)``: a ``TopicPartition`` on the pipe."""


def _out(partitions: Any) -> list[Partition]:
    return [(tp.topic, tp.partition, tp.offset) for tp in partitions]


def _in(partitions: list[Partition]) -> list[Any]:
    from confluent_kafka import TopicPartition

    return [TopicPartition(topic, partition, offset) for topic, partition, offset in partitions]


# ------------------------------------------------------------------------- child side

def serve(conn: Any, config: dict[str, Any]) -> None:
    """The child process: build the consumer, answer calls until ``close`` or the parent goes."""
    from confluent_kafka import Consumer

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the gateway decides when its consumers stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        consumer = Consumer(config)
    except Exception as exc:
        conn.send(("error", f"bad consumer settings: {exc}"))
        return
    conn.send(("result", None))

    def forward(name: str) -> Any:
        def callback(_consumer: Any, partitions: Any) -> None:
            conn.send(("callback", name, _out(partitions)))
            _answer(conn, consumer, forward, until_callback_done=True)

        return callback

    _answer(conn, consumer, forward, until_callback_done=False)


def _answer(conn: Any, consumer: Any, forward: Any, *, until_callback_done: bool) -> None:
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            raise SystemExit(0) from None  # the gateway is gone
        if request[0] == "callback-done":
            if until_callback_done:
                return
            continue
        _, method, args = request
        try:
            result = _call(consumer, forward, method, args)
        except Exception as exc:
            conn.send(("error", str(exc), _error_code(exc)))
        else:
            conn.send(("result", result))
        if method == "close":
            raise SystemExit(0)


def _error_code(exc: Exception) -> int | None:
    """The ``KafkaError`` code of a ``KafkaException`` (None for anything else)."""
    from confluent_kafka import KafkaException

    if isinstance(exc, KafkaException) and exc.args:
        code: int = exc.args[0].code()
        return code
    return None


def _call(consumer: Any, forward: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method == "subscribe":
        topics, callbacks = args
        consumer.subscribe(topics, **{name: forward(name) for name in callbacks})
        return None
    if method == "consume":
        return [Record.of(message) for message in consumer.consume(*args)]
    if method == "committed":
        partitions, timeout = args
        return _out(consumer.committed(_in(partitions), timeout=timeout))
    if method == "commit":
        consumer.commit(offsets=_in(args[0]), asynchronous=False)
        return None
    if method in ("assign", "pause", "resume"):
        getattr(consumer, method)(_in(args[0]))
        return None
    if method == "seek":
        consumer.seek(_in([args[0]])[0])
        return None
    if method == "get_watermark_offsets":
        (partition,), timeout, cached = _in([args[0]]), args[1], bool(args[2:] and args[2])
        return consumer.get_watermark_offsets(partition, timeout=timeout, cached=cached)
    if method == "assignment":
        return _out(consumer.assignment())
    if method == "position":
        return _out(consumer.position(_in(args[0])))
    if method == "partitions":
        topic, timeout = args
        found = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        return None if found is None or found.error is not None else sorted(found.partitions)
    if method == "consumer_group_metadata":
        return consumer.consumer_group_metadata()  # bytes in confluent-kafka 2.x
    if method == "close":
        consumer.close()
        return None
    raise ValueError(f"unknown consumer call {method!r}")


# ------------------------------------------------------------------------ parent side

_context: Any = None


def _forkserver() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["confluent_kafka", "gateway.connectors.kafka_consumer_host"])
    return _context


class ConsumerProcess:
    """Stands in for a confluent-kafka ``Consumer`` running in a child process.

    The same methods the subscription uses, with the same arguments; call it
    from one thread only (the subscription's polling thread).

    :param config: the consumer's librdkafka settings.
    :param label: names the consumer in errors (e.g. ``topic orders, group g``).
    """

    def __init__(self, config: dict[str, Any], *, label: str) -> None:
        self.label = label
        self._callbacks: dict[str, Any] = {}
        self._callback_error: BaseException | None = None
        context = _forkserver()
        self._conn, child = context.Pipe()
        self._process = context.Process(target=serve, args=(child, config), daemon=True,
                                        name=f"kafka-consumer {label}")
        self._process.start()
        child.close()
        self._closed = False
        self._result()  # the consumer is built (or its settings are refused)

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        pid: int | None = self._process.pid
        return pid

    def _crashed(self) -> ConsumerCrashed:
        self._process.join(1.0)
        code = self._process.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit status {code}" if code is not None else "no answer"
        return ConsumerCrashed(f"the kafka consumer of {self.label} crashed ({how})")

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):
            raise self._crashed() from None

    def _result(self) -> Any:
        while True:
            try:
                answer = self._conn.recv()
            except (EOFError, OSError):
                raise self._crashed() from None
            kind = answer[0]
            if kind == "result":
                return answer[1]
            if kind == "error":
                raise ConsumerCallFailed(answer[1], answer[2] if len(answer) > 2 else None)
            # ("callback", name, partitions): a rebalance inside the child's consume()
            try:
                self._callbacks[answer[1]](self, _in(answer[2]))
            except Exception as exc:  # raised from consume(), as confluent-kafka does
                self._callback_error = self._callback_error or exc
            self._send(("callback-done",))

    def _call(self, method: str, *args: Any) -> Any:
        if self._closed:
            raise ConnectorError(f"the kafka consumer of {self.label} is closed")
        self._send(("call", method, args))
        result = self._result()
        if self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error
        return result

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self._callbacks = {name: callbacks[name] for name in CALLBACKS if callbacks.get(name)}
        self._call("subscribe", list(topics), list(self._callbacks))

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        result: list[Record] = self._call("consume", num_messages, timeout)
        return result

    def committed(self, partitions: list[Any], timeout: float = -1) -> list[Any]:
        return _in(self._call("committed", _out(partitions), timeout))

    def commit(self, *, offsets: list[Any], asynchronous: bool = False) -> None:
        if asynchronous:
            raise ValueError("only synchronous commits cross the process boundary")
        self._call("commit", _out(offsets))

    def assign(self, partitions: list[Any]) -> None:
        self._call("assign", _out(partitions))

    def pause(self, partitions: list[Any]) -> None:
        self._call("pause", _out(partitions))

    def resume(self, partitions: list[Any]) -> None:
        self._call("resume", _out(partitions))

    def seek(self, partition: Any) -> None:
        self._call("seek", _out([partition])[0])

    def get_watermark_offsets(self, partition: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        low, high = self._call("get_watermark_offsets", _out([partition])[0], timeout, cached)
        return low, high

    def assignment(self) -> list[Any]:
        return _in(self._call("assignment"))

    def position(self, partitions: list[Any]) -> list[Any]:
        return _in(self._call("position", _out(partitions)))

    def partitions(self, topic: str, timeout: float = -1) -> list[int] | None:
        """The partition numbers of ``topic``, or None when the cluster does not list it."""
        result: list[int] | None = self._call("partitions", topic, timeout)
        return result

    def consumer_group_metadata(self) -> Any:
        """The group metadata a transactional producer sends offsets with."""
        return self._call("consumer_group_metadata")

    def close(self) -> None:
        """Close the consumer (leaves the group) and let the child end; a dead child is reaped."""
        if self._closed:
            return
        try:
            if self._process.is_alive():
                self._call("close")
        finally:
            self._closed = True
            self._conn.close()
            self._process.join(5.0)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5.0)
