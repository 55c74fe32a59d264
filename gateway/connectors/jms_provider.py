"""The Java side of the ``jms`` connector: the JVM, the JMS API classes, the provider's factory.

* :func:`start_jvm` starts the one JVM of the process (JPype) with the
  classpath of every ``jms`` connector configured, the first time a ``jms``
  connector starts; a missing JPype or Java is one :class:`ConfigError` line.
* :class:`JmsApi` holds the ``javax.jms`` or ``jakarta.jms`` classes the
  connector needs (never a provider's class).
* :func:`connection_factory` makes the provider's ``ConnectionFactory`` from a
  class and bean setters, or from JNDI; an unknown class, a missing setter or a
  JNDI name that does not resolve is a :class:`ConfigError` naming the key.
* :class:`JavaThread` is a Python thread JPype attaches to the JVM (as a Java
  daemon thread): every JMS call of the gateway runs on one of these, never on
  the reactor thread.

Everything here except :func:`register_classpath` blocks and is called from
a :class:`JavaThread`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from twisted.logger import Logger

from gateway.connectors.jms_settings import JmsSettings
from gateway.errors import ConfigError, ConnectorError
from gateway.security.redaction import redact_text

log = Logger()

# JMS constants are fixed by the specification (javax.jms.Session, DeliveryMode).
SESSION_TRANSACTED = 0
AUTO_ACKNOWLEDGE = 1
NON_PERSISTENT = 1
PERSISTENT = 2

_lock = threading.Lock()
_classpath: list[str] = []
_jvm_options: list[str] = []


def register_classpath(settings: JmsSettings) -> None:
    """Add a connector's jars to those the JVM starts with (called when the connector is built)."""
    with _lock:
        for entry in settings.classpath:
            if entry not in _classpath:
                _classpath.append(entry)
        for option in settings.jvm_options:
            if option not in _jvm_options:
                _jvm_options.append(option)


def start_jvm(settings: JmsSettings) -> Any:
    """The ``jpype`` module with the JVM running (started now if it is not yet)."""
    register_classpath(settings)
    try:
        import jpype
    except ImportError:
        raise ConfigError("the jms connector needs JPype: pip install 'jmsgateway[jms]' (jpype1)",
                          path=settings.path, key=settings.key("type")) from None
    with _lock:
        if jpype.isJVMStarted():
            missing = [entry for entry in _classpath if entry not in _started_classpath(jpype)]
            for entry in missing:
                jpype.addClassPath(entry)
            return jpype
        jvm_path = _jvm_path(jpype, settings)
        # -Xrs: the JVM leaves SIGTERM/SIGINT to twistd (no Java shutdown hooks on a signal).
        try:
            jpype.startJVM(jvm_path, "-Xrs", *_jvm_options, classpath=list(_classpath), convertStrings=False,
                           interrupt=False)
        except Exception as error:  # a bad JVM option, a broken runtime
            raise ConfigError(f"cannot start the JVM {jvm_path} with options {['-Xrs', *_jvm_options]}: {error}",
                              path=settings.path, key=settings.key("jvm_options")) from None
        log.info("jms: JVM started ({path}) with {count} classpath entries", path=jvm_path, count=len(_classpath))
        return jpype


def _jvm_path(jpype: Any, settings: JmsSettings) -> str:
    """The JVM library to load: from ``JAVA_HOME`` when it is set (as Java's own launchers
    do: a JAVA_HOME that holds no runtime is an error, not a silent fallback), else the one
    JPype finds (``java`` on the PATH, the usual install folders)."""
    key = settings.key("type")
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not os.path.isdir(java_home):
        raise ConfigError(f"the jms connector needs a Java runtime: JAVA_HOME={java_home!r} is not a folder",
                          path=settings.path, key=key)
    try:
        jvm_path = str(jpype.getDefaultJVMPath())
    except Exception as error:  # JVMNotFoundException, JVMNotSupportedException
        raise ConfigError(f"the jms connector needs a Java runtime (install one or set JAVA_HOME): {error}",
                          path=settings.path, key=key) from None
    homes = {os.path.abspath(java_home) + os.sep, os.path.realpath(java_home) + os.sep} if java_home else set()
    if homes and not any(path.startswith(home) for home in homes
                         for path in (os.path.abspath(jvm_path), os.path.realpath(jvm_path))):
        raise ConfigError(f"the jms connector needs a Java runtime: JAVA_HOME={java_home!r} holds none "
                          "(no libjvm under it)", path=settings.path, key=key)
    return jvm_path


def _started_classpath(jpype: Any) -> set[str]:
    value = str(jpype.java.lang.System.getProperty("java.class.path") or "")
    return set(value.split(":"))


class JmsApi:
    """The JMS API classes of one namespace (``javax`` or ``jakarta``)."""

    def __init__(self, jpype: Any, namespace: str) -> None:
        self.jpype = jpype
        self.namespace = namespace

        def jms(name: str) -> Any:
            return jpype.JClass(f"{namespace}.jms.{name}")

        self.TextMessage = jms("TextMessage")
        self.BytesMessage = jms("BytesMessage")
        self.MapMessage = jms("MapMessage")
        self.ObjectMessage = jms("ObjectMessage")
        self.StreamMessage = jms("StreamMessage")
        self.Queue = jms("Queue")
        self.Topic = jms("Topic")
        self.TemporaryQueue = jms("TemporaryQueue")
        self.TemporaryTopic = jms("TemporaryTopic")
        self.ExceptionListener = jms("ExceptionListener")
        self.MessageListener = jms("MessageListener")
        self.JMSException = jms("JMSException")
        self.MessageEOFException = jms("MessageEOFException")
        self.InvalidSelectorException = jms("InvalidSelectorException")
        self.InvalidDestinationException = jms("InvalidDestinationException")
        self.MessageFormatException = jms("MessageFormatException")
        self.String = jpype.JClass("java.lang.String")
        self.JString = jpype.JString
        self.ByteArray = jpype.JArray(jpype.JByte)
        self.JBoolean = jpype.JBoolean
        self.JByte = jpype.JByte
        self.JShort = jpype.JShort
        self.JInt = jpype.JInt
        self.JLong = jpype.JLong
        self.JFloat = jpype.JFloat
        self.JDouble = jpype.JDouble
        self.JObject = jpype.JObject


_apis: dict[str, JmsApi] = {}


def jms_api(settings: JmsSettings) -> JmsApi:
    """The JVM started and the connector's JMS API resolved (ConfigError if the jars lack it)."""
    jpype = start_jvm(settings)
    api = _apis.get(settings.api)
    if api is None:
        try:
            api = _apis[settings.api] = JmsApi(jpype, settings.api)
        except TypeError as error:  # JClass of a class not on the classpath
            raise ConfigError(f"the {settings.api}.jms API is not in the classpath: {error}", path=settings.path,
                              key=settings.key("classpath")) from None
    return api


def java_error(error: BaseException) -> str:
    """One line for a Java exception (class and message, with its cause's; passwords as ``***``)."""
    text = f"{_simple_name(error)}: {_message(error)}"
    cause = getattr(error, "getCause", None)
    seen = 0
    while cause is not None and seen < 3:
        try:
            inner = cause()
        except Exception:
            break
        if inner is None:
            break
        text += f" (caused by {_simple_name(inner)}: {_message(inner)})"
        cause = getattr(inner, "getCause", None)
        seen += 1
    return redact_text(text)


def _simple_name(error: Any) -> str:
    try:
        return str(error.getClass().getSimpleName())
    except Exception:
        return type(error).__name__


def _message(error: Any) -> str:
    try:
        message = error.getMessage()
    except Exception:
        return str(error)
    return "" if message is None else str(message)


def connection_factory(settings: JmsSettings, api: JmsApi) -> tuple[Any, Any]:
    """``(ConnectionFactory, JNDI context or None)`` as configured.  ConfigError for an unknown
    class, a property without a setter or a JNDI name that does not resolve; ConnectorError for
    a provider that cannot be reached (a remote JNDI server)."""
    jpype = api.jpype
    if settings.factory_class is not None:
        try:
            factory_class = jpype.JClass(settings.factory_class)
        except TypeError:
            raise ConfigError(f"class {settings.factory_class!r} is not in the classpath", path=settings.path,
                              key=settings.key("connection_factory.class")) from None
        try:
            factory = factory_class()
        except Exception as error:
            raise ConfigError(f"cannot make a {settings.factory_class}: {java_error(error)}", path=settings.path,
                              key=settings.key("connection_factory.class")) from None
        for name, value in settings.factory_properties:
            set_bean_property(factory, name, value, settings)
        return factory, None
    properties = jpype.JClass("java.util.Hashtable")()
    for name, value in settings.jndi_environment:
        properties.put(jpype.JString(name), jpype.JString(value))
    naming = jpype.JPackage("javax").naming
    try:
        context = naming.InitialContext(properties)
    except naming.NoInitialContextException as error:
        raise ConfigError(f"cannot make the InitialContext: {java_error(error)}", path=settings.path,
                          key=settings.key("jndi.environment")) from None
    except naming.NamingException as error:
        raise ConnectorError(f"JNDI provider {settings.provider}: {java_error(error)}") from None
    factory = lookup(context, settings.jndi_factory_name, settings, api, key="jndi.connection_factory")
    return factory, context


def lookup(context: Any, name: str, settings: JmsSettings, api: JmsApi, *, key: str) -> Any:
    """``context.lookup(name)``: ConfigError (with ``key``) when the name is not bound."""
    naming = api.jpype.JPackage("javax").naming
    try:
        found = context.lookup(api.JString(name))
    except naming.NameNotFoundException:
        raise ConfigError(f"JNDI name {name!r} does not resolve at {settings.provider}", path=settings.path,
                          key=settings.key(key)) from None
    except naming.NamingException as error:
        raise ConnectorError(f"JNDI lookup of {name!r} at {settings.provider}: {java_error(error)}") from None
    if found is None:
        raise ConfigError(f"JNDI name {name!r} is bound to nothing", path=settings.path, key=settings.key(key))
    return found


def set_bean_property(bean: Any, name: str, value: Any, settings: JmsSettings) -> None:
    """``bean.setName(value)`` (``a.b`` walks ``getA().setB(...)``); ConfigError naming the key otherwise."""
    key = settings.key(f"connection_factory.properties.{name}")
    target = bean
    parts = name.split(".")
    for part in parts[:-1]:
        getter = getattr(target, "get" + part[:1].upper() + part[1:], None)
        if getter is None:
            raise ConfigError(f"{bean.getClass().getName()} has no property {part!r}", path=settings.path, key=key)
        target = getter()
    last = parts[-1]
    setter = getattr(target, "set" + last[:1].upper() + last[1:], None)
    if setter is None:
        raise ConfigError(f"{target.getClass().getName()} has no setter for {last!r}", path=settings.path, key=key)
    attempts = [value] if isinstance(value, str) else [value, str(value)]
    error: Exception | None = None
    for candidate in attempts:
        try:
            setter(candidate)
            return
        except TypeError as mismatch:  # no overload takes this Python type
            error = mismatch
        except Exception as refused:  # the setter threw
            raise ConfigError(f"{value!r} refused: {java_error(refused)}", path=settings.path, key=key) from None
    raise ConfigError(f"{value!r} does not fit the setter: {error}", path=settings.path, key=key)


class JavaThread(threading.Thread):
    """A daemon thread attached to the JVM as a Java daemon thread (it never holds up exit)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)

    def attach(self, jpype: Any) -> None:
        """Attach this thread as a Java daemon thread (call first thing in :meth:`run`)."""
        if jpype.isJVMStarted():
            jpype.java.lang.Thread.attachAsDaemon()

    def detach(self, jpype: Any) -> None:
        if jpype.isJVMStarted():
            with contextlib.suppress(Exception):  # gone already
                jpype.java.lang.Thread.detach()
