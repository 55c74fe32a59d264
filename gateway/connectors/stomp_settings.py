"""Configuration and metrics of the ``stomp://`` JMS broker connector.

:class:`StompBrokerSettings` checks a ``[connectors.NAME]`` table (the options
are listed in :mod:`gateway.connectors.stomp_broker`) and names the key of
any problem; :class:`StompBrokerMetrics` holds the connector's Prometheus
metrics, one set per registry and labelled by connector name.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.errors import ConfigError, did_you_mean
from gateway.tls import TLS_OPTIONS, ClientTls

DEFAULT_PORTS = {"stomp": 61613, "stomp+ssl": 61614}

_OPTIONS = (
    "uri",
    "login",
    "passcode",
    "host",
    "client_id",
    "failure_retry_interval",
    "max_retries",
    "send_timeout",
    "connect_timeout",
    "heartbeat",
    "max_waiting_sends",
    "transformation",
    "amq_msg_type",
    *TLS_OPTIONS,
)


@dataclass(slots=True, frozen=True)
class StompBrokerSettings:
    """A ``stomp://`` connector's checked configuration (times in milliseconds)."""

    uri: str
    scheme: str
    address: str
    port: int
    login: str | None = None
    passcode: str | None = None
    virtual_host: str = ""
    client_id: str = ""
    failure_retry_interval: int = 5000
    max_retries: int = -1
    send_timeout: int = 30000
    connect_timeout: int = 10000
    heartbeat: tuple[int, int] = (10000, 10000)
    max_waiting_sends: int = 10000
    transformation: str = ""
    amq_msg_type: bool = True
    tls: ClientTls | None = None
    """TLS options of a ``stomp+ssl://`` connection (None for ``stomp://``)."""

    @classmethod
    def from_config(cls, name: str, options: dict[str, Any], *, gateway_id: str = "jmsgateway",
                    base_dir: str = "") -> StompBrokerSettings:
        """Check ``options``; ConfigError names the key and the problem.  Relative
        TLS file paths are relative to ``base_dir`` (the config file's directory)."""

        def key(option: str) -> str:
            return f"connectors.{name}.{option}"

        for option in options:
            if option not in _OPTIONS:
                raise ConfigError(f"unknown option{did_you_mean(option, _OPTIONS)}", key=key(option))
        uri = options.get("uri")
        if not isinstance(uri, str):
            raise ConfigError("needs a uri such as 'stomp://127.0.0.1:61613'", key=key("uri"))
        parts = urlsplit(uri)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ConfigError(f"{uri!r} is not stomp://host:port or stomp+ssl://host:port", key=key("uri"))
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError:
            raise ConfigError(f"{uri!r} has an invalid port", key=key("uri")) from None

        def integer(option: str, default: int, minimum: int) -> int:
            value = options.get(option, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"must be an integer >= {minimum}, not {value!r}", key=key(option))
            return value

        def text(option: str, default: str | None) -> str | None:
            value = options.get(option, default)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"must be a string, not {value!r}", key=key(option))
            return value

        heartbeat = options.get("heartbeat", [10000, 10000])
        if (
            not isinstance(heartbeat, list | tuple)
            or len(heartbeat) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in heartbeat)
        ):
            raise ConfigError(f"must be [send_ms, expect_ms], not {heartbeat!r}", key=key("heartbeat"))
        amq_msg_type = options.get("amq_msg_type", True)
        if not isinstance(amq_msg_type, bool):
            raise ConfigError(f"must be true or false, not {amq_msg_type!r}", key=key("amq_msg_type"))
        tls = None
        if parts.scheme == "stomp+ssl":
            tls = ClientTls.from_options(options, hostname=parts.hostname, base_dir=base_dir, key=key)
        else:
            for option in TLS_OPTIONS:
                if option in options:
                    raise ConfigError(f"TLS options need a stomp+ssl:// uri, not {uri!r}", key=key(option))
        return cls(
            uri=uri,
            scheme=parts.scheme,
            address=parts.hostname,
            port=port,
            login=text("login", parts.username),
            passcode=text("passcode", parts.password),
            virtual_host=text("host", parts.hostname) or parts.hostname,
            client_id=text("client_id", f"{gateway_id}-{name}") or f"{gateway_id}-{name}",
            failure_retry_interval=integer("failure_retry_interval", 5000, 1),
            max_retries=integer("max_retries", -1, -1),
            send_timeout=integer("send_timeout", 30000, 1),
            connect_timeout=integer("connect_timeout", 10000, 1),
            heartbeat=(heartbeat[0], heartbeat[1]),
            max_waiting_sends=integer("max_waiting_sends", 10000, 0),
            transformation=text("transformation", "") or "",
            amq_msg_type=amq_msg_type,
            tls=tls,
        )


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

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None) -> StompBrokerMetrics:
        """The metrics registered in ``registry`` (a private registry if None)."""
        if registry is None:
            return cls(CollectorRegistry())
        metrics = cls._by_registry.get(registry)
        if metrics is None:
            metrics = cls._by_registry[registry] = cls(registry)
        return metrics
