"""The real ActiveMQ JMS client, driven from Python through JPype.

Tests use it to check what a JMS application sees (the JMS message type,
headers and typed properties) and to produce JMS messages of every type.
:class:`JmsClient` wraps one ``javax.jms.Connection`` with one
non-transacted, auto-acknowledging session; received messages come back as
plain :class:`JmsMessage` values, so callers never touch Java objects.

Destinations are written the gateway's way: ``/queue/name``, ``/topic/name``.
Every call blocks: from a Twisted test, run it with ``deferToThread`` and
use one client from one thread at a time (a JMS session is single-threaded).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from tests.support.jvm import ensure_jvm

JmsValue = str | int | float | bool | bytes | None


@dataclass
class JmsMessage:
    """What a JMS consumer received, as plain Python values.

    :ivar jms_type: ``text``, ``bytes``, ``map``, ``object``, ``stream`` or ``message``.
    :ivar type: the JMSType header.
    :ivar reply_to: JMSReplyTo as ``/queue/x`` or ``/topic/y``.
    :ivar body: ``str`` (text), ``bytes`` (bytes, object), ``dict`` (map),
        ``list`` (stream) or ``None``.
    """

    jms_type: str
    message_id: str
    destination: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None
    priority: int = 4
    persistent: bool = False
    expiration: int = 0
    timestamp: int = 0
    redelivered: bool = False
    properties: dict[str, JmsValue] = field(default_factory=dict)
    body: Any = None
    user_id: str | None = None
    """``JMSXUserID`` (ActiveMQ keeps it out of the property names)."""


def _python_value(value: Any) -> Any:
    """A boxed Java value (or String, byte[]) as the matching Python value."""
    import jpype

    if value is None:
        return None
    java_lang = jpype.JPackage("java").lang
    if isinstance(value, java_lang.String):
        return str(value)
    if isinstance(value, java_lang.Boolean):
        return bool(value.booleanValue())
    if isinstance(value, (java_lang.Byte, java_lang.Short, java_lang.Integer, java_lang.Long)):
        return int(value.longValue())
    if isinstance(value, (java_lang.Float, java_lang.Double)):
        return float(value.doubleValue())
    if isinstance(value, java_lang.Character):
        return str(value.toString())
    if isinstance(value, jpype.JArray(jpype.JByte)):
        return bytes(value)
    if isinstance(value, (str, bool, int, float, bytes)):
        return value
    return str(value.toString())


def destination_name(destination: Any) -> str | None:
    """A ``javax.jms.Destination`` as ``/queue/x`` / ``/topic/y`` (temporary ones as ``/temp-queue/...``)."""
    if destination is None:
        return None
    import jpype

    jms = jpype.JPackage("javax").jms
    if isinstance(destination, jms.TemporaryQueue):
        return f"/temp-queue/{destination.getQueueName()}"
    if isinstance(destination, jms.TemporaryTopic):
        return f"/temp-topic/{destination.getTopicName()}"
    if isinstance(destination, jms.Queue):
        return f"/queue/{destination.getQueueName()}"
    if isinstance(destination, jms.Topic):
        return f"/topic/{destination.getTopicName()}"
    return str(destination.toString())


class JmsClient:
    """One JMS connection and session to an ActiveMQ broker over OpenWire.

    :param broker_url: ``tcp://127.0.0.1:PORT`` (``ActiveMQBroker.openwire_url``).
    :param client_id: the connection's client id (needed for durable subscriptions).
    """

    def __init__(self, broker_url: str, *, client_id: str | None = None) -> None:
        ensure_jvm()
        import jpype

        self._jpype = jpype
        self._jms = jpype.JPackage("javax").jms
        factory = jpype.JClass("org.apache.activemq.ActiveMQConnectionFactory")(broker_url)
        # Trust everything for ObjectMessage bodies: this is a test helper.
        factory.setTrustAllPackages(True)
        # Java calls block the calling (main) thread where pytest-timeout cannot reach them: bound the
        # ones that wait for the broker, so a broker that stops answering fails the test, not the run.
        factory.setConnectResponseTimeout(30_000)
        factory.setSendTimeout(30_000)
        factory.setCloseTimeout(15_000)
        self._connection = factory.createConnection()
        if client_id:
            self._connection.setClientID(client_id)
        self._connection.start()
        self._session = self._connection.createSession(False, self._jms.Session.AUTO_ACKNOWLEDGE)
        self._producer = self._session.createProducer(None)
        self._consumers: dict[tuple[str, str | None, str | None], Any] = {}

    # -- destinations --------------------------------------------------------

    def destination(self, name: str) -> Any:
        """``/queue/x`` or ``/topic/y`` as a JMS destination."""
        if name.startswith("/queue/"):
            return self._session.createQueue(name[len("/queue/") :])
        if name.startswith("/topic/"):
            return self._session.createTopic(name[len("/topic/") :])
        raise ValueError(f"destination {name!r} must start with /queue/ or /topic/")

    # -- producing -----------------------------------------------------------

    def send_text(self, destination: str, text: str, **headers: Any) -> str:
        """Send a TextMessage; returns its JMSMessageID.  ``headers`` as :meth:`send`."""
        return self.send(destination, self._session.createTextMessage(text), **headers)

    def send_bytes(self, destination: str, body: bytes, **headers: Any) -> str:
        """Send a BytesMessage; returns its JMSMessageID."""
        message = self._session.createBytesMessage()
        message.writeBytes(self._jpype.JArray(self._jpype.JByte)(body))
        return self.send(destination, message, **headers)

    def send_map(self, destination: str, entries: dict[str, JmsValue], **headers: Any) -> str:
        """Send a MapMessage (values typed like properties); returns its JMSMessageID."""
        message = self._session.createMapMessage()
        for name, value in entries.items():
            self._set_typed(message, "", name, value)
        return self.send(destination, message, **headers)

    def send_object(self, destination: str, value: str, **headers: Any) -> str:
        """Send an ObjectMessage holding a ``java.lang.String``; returns its JMSMessageID."""
        message = self._session.createObjectMessage(self._jpype.JString(value))
        return self.send(destination, message, **headers)

    def send_stream(self, destination: str, items: list[JmsValue], **headers: Any) -> str:
        """Send a StreamMessage; returns its JMSMessageID."""
        message = self._session.createStreamMessage()
        for item in items:
            self._write_stream_item(message, item)
        return self.send(destination, message, **headers)

    def send(
        self,
        destination: str,
        message: Any,
        *,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        jms_type: str | None = None,
        priority: int = 4,
        time_to_live: int = 0,
        persistent: bool = True,
        properties: dict[str, JmsValue] | None = None,
    ) -> str:
        """Set the JMS headers and typed properties on ``message`` and send it.

        ``time_to_live`` is in milliseconds (0 = never expires); the broker
        computes JMSExpiration from it.  Returns the JMSMessageID.
        """
        if correlation_id is not None:
            message.setJMSCorrelationID(correlation_id)
        if reply_to is not None:
            message.setJMSReplyTo(self.destination(reply_to))
        if jms_type is not None:
            message.setJMSType(jms_type)
        for name, value in (properties or {}).items():
            self._set_typed(message, "Property", name, value)
        mode = self._jms.DeliveryMode.PERSISTENT if persistent else self._jms.DeliveryMode.NON_PERSISTENT
        self._producer.send(self.destination(destination), message, mode, priority, time_to_live)
        return str(message.getJMSMessageID())

    def send_texts_in_transactions(self, destination: str, messages: list[tuple[str, dict[str, JmsValue]]],
                                   per_commit: int = 100) -> None:
        """Persistent TextMessages ``(text, properties)`` sent in local transactions of
        ``per_commit`` on a transacted session of their own: each commit returns once the
        broker stored them all (a tenth of the time of one synchronous send per message)."""
        session = self._connection.createSession(True, self._jms.Session.SESSION_TRANSACTED)
        try:
            producer = session.createProducer(self.destination(destination))
            for index, (text, properties) in enumerate(messages, 1):
                message = session.createTextMessage(text)
                for name, value in properties.items():
                    self._set_typed(message, "Property", name, value)
                producer.send(message, self._jms.DeliveryMode.PERSISTENT, 4, 0)
                if index % per_commit == 0:
                    session.commit()
            session.commit()
        finally:
            session.close()

    def _set_typed(self, target: Any, kind: str, name: str, value: JmsValue) -> None:
        """``target.set<Type><kind>(name, value)`` with the Java type matching the Python value."""
        jpype = self._jpype
        if value is None:
            getattr(target, f"setObject{kind}")(name, None)
        elif isinstance(value, bool):
            getattr(target, f"setBoolean{kind}")(name, jpype.JBoolean(value))
        elif isinstance(value, int):
            if -(2**31) <= value < 2**31:
                getattr(target, f"setInt{kind}")(name, jpype.JInt(value))
            else:
                getattr(target, f"setLong{kind}")(name, jpype.JLong(value))
        elif isinstance(value, float):
            getattr(target, f"setDouble{kind}")(name, jpype.JDouble(value))
        elif isinstance(value, bytes):
            if kind:
                raise TypeError(f"JMS properties cannot hold bytes ({name!r})")
            target.setBytes(name, jpype.JArray(jpype.JByte)(value))
        else:
            getattr(target, f"setString{kind}")(name, jpype.JString(str(value)))

    def _write_stream_item(self, message: Any, item: JmsValue) -> None:
        jpype = self._jpype
        if isinstance(item, bool):
            message.writeBoolean(item)
        elif isinstance(item, int):
            message.writeLong(jpype.JLong(item))
        elif isinstance(item, float):
            message.writeDouble(item)
        elif isinstance(item, bytes):
            message.writeBytes(jpype.JArray(jpype.JByte)(item))
        else:
            message.writeString(jpype.JString(str(item)))

    # -- consuming -----------------------------------------------------------

    def subscribe(
        self,
        destination: str,
        *,
        selector: str | None = None,
        durable_name: str | None = None,
    ) -> None:
        """Create the consumer now (a topic subscriber only sees messages sent after this)."""
        self._consumer(destination, selector, durable_name)

    def _consumer(self, destination: str, selector: str | None, durable_name: str | None) -> Any:
        key = (destination, selector, durable_name)
        consumer = self._consumers.get(key)
        if consumer is None:
            target = self.destination(destination)
            java_selector = None if selector is None else self._jpype.JString(selector)
            if durable_name:
                consumer = self._session.createDurableSubscriber(target, durable_name, java_selector, False)
            else:
                typed_selector = self._jpype.JObject(java_selector, "java.lang.String")
                consumer = self._session.createConsumer(target, typed_selector)
            self._consumers[key] = consumer
        return consumer

    def receive(
        self,
        destination: str,
        timeout: float = 5.0,
        *,
        selector: str | None = None,
        durable_name: str | None = None,
    ) -> JmsMessage | None:
        """The next message on ``destination`` within ``timeout`` seconds, or ``None``."""
        consumer = self._consumer(destination, selector, durable_name)
        message = consumer.receive(max(1, int(timeout * 1000)))
        return None if message is None else self.describe(message)

    def receive_all(
        self,
        destination: str,
        count: int,
        timeout: float = 10.0,
        **options: Any,
    ) -> list[JmsMessage]:
        """Up to ``count`` messages, waiting at most ``timeout`` seconds in total."""
        import time

        deadline = time.monotonic() + timeout
        received: list[JmsMessage] = []
        while len(received) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            message = self.receive(destination, remaining, **options)
            if message is None:
                break
            received.append(message)
        return received

    def receive_until_quiet(self, destination: str, quiet: float = 1.0, **options: Any) -> list[JmsMessage]:
        """Everything arriving on ``destination`` until nothing came for ``quiet`` seconds."""
        received: list[JmsMessage] = []
        while (message := self.receive(destination, quiet, **options)) is not None:
            received.append(message)
        return received

    def drain(self, destination: str, quiet: float = 0.2) -> int:
        """Consume and drop everything on ``destination``; returns how many."""
        count = 0
        while self.receive(destination, quiet) is not None:
            count += 1
        return count

    def describe(self, message: Any) -> JmsMessage:
        """A ``javax.jms.Message`` as a :class:`JmsMessage`."""
        jms = self._jms
        body: Any = None
        if isinstance(message, jms.TextMessage):
            kind = "text"
            text = message.getText()
            body = None if text is None else str(text)
        elif isinstance(message, jms.BytesMessage):
            kind = "bytes"
            length = int(message.getBodyLength())
            buffer = self._jpype.JArray(self._jpype.JByte)(length)
            message.readBytes(buffer)
            body = bytes(buffer)
        elif isinstance(message, jms.MapMessage):
            kind = "map"
            body = {}
            names = message.getMapNames()
            while names.hasMoreElements():
                name = str(names.nextElement())
                body[name] = _python_value(message.getObject(name))
        elif isinstance(message, jms.ObjectMessage):
            kind = "object"
            value = message.getObject()
            body = _python_value(value)
        elif isinstance(message, jms.StreamMessage):
            kind = "stream"
            body = []
            message.reset()
            while True:
                try:
                    body.append(_python_value(message.readObject()))
                except jms.MessageEOFException:
                    break
        else:
            kind = "message"
        properties: dict[str, JmsValue] = {}
        names = message.getPropertyNames()
        while names.hasMoreElements():
            name = str(names.nextElement())
            properties[name] = _python_value(message.getObjectProperty(name))
        correlation_id = message.getJMSCorrelationID()
        jms_type = message.getJMSType()
        return JmsMessage(
            jms_type=kind,
            message_id=str(message.getJMSMessageID()),
            destination=destination_name(message.getJMSDestination()),
            correlation_id=None if correlation_id is None else str(correlation_id),
            reply_to=destination_name(message.getJMSReplyTo()),
            type=None if jms_type is None else str(jms_type),
            priority=int(message.getJMSPriority()),
            persistent=int(message.getJMSDeliveryMode()) == int(jms.DeliveryMode.PERSISTENT),
            expiration=int(message.getJMSExpiration()),
            timestamp=int(message.getJMSTimestamp()),
            redelivered=bool(message.getJMSRedelivered()),
            properties=properties,
            body=body,
            user_id=None if message.getStringProperty("JMSXUserID") is None
            else str(message.getStringProperty("JMSXUserID")),
        )

    # -- lifecycle -----------------------------------------------------------

    def unsubscribe(self, durable_name: str) -> None:
        """Delete a durable subscription of this client id (close its consumer first)."""
        for key in [key for key in self._consumers if key[2] == durable_name]:
            self._consumers.pop(key).close()
        self._session.unsubscribe(durable_name)

    def close(self) -> None:
        """Close the connection (and with it the session and consumers)."""
        with contextlib.suppress(Exception):  # closing a dead connection
            self._connection.close()

    def __enter__(self) -> JmsClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
