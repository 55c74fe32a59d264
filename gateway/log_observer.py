"""The gateway's log output: a level filter, text or JSON lines, and where they go.

Owns :class:`GatewayLogObserver`, which ``twistd jmsgateway`` installs in
place of twistd's default observer (``--log-level``, ``--log-format``,
``[gateway] log_level``; SIGHUP changes the level).  Events below the level
are dropped, and so are Twisted's ``Starting factory <... object at 0x...>``
lines unless the level is ``debug``.  Text is twistd's own format; JSON is
one object a line (``time``, ``level``, ``namespace``, ``message``, the
event's plain fields, ``traceback`` for a failure).  The destination is
twistd's: standard output in the foreground without ``--logfile``, else the
log file, which SIGUSR1 rotates (as twistd does).  Nothing else here: what to
log is each module's business.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Mapping
from typing import IO, Any, cast

from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    LogEvent,
    LogLevel,
    formatEvent,
    formatEventAsClassicLogText,
    formatTime,
)
from twisted.python.logfile import LogFile
from zope.interface import implementer

LEVELS: dict[str, LogLevel] = {level.name: level for level in LogLevel.iterconstants()}
"""Level names (``debug``, ``info``, ``warn``, ``error``, ``critical``) in increasing order."""
_RANK = {level: rank for rank, level in enumerate(LEVELS.values())}
FORMATS = ("text", "json")
NOISE_FORMATS = frozenset({"Starting factory {factory!r}", "Stopping factory {factory!r}"})
"""Twisted's per-factory lines, dropped unless the level is debug (they print object addresses)."""


_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code not in (0x09, 0x0A)}
"""Control characters a text log line shows escaped (``\\x1b``): a client's login, destination or
header value must not move a terminal's cursor, overwrite a line (CR), set its title or clear it."""


def escape_controls(text: str) -> str:
    r"""``text`` with every C0 and C1 control character but tab and line feed as ``\xNN``."""
    return text.translate(_CONTROLS)


def text_line_observer(stream: IO[str]) -> ILogObserver:
    """twistd's text lines (``textFileLogObserver``), with control characters escaped.

    Twisted already indents a message's further lines with a tab, so a line feed cannot start a
    line of its own; a carriage return or an ANSI escape sequence in a value a client chose would
    still reach the terminal of whoever reads the log (``cat``, ``tail -f``, ``journalctl``)."""

    def format_event(event: LogEvent) -> str | None:
        text = formatEventAsClassicLogText(event, formatTime=lambda when: formatTime(when))
        return None if text is None else escape_controls(text)

    return FileLogObserver(stream, format_event)


def parse_level(name: str) -> LogLevel:
    """The :class:`LogLevel` called ``name`` (``warning`` is ``warn``); ValueError naming the choices."""
    key = name.strip().lower()
    key = "warn" if key == "warning" else key
    if key not in LEVELS:
        raise ValueError(f"unknown log level {name!r}: one of {', '.join(LEVELS)}")
    return LEVELS[key]


def json_record(event: LogEvent) -> dict[str, Any]:
    """One event as a flat JSON-able dict."""
    level = event.get("log_level", LogLevel.info)
    record: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(event.get("log_time", time.time())))
        + f".{int((event.get('log_time', 0.0) % 1) * 1000):03d}Z",
        "level": getattr(level, "name", str(level)),
        "namespace": event.get("log_namespace", ""),
        "message": formatEvent(event),
    }
    for key, value in event.items():
        if key.startswith("log_") or key in record or key in ("format", "message", "isError", "system", "time"):
            continue
        if value is None or isinstance(value, bool | int | float | str):
            record[key] = value
    failure = event.get("log_failure")
    if failure is not None:
        record["traceback"] = failure.getTraceback()
    return record


def json_line_observer(stream: IO[str]) -> ILogObserver:
    """An observer writing :func:`json_record` lines to ``stream``."""

    @implementer(ILogObserver)
    def write(event: LogEvent) -> None:
        stream.write(json.dumps(json_record(event), ensure_ascii=False, default=str) + "\n")
        stream.flush()

    return cast(ILogObserver, write)  # (what @implementer returns is untyped)


@implementer(ILogObserver)
class GatewayLogObserver:
    """Filters events by level (settable while running) and hands the rest to ``sink``."""

    def __init__(self, sink: ILogObserver, level: LogLevel = LogLevel.info) -> None:
        self.sink = sink
        self.level = level

    def __call__(self, event: LogEvent) -> None:
        level = event.get("log_level", LogLevel.info)
        rank = _RANK.get(level, _RANK[LogLevel.info])
        if rank < _RANK[self.level]:
            return
        if self.level is not LogLevel.debug and event.get("log_format") in NOISE_FORMATS:
            return
        self.sink(event)


def log_stream(twistd_options: Mapping[str, Any]) -> IO[str]:
    """Where twistd would write: stdout in the foreground without ``--logfile`` (or with ``-``), else the
    log file (``twistd.log`` by default), rotated on SIGUSR1 as twistd does."""
    name = twistd_options.get("logfile") or ""
    if name == "-" or (twistd_options.get("nodaemon") and not name):
        return sys.stdout
    log_file = LogFile.fromFullPath(name or "twistd.log")
    if not signal.getsignal(signal.SIGUSR1):

        def rotate(signum: int, frame: Any) -> None:
            from twisted.internet import reactor

            reactor.callFromThread(log_file.rotate)  # type: ignore[attr-defined]

        signal.signal(signal.SIGUSR1, rotate)
    return cast(IO[str], log_file)  # (Twisted's LogFile is a file-like object, untyped)


def build_observer(twistd_options: Mapping[str, Any], log_format: str, level: LogLevel) -> GatewayLogObserver:
    """The observer ``twistd jmsgateway`` logs to."""
    stream = log_stream(twistd_options)
    sink = json_line_observer(stream) if log_format == "json" else text_line_observer(stream)
    return GatewayLogObserver(sink, level)
