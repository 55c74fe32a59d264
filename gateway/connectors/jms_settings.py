"""Configuration of the ``jms`` connector (any JMS provider through the JMS API).

:class:`JmsConnectorOptions` declares the ``[connectors.NAME]`` table with
``type = "jms"`` (the config's schema and key tables are built from it);
:class:`JmsSettings.from_config` checks a ``[connectors.NAME]`` table with
``type = "jms"`` and names the key of any problem, without starting a JVM:
classpath entries are resolved (jars, folders, globs; relative to the config
file) and a missing one is reported with its key, and the JMS API namespace
(``javax`` or ``jakarta``) is read from the jars when not set.  What only a
JVM can tell (an unknown class, a JNDI name that does not resolve) is checked
when the connector starts (:mod:`gateway.connectors.jms_provider`).

Keys (times in milliseconds)::

    [connectors.NAME]
    type = "jms"
    classpath = ["lib/*.jar", "/opt/vendor/lib"]   # jars, folders (their *.jar), globs
    api = "auto"                   # "javax" | "jakarta" | "auto" (read from the jars)
    user = "gateway"               # createConnection(user, password); absent: createConnection()
    password = "secret"
    client_id = "gw-amq"           # the connection's client id (default <gateway id>-<name>)
    destinations = "session"       # "session": createQueue/createTopic; "jndi": looked up by name
    failure_retry_interval = 5000
    max_retries = -1               # -1: forever
    send_timeout = 30000           # how long a send may wait for the provider (and its commit)
    max_waiting_sends = 10000      # sends allowed to wait for a reconnection at once
    max_burst = 500                # sends committed together in one local transaction at most
    max_pending_sends = 5000       # queued sends past which senders are paused (flow control)
    receive_timeout = 100          # a consumer thread's blocking receive(timeout)
    exclusive_option = ""          # a bridge source's exclusive consumer (ActiveMQ 5: "consumer.exclusive=true")
    jvm_options = ["-Xmx256m"]     # extra JVM options (the JVM starts once per process)

    # either a ConnectionFactory class set up through its bean setters ...
    connection_factory = { class = "com.example.jms.ConnectionFactory", properties = { brokerURL = "..." } }
    # ... or JNDI
    [connectors.NAME.jndi]
    environment = { "java.naming.factory.initial" = "...", "java.naming.provider.url" = "..." }
    properties_file = "jndi.properties"     # optional, merged under environment
    connection_factory = "ConnectionFactory"  # the factory's JNDI name (default)
"""

from __future__ import annotations

import glob
import os
import zipfile
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, PlainValidator

from gateway.errors import ConfigError
from gateway.java_properties import read_properties_file
from gateway.schema import Bool, Int, Retries, Section, Str, Strings, validate
from gateway.security.redaction import redact_text


def _scalar(value: Any) -> Any:
    if isinstance(value, str | int | float):  # (bool is an int)
        return value
    raise ValueError(f"must be a string, number or boolean, not {value!r}")


Scalar = Annotated[Str | Int | float | Bool, PlainValidator(_scalar, json_schema_input_type=Str | Int | float | Bool)]
"""A string, number or boolean (a bean property or JNDI environment value)."""


class JmsFactoryOptions(Section):
    """A ConnectionFactory made from its class and set up through bean setters."""

    class_: Str = Field(alias="class")
    """The provider's ConnectionFactory class (no-argument constructor)."""
    properties: dict[str, Scalar] = {}
    """Bean properties: brokerURL = "..." calls setBrokerURL("..."); a.b calls getA().setB(...)."""


class JmsJndiOptions(Section):
    """The ConnectionFactory looked up in JNDI."""

    environment: dict[str, Scalar] = {}
    """InitialContext environment (java.naming.factory.initial, java.naming.provider.url, ...)."""
    properties_file: Str | None = None
    """A jndi.properties file merged under environment (relative to the config file)."""
    connection_factory: Annotated[Str, Field(min_length=1)] = "ConnectionFactory"
    """The ConnectionFactory's JNDI name."""


class JmsConnectorOptions(Section):
    """Any JMS 1.1/2.0/3.0 provider through the JMS API, in-process (JPype), from its own client jars."""

    __tag__: ClassVar[str] = "jms"
    type: Literal["jms"]
    """The connector type: a JMS provider through the JMS API."""
    classpath: Strings | Str
    """The provider's client jars: files, folders (their *.jar) and globs, relative to the config file."""
    api: Literal["auto", "javax", "jakarta"] = "auto"
    """The JMS API namespace: javax (JMS 1.1/2.0) or jakarta (3.0); auto reads it from the jars."""
    connection_factory: JmsFactoryOptions | None = None
    """The ConnectionFactory from its class and bean properties (or give jndi)."""
    jndi: JmsJndiOptions | None = None
    """The ConnectionFactory from JNDI (or give connection_factory)."""
    user: Str | None = None
    """User of createConnection(user, password); absent: createConnection()."""
    password: Str | None = None
    """Its password."""
    client_id: Str | None = None
    """The connection's client id, which names durable subscriptions (default <gateway id>-<connector name>)."""
    destinations: Literal["session", "jndi"] = "session"
    """session: /queue/x and /topic/y made with createQueue/createTopic; jndi: looked up by name (x, y)."""
    failure_retry_interval: Annotated[Int, Field(ge=1)] = 5000
    """Milliseconds between reconnection attempts."""
    max_retries: Retries = -1
    """Reconnection attempts before giving up; -1 retries forever."""
    send_timeout: Annotated[Int, Field(ge=1)] = 30000
    """Milliseconds a send may wait for the provider to be back."""
    max_waiting_sends: Annotated[Int, Field(ge=0)] = 10000
    """Sends allowed to wait for a reconnection at once; more fail at once."""
    max_burst: Annotated[Int, Field(ge=1)] = 500
    """Sends committed together at most (one local transaction of the producer session)."""
    max_pending_sends: Annotated[Int, Field(ge=1)] = 5000
    """Sends queued for the producer thread past which STOMP senders are paused (flow control)."""
    receive_timeout: Annotated[Int, Field(ge=1)] = 100
    """Milliseconds a consumer thread's receive(timeout) blocks."""
    exclusive_option: Annotated[Str, Field(pattern=r"^[^?&\s]*$")] = ""
    """The provider's destination option that makes a queue consumer exclusive, used for a bridge's source
    (one owner per bridge); ActiveMQ 5: consumer.exclusive=true; empty: the provider has none."""
    jvm_options: Strings = ()
    """Extra JVM options (the JVM starts once per process, with every jms connector's)."""

    def table(self) -> dict[str, Any]:
        """The options as the TOML table they came from."""
        return self.model_dump(by_alias=True, exclude_unset=True)

API_NAMESPACES = ("javax", "jakarta")

PropertyValue = str | int | float | bool


@dataclass(slots=True, frozen=True)
class JmsSettings:
    """A ``jms`` connector's checked configuration (times in milliseconds)."""

    name: str
    classpath: tuple[str, ...]
    api: str
    user: str | None = None
    password: str | None = None
    client_id: str = ""
    destinations: str = "session"
    factory_class: str | None = None
    factory_properties: tuple[tuple[str, PropertyValue], ...] = ()
    jndi_environment: tuple[tuple[str, str], ...] = ()
    jndi_factory_name: str = "ConnectionFactory"
    failure_retry_interval: int = 5000
    max_retries: int = -1
    send_timeout: int = 30000
    max_waiting_sends: int = 10000
    max_burst: int = 500
    max_pending_sends: int = 5000
    receive_timeout: int = 100
    exclusive_option: str = ""
    jvm_options: tuple[str, ...] = ()
    path: str = field(default="", compare=False)
    """The config file, for error messages."""

    def key(self, option: str) -> str:
        """The dotted config key of ``option``."""
        return f"connectors.{self.name}.{option}"

    @property
    def provider(self) -> str:
        """How the logs name the provider: its URL (a password in it as ``***``) when one is configured,
        else the factory."""
        for name, value in self.jndi_environment:
            if name == "java.naming.provider.url":
                return redact_text(value)
        for prop, setting in self.factory_properties:
            if "url" in prop.lower() and isinstance(setting, str):
                return redact_text(setting)
        if self.factory_class:
            return self.factory_class
        return f"jndi:{self.jndi_factory_name}"

    def identity(self) -> tuple[Any, ...]:
        """What makes two connectors the same provider account (one local transaction can span them)."""
        return (self.classpath, self.api, self.factory_class, self.factory_properties, self.jndi_environment,
                self.jndi_factory_name, self.user, self.password, self.destinations)

    @classmethod
    def from_config(cls, name: str, options: dict[str, Any] | JmsConnectorOptions, *, gateway_id: str = "jmsgateway",
                    base_dir: str = "", path: str = "") -> JmsSettings:
        """Check ``options``; ConfigError names the file, key and problem.  Relative paths
        (classpath, ``jndi.properties_file``) are relative to ``base_dir``.

        Names, types and ranges are :class:`JmsConnectorOptions`'s to check; here only what the
        model cannot know: the jars on disk and the API they hold, which of the two ways to the
        ConnectionFactory is given, and the JNDI environment with its properties file."""

        def bad(problem: str, option: str) -> ConfigError:
            return ConfigError(problem, path=path, key=f"connectors.{name}.{option}")

        checked = validate(JmsConnectorOptions, options, path=path, prefix=f"connectors.{name}")
        classpath = _classpath(checked.classpath, base_dir, bad)
        api: str = checked.api
        if api == "auto":
            found = detect_api(classpath)
            if found is None:
                raise bad("no JMS API (javax.jms or jakarta.jms) in these jars: add the JMS API jar of the "
                          "provider, or set api = \"javax\" / \"jakarta\"", "classpath")
            api = found
        factory_class: str | None = None
        factory_properties: tuple[tuple[str, PropertyValue], ...] = ()
        environment: tuple[tuple[str, str], ...] = ()
        factory_name = "ConnectionFactory"
        if (checked.connection_factory is None) == (checked.jndi is None):
            raise bad("give either connection_factory = { class = ..., properties = {...} } or a [jndi] "
                      "table (environment, connection_factory), exactly one of them", "connection_factory")
        if checked.connection_factory is not None:
            factory_class = checked.connection_factory.class_
            factory_properties = tuple(checked.connection_factory.properties.items())
        elif checked.jndi is not None:
            environment = _jndi_environment(checked.jndi, base_dir, bad)
            factory_name = checked.jndi.connection_factory
        return cls(
            name=name,
            classpath=classpath,
            api=api,
            user=checked.user,
            password=checked.password,
            client_id=checked.client_id or f"{gateway_id}-{name}",
            destinations=checked.destinations,
            factory_class=factory_class,
            factory_properties=factory_properties,
            jndi_environment=environment,
            jndi_factory_name=factory_name,
            failure_retry_interval=checked.failure_retry_interval,
            max_retries=checked.max_retries,
            send_timeout=checked.send_timeout,
            max_waiting_sends=checked.max_waiting_sends,
            max_burst=checked.max_burst,
            max_pending_sends=checked.max_pending_sends,
            receive_timeout=checked.receive_timeout,
            exclusive_option=checked.exclusive_option,
            jvm_options=tuple(checked.jvm_options),
            path=path,
        )


def _classpath(raw: str | tuple[str, ...], base_dir: str, bad: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = (raw,)
    if not raw:
        raise bad("must be a list of jar files, folders or globs (the provider's client jars)", "classpath")
    entries: list[str] = []
    for index, entry in enumerate(raw):
        where = f"classpath[{index}]"
        pattern = os.path.expanduser(entry)
        if base_dir and not os.path.isabs(pattern):
            pattern = os.path.join(base_dir, pattern)
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise bad(f"{entry!r} matches no file", where)
        elif os.path.isdir(pattern):
            matches = [pattern, *sorted(glob.glob(os.path.join(pattern, "*.jar")))]
        elif os.path.isfile(pattern):
            matches = [pattern]
        else:
            raise bad(f"{entry!r}: no such jar or folder", where)
        for match in matches:
            real = os.path.realpath(match)
            if real not in entries:
                entries.append(real)
    return tuple(entries)


def detect_api(classpath: tuple[str, ...]) -> str | None:
    """``javax`` or ``jakarta``: the JMS API the classpath holds (``javax`` if both), None if neither."""
    found: set[str] = set()
    for entry in classpath:
        for namespace in API_NAMESPACES:
            member = f"{namespace}/jms/ConnectionFactory.class"
            if os.path.isdir(entry):
                if os.path.isfile(os.path.join(entry, member)):
                    found.add(namespace)
                continue
            try:
                with zipfile.ZipFile(entry) as jar:
                    jar.getinfo(member)
                found.add(namespace)
            except (KeyError, OSError, zipfile.BadZipFile):
                continue
    for namespace in API_NAMESPACES:
        if namespace in found:
            return namespace
    return None


def _jndi_environment(jndi: JmsJndiOptions, base_dir: str, bad: Any) -> tuple[tuple[str, str], ...]:
    """The InitialContext environment: the properties file, then ``environment`` over it."""
    environment: dict[str, str] = {}
    properties_file = jndi.properties_file
    if properties_file is not None:
        file_path = properties_file if os.path.isabs(properties_file) or not base_dir else \
            os.path.join(base_dir, properties_file)
        try:
            environment.update(read_properties_file(file_path, key="jndi.properties_file"))
        except OSError as error:
            raise bad(f"cannot read {properties_file!r}: {error.strerror}", "jndi.properties_file") from None
    for name, value in jndi.environment.items():
        environment[name] = str(value).lower() if isinstance(value, bool) else str(value)
    if "java.naming.factory.initial" not in environment:
        raise bad("needs java.naming.factory.initial (the provider's InitialContextFactory class), in "
                  "environment or properties_file", "jndi.environment")
    return tuple(environment.items())
