"""Configuration and metrics of the ``stomp://`` JMS broker connector.

:class:`StompConnectorOptions` declares a ``[connectors.NAME]`` table with a
``stomp://`` or ``stomp+ssl://`` uri (the options are described in
:mod:`gateway.connectors.stomp_broker`); :class:`StompBrokerSettings` is what
the connector runs with, derived from it (address, port, client id, TLS
files read).  :class:`StompBrokerMetrics` holds the connector's Prometheus
metrics, one set per registry and labelled by connector name.
"""

from __future__ import annotations

import weakref
from typing import Annotated, Any, ClassVar
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import ConfigDict, Field, SkipValidation, field_validator, model_validator

from gateway.errors import ConfigError
from gateway.schema import Bool, Int, KeyProblem, Retries, Section, Str, validate
from gateway.security.redaction import redact_text
from gateway.security.tls import TLS_OPTIONS, ClientTls

DEFAULT_PORTS = {"stomp": 61613, "stomp+ssl": 61614}
NotNegative = Annotated[Int, Field(ge=0)]


class StompConnectorOptions(Section):
    """A JMS broker (ActiveMQ, Artemis, any STOMP broker) over STOMP (times in milliseconds)."""

    __tag__: ClassVar[str] = "stomp"
    uri: Str
    """stomp://[login:passcode@]host[:port] or stomp+ssl://… (TLS)."""
    login: Str | None = None
    """Login sent on CONNECT (default: the uri's)."""
    passcode: Str | None = None
    """Passcode sent on CONNECT (default: the uri's)."""
    host: Str | None = None
    """Virtual host of CONNECT (default: the uri's host)."""
    client_id: Str | None = None
    """Client id of the broker connection (default <gateway id>-<connector name>)."""
    failure_retry_interval: Annotated[Int, Field(ge=1)] = 5000
    """Milliseconds between reconnection attempts."""
    max_retries: Retries = -1
    """Reconnection attempts before giving up; -1 retries forever."""
    send_timeout: Annotated[Int, Field(ge=1)] = 30000
    """Milliseconds a SEND may wait for the broker to be back and confirm it."""
    connect_timeout: Annotated[Int, Field(ge=1)] = 10000
    """Milliseconds for TCP connect plus the CONNECT/CONNECTED handshake."""
    heartbeat: tuple[NotNegative, NotNegative] = (10000, 10000)
    """[send_ms, expect_ms] heart-beats offered to the broker."""
    max_waiting_sends: NotNegative = 10000
    """Sends allowed to wait for a reconnection at once; more fail at once."""
    max_frame_size: Annotated[Int, Field(ge=1024)] = 34603008
    """Largest frame the broker may send, in bytes (33 MiB: [stomp] max_frame_size's 32 MiB and 1 MiB for the
    headers a broker adds to a message it took; keep it above [stomp] max_frame_size). A larger MESSAGE is
    skipped unread and NACKed (up to max_skipped_message_size); any other larger frame closes the connection."""
    max_skipped_message_size: NotNegative = 134217728
    """Largest MESSAGE over max_frame_size that is skipped (its body discarded as it arrives, NACKed) rather
    than closing the connection, in bytes (128 MiB: a stock ActiveMQ carries messages up to 100 MB); 0: none."""
    transformation: Str = "auto"
    """SUBSCRIBE transformation that makes the broker label Map/Object messages: "auto" asks for jms-json
    when the broker takes it (probed once; ActiveMQ needs XStream and Jettison for it), "jms-json" tries it
    always, "": none, which every broker accepts (Map/Object messages then look like empty texts)."""
    amq_msg_type: Bool = True
    """The broker understands amq-msg-type (ActiveMQ)."""
    tls_ca: Str | None = None
    """PEM file of the CA certificates to trust (default: the system's)."""
    tls_cert: Str | None = None
    """Client certificate (PEM) for brokers that ask for one."""
    tls_key: Str | None = None
    """Its private key (PEM), unless in tls_cert."""
    tls_hostname: Str | None = None
    """Name the broker's certificate must carry (default: the uri's host)."""

    @field_validator("uri")
    @classmethod
    def _stomp_uri(cls, uri: str) -> str:
        parts = urlsplit(uri)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"{redact_text(uri)!r} is not stomp://host:port or stomp+ssl://host:port")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError:
            raise ValueError(f"{redact_text(uri)!r} has an invalid port") from None
        return uri

    @field_validator("heartbeat", mode="wrap")
    @classmethod
    def _pair(cls, value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValueError:
            raise ValueError(f"must be [send_ms, expect_ms], not {value!r}") from None

    @model_validator(mode="after")
    def _tls_needs_ssl(self) -> StompConnectorOptions:
        if not self.uri.startswith("stomp+ssl:"):
            for option in TLS_OPTIONS:
                if getattr(self, option) is not None:
                    raise KeyProblem(option, f"TLS options need a stomp+ssl:// uri, not {redact_text(self.uri)!r}")
        return self


class StompBrokerSettings(StompConnectorOptions):
    """What a ``stomp://`` connector runs with: its options, the uri's parts, the TLS files read."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    scheme: str = "stomp"
    address: str = ""
    port: int = DEFAULT_PORTS["stomp"]
    virtual_host: str = ""
    client_id: str = ""
    tls: SkipValidation[ClientTls | None] = None
    """TLS options of a ``stomp+ssl://`` connection (None for ``stomp://``)."""

    @classmethod
    def from_config(cls, name: str, options: dict[str, Any] | StompConnectorOptions, *,
                    gateway_id: str = "jmsgateway", base_dir: str = "") -> StompBrokerSettings:
        """Check ``options``; ConfigError names the key and the problem.  Relative
        TLS file paths are relative to ``base_dir`` (the config file's directory)."""
        if isinstance(options, dict) and not isinstance(options.get("uri"), str):
            raise ConfigError("needs a uri such as 'stomp://127.0.0.1:61613'", key=f"connectors.{name}.uri")
        checked = validate(StompConnectorOptions, options, prefix=f"connectors.{name}")
        parts = urlsplit(checked.uri)
        assert parts.hostname is not None
        tls = None
        if parts.scheme == "stomp+ssl":
            tls = ClientTls.from_options(checked.model_dump(exclude_none=True), hostname=parts.hostname,
                                         base_dir=base_dir, key=lambda option: f"connectors.{name}.{option}")
        derived = {"uri": redact_text(checked.uri),  # shown in logs and pages; the passcode is kept below
                   "scheme": parts.scheme, "address": parts.hostname, "port": parts.port or DEFAULT_PORTS[parts.scheme],
                   "login": checked.login if checked.login is not None else parts.username,
                   "passcode": checked.passcode if checked.passcode is not None else parts.password,
                   "virtual_host": checked.host or parts.hostname, "tls": tls,
                   "client_id": checked.client_id or f"{gateway_id}-{name}"}
        return cls.model_validate({**checked.model_dump(), **derived})


class StompBrokerMetrics:
    """Prometheus metrics of the JMS broker connectors, one set per registry."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, StompBrokerMetrics] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["connector"]
        self.up = Gauge("jmsgateway_jms_broker_up", "1 while connected to the JMS broker", labels, registry=registry)
        self.connects = Counter(
            "jmsgateway_jms_broker_connects", "Successful connections to the JMS broker", labels, registry=registry
        )
        self.connect_failures = Counter(
            "jmsgateway_jms_broker_connect_failures",
            "Failed connection attempts to the JMS broker",
            labels,
            registry=registry,
        )
        self.sends = Counter(
            "jmsgateway_jms_broker_sends",
            "Messages sent to the JMS broker by outcome (ok, failed)",
            [*labels, "outcome"],
            registry=registry,
        )
        self.waiting = Gauge(
            "jmsgateway_jms_broker_waiting_sends",
            "Sends waiting for the JMS broker connection",
            labels,
            registry=registry,
        )
        self.deliveries = Counter(
            "jmsgateway_jms_broker_deliveries", "Messages received from the JMS broker", labels, registry=registry
        )
        self.oversized = Counter(
            "jmsgateway_jms_broker_oversized_messages",
            "Messages from the JMS broker over max_frame_size, skipped unread, by outcome (nacked: the broker's "
            "redelivery policy decides; dropped: acknowledged on STOMP 1.0, or an auto-ack subscription; "
            "unacknowledged)",
            [*labels, "outcome"],
            registry=registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None) -> StompBrokerMetrics:
        """The metrics registered in ``registry`` (a private registry if None)."""
        if registry is None:
            return cls(CollectorRegistry())
        metrics = cls._by_registry.get(registry)
        if metrics is None:
            metrics = cls._by_registry[registry] = cls(registry)
        return metrics
