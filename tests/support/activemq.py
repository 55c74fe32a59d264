"""A real ActiveMQ 5.17 broker (the Debian ``activemq`` package) for tests and benchmarks.

:class:`ActiveMQBroker` writes its own ``activemq.xml`` and ``log4j.properties``
into a work directory (own data directory, free ports, a STOMP and an OpenWire
transport connector; no web console, no JMX connector, the scheduler only when asked), runs the
broker JVM as a child process and waits until both ports accept connections.
It works outside pytest (benchmarks use it); the pytest fixtures at the bottom
are :func:`activemq` (one broker per test session, KahaDB),
:func:`stock_activemq` (one more, without the XStream/Jettison jars) and
:func:`fresh_activemq` (a new broker per test, for kill/restart tests).

The JVM is always cleaned up: :meth:`ActiveMQBroker.stop` on teardown, an
``atexit`` hook for anything still running, and on Linux the JVM receives
SIGKILL when the process that started it dies.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.tls import KEYSTORE_PASSWORD, TlsFiles, make_tls_files

ACTIVEMQ_HOME = Path("/usr/share/activemq")
ACTIVEMQ_JAR = ACTIVEMQ_HOME / "bin" / "activemq.jar"

_ACTIVEMQ_XML = """\
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
         http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
         http://activemq.apache.org/schema/core
         http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core"
          brokerName="{broker_name}"
          useJmx="false"
          schedulerSupport="{scheduler}"
          persistent="{persistent}"
          dataDirectory="{data_dir}">
    <managementContext>
      <managementContext createConnector="false"/>
    </managementContext>
{persistence}
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="128 mb"/></memoryUsage>
        <storeUsage><storeUsage limit="2 gb"/></storeUsage>
        <tempUsage><tempUsage limit="1 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
{ssl_context}
    <transportConnectors>
      <transportConnector name="openwire" uri="tcp://127.0.0.1:{openwire_port}"/>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{stomp_port}{stomp_options}"/>
{ssl_connectors}
    </transportConnectors>
  </broker>
</beans>
"""

_SSL_CONTEXT_XML = """\
    <sslContext>
      <sslContext keyStore="{keystore}" keyStorePassword="{password}" keyStoreType="PKCS12"
                  trustStore="{truststore}" trustStorePassword="{password}" trustStoreType="PKCS12"/>
    </sslContext>"""

_SSL_CONNECTORS_XML = """\
      <transportConnector name="stomp+ssl" uri="stomp+ssl://127.0.0.1:{ssl_port}?transport.tcpNoDelay=true"/>
      <transportConnector name="stomp+ssl-auth"
                          uri="stomp+ssl://127.0.0.1:{auth_port}?needClientAuth=true&amp;transport.tcpNoDelay=true"/>"""

_KAHADB_XML = """\
    <persistenceAdapter>
      <kahaDB directory="{data_dir}/kahadb"/>
    </persistenceAdapter>"""

# The Debian package logs through log4j 1.2 (slf4j-log4j12 in lib/optional);
# the launcher puts activemq.conf on the classpath, so this file is found there.
_LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, logfile
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.logfile=org.apache.log4j.FileAppender
log4j.appender.logfile.file={log_file}
log4j.appender.logfile.append=true
log4j.appender.logfile.layout=org.apache.log4j.PatternLayout
log4j.appender.logfile.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
"""

_JAVA_OPENS = (
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.net=ALL-UNNAMED",
)

EXTRA_JARS = (Path("/usr/share/java/xstream.jar"), Path("/usr/share/java/jettison.jar"))
"""Jars ActiveMQ's STOMP ``transformation`` support (JmsFrameTranslator) needs but the
Debian package only recommends (libxstream-java, libjettison-java); linked into
``<workdir>/lib``, which the launcher puts on the broker's classpath."""

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the thread that forked it exits."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:  # pragma: no cover - not glibc
        pass


class ActiveMQStartError(RuntimeError):
    """The broker did not come up; the message names its log files."""


class ActiveMQBroker:
    """One ActiveMQ broker JVM with its own configuration and data in ``workdir``.

    Ports are chosen once, so :meth:`start` after :meth:`stop` or
    :meth:`kill` brings the same broker back on the same ports and data
    (KahaDB recovery).

    :param workdir: directory for configuration, data and logs (created).
    :param kahadb: persist messages in KahaDB; ``False`` runs non-persistent.
    :param heap: JVM maximum heap (``-Xmx``).
    :param start_timeout: seconds to wait for the ports to accept.
    :param stomp_no_delay: ``transport.tcpNoDelay=true`` on the STOMP
        connector; ActiveMQ's default leaves Nagle's algorithm on there, which
        holds back small frames such as receipts (docs/jms.md).
    :param tls: certificates (:func:`tests.support.tls.make_tls_files`) for two
        more connectors: ``stomp+ssl`` (:attr:`stomp_ssl_uri`) and ``stomp+ssl``
        requiring a client certificate signed by the same CA
        (:attr:`stomp_ssl_auth_uri`).
    :param xstream: link XStream and Jettison (:data:`EXTRA_JARS`) into the
        broker's lib directory, which ActiveMQ's STOMP ``transformation``
        header needs; ``False`` runs a stock broker as Debian installs it.
    :param full_jit: let the JVM compile with C2 too (benchmarks: ActiveMQ at
        its best once warm); tests stop at C1, which starts faster.
    :param scheduler: ``schedulerSupport="true"``: ActiveMQ honours
        ``AMQ_SCHEDULED_DELAY`` / ``PERIOD`` / ``REPEAT`` / ``CRON`` (its job store
        under the data directory, kept across a restart); off in a stock broker,
        which then delivers such messages at once.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        *,
        kahadb: bool = True,
        heap: str = "512m",
        start_timeout: float = 30.0,
        broker_name: str = "jmsgw-test",
        stomp_no_delay: bool = False,
        tls: TlsFiles | None = None,
        xstream: bool = True,
        full_jit: bool = False,
        scheduler: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.workdir = Path(workdir).resolve()
        self.full_jit = full_jit
        self.xstream = xstream
        self.stomp_no_delay = stomp_no_delay
        self.tls = tls
        self.kahadb = kahadb
        self.heap = heap
        self.start_timeout = start_timeout
        self.broker_name = broker_name
        self.stomp_port = free_port()
        self.openwire_port = free_port()
        while self.openwire_port == self.stomp_port:
            self.openwire_port = free_port()
        self.ssl_ports = (0, 0)
        if tls is not None:
            taken = {self.stomp_port, self.openwire_port}
            ports = [port for port in (free_port() for _ in range(6)) if port not in taken]
            self.ssl_ports = (ports[0], next(port for port in ports if port != ports[0]))
        self.conf_dir = self.workdir / "conf"
        self.data_dir = self.workdir / "data"
        self.tmp_dir = self.workdir / "tmp"
        self.lib_dir = self.workdir / "lib"
        self.log_file = self.workdir / "activemq.log"
        self.console_file = self.workdir / "activemq.out"
        self.config_file = self.conf_dir / "activemq.xml"
        self._process: subprocess.Popen[bytes] | None = None
        self._write_config()
        _live_brokers.add(self)

    # -- addresses ---------------------------------------------------------

    @property
    def openwire_url(self) -> str:
        """``tcp://127.0.0.1:PORT`` for the ActiveMQ JMS client."""
        return f"tcp://127.0.0.1:{self.openwire_port}"

    @property
    def stomp_uri(self) -> str:
        """``stomp://127.0.0.1:PORT`` as the gateway's connector config expects."""
        return f"stomp://127.0.0.1:{self.stomp_port}"

    @property
    def stomp_ssl_uri(self) -> str:
        """``stomp+ssl://localhost:PORT`` (the name its certificate carries); needs ``tls``."""
        return f"stomp+ssl://localhost:{self.ssl_ports[0]}"

    @property
    def stomp_ssl_auth_uri(self) -> str:
        """The ``stomp+ssl`` connector that requires a client certificate; needs ``tls``."""
        return f"stomp+ssl://localhost:{self.ssl_ports[1]}"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle ---------------------------------------------------------

    def _write_config(self) -> None:
        for directory in (self.conf_dir, self.data_dir, self.tmp_dir, self.lib_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for jar in EXTRA_JARS:
            link = self.lib_dir / jar.name
            if not self.xstream:
                link.unlink(missing_ok=True)
            elif jar.exists() and not link.exists():
                link.symlink_to(jar)
        persistence = _KAHADB_XML.format(data_dir=self.data_dir) if self.kahadb else ""
        ssl_context = ssl_connectors = ""
        if self.tls is not None:
            truststore = self.conf_dir / "trust.p12"
            truststore.unlink(missing_ok=True)
            subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(self.tls.ca_cert),
                            "-keystore", str(truststore), "-storetype", "PKCS12", "-storepass", KEYSTORE_PASSWORD],
                           check=True, capture_output=True)
            ssl_context = _SSL_CONTEXT_XML.format(keystore=self.tls.server_keystore, truststore=truststore,
                                                  password=KEYSTORE_PASSWORD)
            ssl_connectors = _SSL_CONNECTORS_XML.format(ssl_port=self.ssl_ports[0], auth_port=self.ssl_ports[1])
        self.config_file.write_text(
            _ACTIVEMQ_XML.format(
                broker_name=self.broker_name,
                scheduler="true" if self.scheduler else "false",
                persistent="true" if self.kahadb else "false",
                data_dir=self.data_dir,
                persistence=persistence,
                openwire_port=self.openwire_port,
                stomp_port=self.stomp_port,
                stomp_options="?transport.tcpNoDelay=true" if self.stomp_no_delay else "",
                ssl_context=ssl_context,
                ssl_connectors=ssl_connectors,
            )
        )
        (self.conf_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES.format(log_file=self.log_file))

    def command(self) -> list[str]:
        """The java command line that starts this broker."""
        return [
            "java",
            "-Xms64m",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            *([] if self.full_jit else ["-XX:TieredStopAtLevel=1"]),
            "-Djava.awt.headless=true",
            f"-Djava.io.tmpdir={self.tmp_dir}",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={self.workdir}",
            f"-Dactivemq.conf={self.conf_dir}",
            f"-Dactivemq.data={self.data_dir}",
            "-Dlog4j.configuration=file:" + str(self.conf_dir / "log4j.properties"),
            *_JAVA_OPENS,
            "-jar",
            str(ACTIVEMQ_JAR),
            "start",
            f"xbean:file:{self.config_file}",
        ]

    def start(self) -> ActiveMQBroker:
        """Start the JVM and wait until the STOMP and OpenWire ports accept.

        Raises :class:`ActiveMQStartError` naming the log files when the
        broker exits or does not listen within ``start_timeout`` seconds.
        """
        if self.running:
            return self
        if not ACTIVEMQ_JAR.exists():
            raise ActiveMQStartError(f"{ACTIVEMQ_JAR} not found: install the Debian package 'activemq'")
        in_main_thread = threading.current_thread() is threading.main_thread()
        console = open(self.console_file, "ab")  # noqa: SIM115 - the child owns it
        try:
            self._process = subprocess.Popen(
                self.command(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if in_main_thread else None,
            )
        finally:
            console.close()
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self) -> None:
        import socket

        deadline = time.monotonic() + self.start_timeout
        pending = [self.stomp_port, self.openwire_port, *(port for port in self.ssl_ports if port)]
        while pending:
            process = self._process
            assert process is not None
            if process.poll() is not None:
                raise ActiveMQStartError(
                    f"ActiveMQ exited with status {process.returncode} during startup; "
                    f"see {self.log_file} and {self.console_file}"
                )
            try:
                with socket.create_connection(("127.0.0.1", pending[0]), timeout=0.5):
                    pending.pop(0)
                    continue
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ActiveMQStartError(
                    f"ActiveMQ did not listen on 127.0.0.1:{pending[0]} within {self.start_timeout}s; "
                    f"see {self.log_file} and {self.console_file}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        """Shut the broker down cleanly (SIGTERM runs its shutdown hook), SIGKILL after ``timeout``."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL the JVM (a crash: nothing flushed that was not already on disk)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        self._process = None

    def restart(self) -> ActiveMQBroker:
        """Clean stop, then start on the same ports and data."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's log (for failure messages)."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ActiveMQBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ActiveMQBroker stomp={self.stomp_port} openwire={self.openwire_port} pid={self.pid}>"


_live_brokers: weakref.WeakSet[ActiveMQBroker] = weakref.WeakSet()


@atexit.register
def _kill_leftover_brokers() -> None:
    for broker in list(_live_brokers):
        broker.kill()


# -- pytest fixtures ---------------------------------------------------------

_session_broker: ActiveMQBroker | None = None


def shared_broker(workdir: Path) -> ActiveMQBroker:
    """The one session-wide broker, started on first use (later calls reuse it).

    Memoized here rather than by pytest, so importing the fixture into several
    test modules still starts a single JVM; it stops at interpreter exit.  It
    has the ``stomp+ssl`` connectors too (certificates in ``workdir/tls``).
    """
    global _session_broker
    if _session_broker is None:
        _session_broker = ActiveMQBroker(workdir, tls=make_tls_files(workdir / "tls"))
    return _session_broker.start()


@pytest.fixture(scope="session")
def activemq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveMQBroker]:
    """A running ActiveMQ (KahaDB) shared by the whole session.

    Tests must use their own destination names; tests that stop or kill a
    broker use :func:`fresh_activemq` instead.
    """
    global _session_broker
    broker = shared_broker(tmp_path_factory.mktemp("activemq"))
    yield broker
    broker.stop()
    _session_broker = None


@pytest.fixture(scope="session")
def stock_activemq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveMQBroker]:
    """A running ActiveMQ as Debian installs it: without XStream/Jettison, so it
    closes the connection of a SUBSCRIBE that asks for a ``transformation``.
    Its own data directory and ports; shared by the session."""
    broker = ActiveMQBroker(tmp_path_factory.mktemp("stock-activemq"), xstream=False,
                            broker_name="jmsgw-stock").start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def fresh_activemq(tmp_path: Path) -> Iterator[ActiveMQBroker]:
    """A broker of its own for one test (may be killed and restarted); stopped afterwards."""
    broker = ActiveMQBroker(tmp_path / "activemq").start()
    try:
        yield broker
    finally:
        broker.kill()
