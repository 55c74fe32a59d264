"""``twistd jmsgateway``: command-line options and the service tree.

:class:`Options` parses ``--config``, ``--listen`` (repeatable, replaces the
configured listeners), ``--data-dir`` and ``--set dotted.key=value``
(repeatable); :func:`makeService` loads the configuration (a bad one stops
start-up with one message naming file, key and problem) and returns the
:class:`GatewayService`, which starts the connectors (recovering stored
messages) before it opens any listener; a second gateway on the same message store waits as a
standby until the store's lock is free (:mod:`gateway.ha`).  At start-up the process raises its
open-file limit to the hard limit (one descriptor per connection), and every
listener gets the configured listen backlog unless its spec names one; a native
crash (SIGSEGV ...) writes every thread's Python stack to standard error (faulthandler).
Run by twistd, it also picks the configuration file (:mod:`gateway.locations`), logs
through :mod:`gateway.log_observer` (``--log-level``, ``--log-format``), reloads on
SIGHUP (:mod:`gateway.reload`) and tells a daemonized start's parent the outcome.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import resource
import signal
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

from twisted.application import internet, service
from twisted.internet import endpoints
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import ILogObserver, Logger
from twisted.python import usage

from gateway.app import Gateway, build_gateway
from gateway.config import GatewayConfig, load_config
from gateway.errors import ConfigError, GatewayError
from gateway.ha.standby import RoleGate
from gateway.locations import choose_config
from gateway.log_observer import FORMATS, GatewayLogObserver, build_observer, parse_level
from gateway.reload import ConfigReloader
from gateway.stomp.listeners import listen_backlog, listener_for, os_backlog_limit, with_backlog
from gateway.wire.compiled import compiled_modules

log = Logger()


class Options(usage.Options):
    """Options of ``twistd jmsgateway``."""

    synopsis = "[--config FILE] [--listen ENDPOINT]... [--data-dir DIR] [--set KEY=VALUE]..."
    optParameters = [
        ["log-format", None, "text", "text (twistd's lines) or json (one JSON object a line)."],
        ["log-level", None, None, "Least level logged: debug, info, warn, error, critical "
                                  "(default: [gateway] log_level, info)."],
        ["config", "c", None, "The TOML configuration file (default: $JMSGATEWAY_CONFIG, ./etc/jmsgateway.toml, "
                              "/etc/jmsgateway/jmsgateway.toml, the packaged default, in this order)."],
        ["data-dir", "d", None, "Directory for stores (overrides gateway.data_dir)."],
    ]
    longdesc = (
        "A plugin-based STOMP gateway broker. Listeners are Twisted endpoint strings, e.g. "
        "tcp:61613:interface=127.0.0.1 or ssl:61614:privateKey=key.pem:certKey=cert.pem."
    )

    def __init__(self) -> None:
        super().__init__()
        self["listen"] = []
        self["set"] = []

    def opt_listen(self, endpoint: str) -> None:
        """A listening endpoint (repeatable); replaces the configured ones."""
        self["listen"].append(endpoint)

    def opt_set(self, assignment: str) -> None:
        """Override a config value: dotted.key=value, value typed as TOML (repeatable)."""
        if "=" not in assignment:
            raise usage.UsageError(f"--set {assignment!r}: expected dotted.key=value")
        self["set"].append(assignment)

    def postOptions(self) -> None:
        if self["log-format"] not in FORMATS:
            raise usage.UsageError(f"--log-format {self['log-format']!r}: one of {', '.join(FORMATS)}")
        if self["log-level"] is not None:
            try:
                parse_level(self["log-level"])
            except ValueError as error:
                raise usage.UsageError(f"--log-level: {error}") from None


GC_THRESHOLD = (10_000, 10, 10)
"""Collections of the cyclic garbage collector once the gateway runs: the first
generation every 10,000 allocations instead of Python's 700.  A message stream
allocates a few short-lived containers per message that reference counting
frees; at 700 the collector ran every ~100 messages and took a quarter of the
reactor thread's time while Kafka records were in flight (docs/kafka.md)."""


DAEMON_START_WAIT = 120.0
"""Seconds a daemonized start's parent waits for the listeners before it is told "started" anyway (a
connector that takes that long to start must not hang the shell or an init script)."""


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open files to its hard limit (every connection is a
    descriptor; shells often start at 1024); logs and returns ``(before, after)``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        log.info("open-file limit: {limit} (the hard limit)", limit=soft)
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as error:
        log.warn("open-file limit stays {soft}: cannot raise it to {hard}: {error}", soft=soft, hard=hard,
                 error=error)
        return soft, soft
    log.info("open-file limit raised from {soft} to {hard} (the hard limit)", soft=soft, hard=hard)
    return soft, hard


def tune_garbage_collector() -> None:
    """Freeze what start-up allocated (never scanned again) and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


class GatewayService(service.MultiService):
    """Starts connectors first, then the STOMP listeners; stops in reverse.

    Run by twistd (``twistd_options`` given), it also logs through ``observer``
    (set on the application as its :class:`ILogObserver`), reloads the
    configuration on SIGHUP (``reloader``), and reports a daemonized start's
    outcome to the waiting parent itself, once the listeners are open: a start
    that fails exits non-zero and removes its pid file."""

    log = Logger()

    def __init__(self, gateway: Gateway, reactor: Any, *, twistd_options: MutableMapping[str, Any] | None = None,
                 observer: GatewayLogObserver | None = None, reloader: ConfigReloader | None = None,
                 log_on_console: bool = False) -> None:
        super().__init__()
        self.log_on_console = log_on_console
        """Whether the log goes to the console (``twistd -n`` without ``--logfile``): a start-up
        failure is then only logged, else logged and written once to the real standard error."""
        self.gateway = gateway
        self.reactor = reactor
        self.listeners: list[internet.StreamServerEndpointService] = []
        self.backlog = gateway.config.listen_backlog
        self.twistd_options = twistd_options
        self.observer = observer
        self.reloader = reloader
        self._status_pipe: int | None = None
        self._admin_open = False
        self.gate: RoleGate | None = None

    def setServiceParent(self, parent: Any) -> None:
        super().setServiceParent(parent)
        if self.observer is not None and hasattr(parent, "setComponent"):
            parent.setComponent(ILogObserver, self.observer)  # twistd logs through it

    def startService(self) -> None:
        service.Service.startService(self)
        if self.twistd_options is not None:
            # twistd would tell a daemon's parent "started" now; we tell it once the listeners are open
            self._status_pipe = self.twistd_options.get("statusPipe")
            self.twistd_options["statusPipe"] = None
            if self._status_pipe is not None:
                self.reactor.callLater(DAEMON_START_WAIT, self._still_starting)
        if self.reloader is not None:
            reload = self.reloader.reload
            signal.signal(signal.SIGHUP, lambda signum, frame: self.reactor.callFromThread(reload))
        # active when the store's lock is free, else a standby until it is (gateway.ha)
        self.gate = RoleGate(self.gateway, self.reactor, activate=self._start_gateway,
                             standby_opened=self._standby_opened, failed=self._failed)
        self.gate.start()

    def _start_gateway(self) -> Deferred[Any]:
        """The start-up of the active gateway: connectors (recovering the store), bridges, listeners."""
        d: Deferred[Any] = self.gateway.start()
        d.addCallback(lambda _: self._listen())
        d.addCallback(lambda _: self._listen_admin())
        d.addCallback(lambda _: self._report_status(b"0"))
        return d

    def _standby_opened(self) -> None:
        """A standby: only the admin endpoint listens (a daemon's parent is told it started)."""
        self._listen_admin()
        self._report_status(b"0")

    def _still_starting(self) -> None:
        if self._status_pipe is not None:
            self.log.warn("still starting after {wait:.0f}s: the shell that started the daemon is told it started",
                          wait=DAEMON_START_WAIT)
            self._report_status(b"0")

    def _report_status(self, status: bytes) -> None:
        """Tell a daemonized start's waiting parent: ``0`` (started) or ``1 <why>`` (it exits 1)."""
        pipe, self._status_pipe = self._status_pipe, None
        if pipe is None:
            return
        with contextlib.suppress(OSError):
            os.write(pipe, status[:100])
            os.close(pipe)

    def _backlog(self) -> int:
        """The listen backlog: ``[gateway] listen_backlog`` capped at the OS limit (logged when capped)."""
        configured = self.gateway.config.listen_backlog
        limit = os_backlog_limit()
        backlog = listen_backlog(configured, limit)
        if backlog < configured:
            self.log.info("listen backlog {backlog}: the OS limit (net.core.somaxconn) is below the configured "
                          "{configured}", backlog=backlog, configured=configured)
        return backlog

    def _listen(self) -> None:
        tune_garbage_collector()
        self.backlog = self._backlog()
        for spec in self.gateway.config.listen:
            chosen = listener_for(spec, self.gateway.factory, self.reactor,  # plain or ws:<endpoint>
                                  self.gateway.config.gateway.allowed_origins)
            self._serve(spec, with_backlog(chosen.endpoint, self.backlog), chosen.factory)
            self.log.info("jmsgateway listening for {what} on {endpoint} (listen backlog {backlog})",
                          what=chosen.description, endpoint=spec, backlog=self.backlog)

    def _listen_admin(self) -> None:
        """Open the admin endpoint's listeners (``[admin] listen``), if any."""
        settings = self.gateway.admin
        if not settings.listen or self._admin_open:
            return
        self._admin_open = True
        from gateway.admin.site import admin_site

        site = admin_site(self.gateway, settings)
        guarded = "HTTP Basic authentication" if self.gateway.portal is not None else "NO authentication"
        for spec in settings.listen:
            self._serve(spec, with_backlog(spec, self.backlog), site, " (admin)")
            self.log.info("jmsgateway admin endpoint on {endpoint} ({guarded})", endpoint=spec, guarded=guarded)

    def _serve(self, spec: str, endpoint_spec: str, factory: Any, what: str = "") -> None:
        """Listen on ``endpoint_spec`` with ``factory``; GatewayError naming ``spec`` if it cannot."""
        try:
            endpoint = endpoints.serverFromString(self.reactor, endpoint_spec)
            listener = internet.StreamServerEndpointService(endpoint, factory)
            listener._raiseSynchronously = True
            listener.setServiceParent(self)
        except Exception as error:  # a bad endpoint string, a TLS file, a port in use ...
            raise GatewayError(f"cannot listen on {spec!r}{what}: {error}") from error
        self.listeners.append(listener)

    def _failed(self, failure: Any) -> None:
        error = failure.value
        message = str(error) if isinstance(error, GatewayError | OSError) else failure.getTraceback()
        self.log.critical("jmsgateway cannot start: {message}", message=message)
        console = sys.__stderr__  # twistd sends sys.stderr into the log: that would be a second copy there
        if not self.log_on_console and console is not None:
            print(f"jmsgateway cannot start: {message}", file=console, flush=True)
        pidfile = (self.twistd_options or {}).get("pidfile")
        if pidfile:  # before the status: the waiting parent exits on it, and no pidfile may outlive that
            with contextlib.suppress(OSError):
                os.unlink(pidfile)
        self._report_status(b"1 " + message.encode("utf-8", "replace"))
        # Nothing was started that needs a clean shutdown: leave with a failure status.
        self.reactor.callLater(0, os._exit, 1)

    def stopService(self) -> Deferred[Any]:
        d: Deferred[Any] = DeferredList([s.stopService() for s in self.listeners if s.running])
        if self.gate is not None:
            self.gate.stop()
        if self.gate is None or self.gate.activated:  # (a standby started nothing)
            d.addCallback(lambda _: self.gateway.stop())
        d.addErrback(self._stop_failed)  # shutdown goes on whatever failed
        service.Service.stopService(self)
        return d

    def _stop_failed(self, failure: Any) -> None:
        self.log.failure("jmsgateway did not stop cleanly", failure)


def check_listeners(gateway: Gateway, reactor: Any) -> None:
    """Parse every listener spec (``[gateway] listen``, ``[admin] listen``) as start-up does, without
    listening; ConfigError naming the key of the first bad one."""
    backlog = listen_backlog(gateway.config.listen_backlog, os_backlog_limit())
    specs = [(f"gateway.listen[{index}]", spec, True) for index, spec in enumerate(gateway.config.listen)]
    specs += [(f"admin.listen[{index}]", spec, False) for index, spec in enumerate(gateway.admin.listen)]
    for key, spec, stomp in specs:
        try:
            endpoint = listener_for(spec, gateway.factory, reactor).endpoint if stomp else spec
            endpoints.serverFromString(reactor, with_backlog(endpoint, backlog))
        except Exception as error:  # Twisted raises ValueError, KeyError, TypeError, OSError ... for a bad spec
            raise ConfigError(f"not a listener endpoint {spec!r} (e.g. \"tcp:61613:interface=127.0.0.1\"): "
                              f"{error}", path=gateway.config.path, key=key) from None


def enable_crash_traces() -> None:
    """On SIGSEGV, SIGFPE, SIGABRT, SIGBUS or SIGILL, write every thread's Python stack to
    the process's standard error (file descriptor 2, which twistd leaves alone when it
    logs to a file) before the process dies: a native crash leaves a trace to read.

    Not one in a thread that blocks those signals, as librdkafka's threads (``rdk:*``) block
    every signal: the kernel then kills the process as if there were no handler, with no trace
    here and no ``segfault at`` line in the kernel log either; only the exit status (SIGSEGV)
    and a core dump, where enabled, tell.  (Its consumers run in child processes for that
    reason: :mod:`gateway.connectors.kafka_consumer_host`.)"""
    stream = sys.__stderr__
    try:
        if stream is not None:
            faulthandler.enable(file=stream, all_threads=True)
    except (OSError, ValueError, AttributeError):  # no usable descriptor 2 (closed by the caller)
        log.warn("crash traces are off: standard error has no file descriptor")


def makeService(options: Options) -> GatewayService:
    """Build the gateway service tree from parsed options."""
    from twisted.internet import reactor

    twistd_options = getattr(options, "parent", None)  # twistd's own options when twistd runs us
    enable_crash_traces()
    try:
        chosen = choose_config(options["config"])
        load = configuration_loader(chosen.path, options)
        config = load()
        level = parse_level(options["log-level"] or config.gateway.log_level)
        observer = None
        if twistd_options is not None and not twistd_options.get("syslog") and not twistd_options.get("logger"):
            observer = build_observer(twistd_options, options["log-format"], level)
        log.info("configuration {path} ({reason})", path=os.path.abspath(chosen.path), reason=chosen.reason)
        raise_open_file_limit()
        gateway = build_gateway(config, reactor)
    except ConfigError as error:
        raise SystemExit(f"jmsgateway: bad configuration: {error}") from None
    os.makedirs(config.data_dir, exist_ok=True)
    log.info("data directory {path}", path=os.path.abspath(config.data_dir))
    log_hot_modules()
    reloader = None
    if twistd_options is not None:
        reloader = ConfigReloader(gateway, load, reactor, observer, level_fixed=options["log-level"] is not None)
    return GatewayService(gateway, reactor, twistd_options=twistd_options, observer=observer, reloader=reloader,
                          log_on_console=_logs_to_console(options))


def log_hot_modules() -> None:
    """Says at start-up whether the hot modules run compiled (mypyc, ``pip install .``) or as pure Python."""
    compiled = compiled_modules()
    if compiled:
        log.info("hot modules compiled (mypyc): {modules}", modules=", ".join(compiled))
    else:
        log.info("hot modules run as pure Python (an editable install, a checkout on PYTHONPATH, "
                 "JMSGATEWAY_MYPYC=0 or no C compiler at install: docs/performance.md)")


def configuration_loader(path: str, options: Options) -> Callable[[], GatewayConfig]:
    """Loads ``path`` with the command line's ``--set``, ``--listen`` and ``--data-dir`` applied
    (at start-up and on every SIGHUP)."""

    def load() -> GatewayConfig:
        config = load_config(path, list(options["set"]))
        if options["listen"]:
            config.gateway.listen = list(options["listen"])
        if options["data-dir"]:
            config.gateway.data_dir = options["data-dir"]
        return config

    return load


def _logs_to_console(options: usage.Options) -> bool:
    """Whether twistd (``options.parent``) logs to standard output: ``-n`` without ``--logfile`` or syslog."""
    parent = getattr(options, "parent", None)
    if parent is None:
        return False
    return bool(parent.get("nodaemon")) and not parent.get("syslog") and parent.get("logfile") in (None, "", "-")
