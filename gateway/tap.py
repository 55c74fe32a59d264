"""``twistd jmsgateway``: command-line options and the service tree.

:class:`Options` parses ``--config``, ``--listen`` (repeatable, replaces the
configured listeners), ``--data-dir`` and ``--set dotted.key=value``
(repeatable); :func:`makeService` loads the configuration (a bad one stops
start-up with one message naming file, key and problem) and returns the
:class:`GatewayService`, which starts the connectors (recovering stored
messages) before it opens any listener.  At start-up the process raises its
open-file limit to the hard limit (one descriptor per connection), and every
listener gets the configured listen backlog unless its spec names one; a native
crash (SIGSEGV ...) writes every thread's Python stack to standard error (faulthandler).
"""

from __future__ import annotations

import faulthandler
import gc
import os
import resource
import sys
from typing import Any

from twisted.application import internet, service
from twisted.internet import endpoints
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger
from twisted.python import usage

from gateway.app import Gateway, build_gateway
from gateway.config import DEFAULT_CONFIG, load_config
from gateway.errors import ConfigError, GatewayError
from gateway.stomp.listeners import listen_backlog, listener_for, os_backlog_limit, with_backlog

log = Logger()


class Options(usage.Options):
    """Options of ``twistd jmsgateway``."""

    synopsis = "[--config FILE] [--listen ENDPOINT]... [--data-dir DIR] [--set KEY=VALUE]..."
    optParameters = [
        ["config", "c", DEFAULT_CONFIG, "The TOML configuration file."],
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


GC_THRESHOLD = (10_000, 10, 10)
"""Collections of the cyclic garbage collector once the gateway runs: the first
generation every 10,000 allocations instead of Python's 700.  A message stream
allocates a few short-lived containers per message that reference counting
frees; at 700 the collector ran every ~100 messages and took a quarter of the
reactor thread's time while Kafka records were in flight (docs/kafka.md)."""


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
    """Starts connectors first, then the STOMP listeners; stops in reverse."""

    log = Logger()

    def __init__(self, gateway: Gateway, reactor: Any, *, log_on_console: bool = False) -> None:
        super().__init__()
        self.log_on_console = log_on_console
        """Whether the log goes to the console (``twistd -n`` without ``--logfile``): a start-up
        failure is then only logged, else logged and written once to the real standard error."""
        self.gateway = gateway
        self.reactor = reactor
        self.listeners: list[internet.StreamServerEndpointService] = []
        self.backlog = gateway.config.listen_backlog

    def startService(self) -> None:
        service.Service.startService(self)
        d: Deferred[Any] = self.gateway.start()
        d.addCallback(lambda _: self._listen())
        d.addCallback(lambda _: self._listen_admin())
        d.addErrback(self._failed)

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
            chosen = listener_for(spec, self.gateway.factory, self.reactor)  # plain or ws:<endpoint>
            self._serve(spec, with_backlog(chosen.endpoint, self.backlog), chosen.factory)
            self.log.info("jmsgateway listening for {what} on {endpoint} (listen backlog {backlog})",
                          what=chosen.description, endpoint=spec, backlog=self.backlog)

    def _listen_admin(self) -> None:
        """Open the admin endpoint's listeners (``[admin] listen``), if any."""
        settings = self.gateway.admin
        if not settings.listen:
            return
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
        # Nothing was started that needs a clean shutdown: leave with a failure status.
        self.reactor.callLater(0, os._exit, 1)

    def stopService(self) -> Deferred[Any]:
        d: Deferred[Any] = DeferredList([s.stopService() for s in self.listeners if s.running])
        d.addCallback(lambda _: self.gateway.stop())
        d.addErrback(self._stop_failed)  # shutdown goes on whatever failed
        service.Service.stopService(self)
        return d

    def _stop_failed(self, failure: Any) -> None:
        self.log.failure("jmsgateway did not stop cleanly", failure)


def enable_crash_traces() -> None:
    """On SIGSEGV, SIGFPE, SIGABRT, SIGBUS or SIGILL, write every thread's Python stack to
    the process's standard error (file descriptor 2, which twistd leaves alone when it
    logs to a file) before the process dies: a native crash leaves a trace to read."""
    stream = sys.__stderr__
    try:
        if stream is not None:
            faulthandler.enable(file=stream, all_threads=True)
    except (OSError, ValueError, AttributeError):  # no usable descriptor 2 (closed by the caller)
        log.warn("crash traces are off: standard error has no file descriptor")


def makeService(options: Options) -> GatewayService:
    """Build the gateway service tree from parsed options."""
    from twisted.internet import reactor

    overrides = list(options["set"])
    enable_crash_traces()
    raise_open_file_limit()
    try:
        config = load_config(options["config"], overrides)
        if options["listen"]:
            config.gateway.listen = list(options["listen"])
        if options["data-dir"]:
            config.gateway.data_dir = options["data-dir"]
        gateway = build_gateway(config, reactor)
    except ConfigError as error:
        raise SystemExit(f"jmsgateway: bad configuration: {error}") from None
    os.makedirs(config.data_dir, exist_ok=True)
    return GatewayService(gateway, reactor, log_on_console=_logs_to_console(options))


def _logs_to_console(options: usage.Options) -> bool:
    """Whether twistd (``options.parent``) logs to standard output: ``-n`` without ``--logfile`` or syslog."""
    parent = getattr(options, "parent", None)
    if parent is None:
        return False
    return bool(parent.get("nodaemon")) and not parent.get("syslog") and parent.get("logfile") in (None, "", "-")
