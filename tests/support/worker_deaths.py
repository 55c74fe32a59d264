"""How a pytest-xdist worker that died ended: a pytest plugin for the controller (``tests/conftest.py``
imports its hook; ``-p tests.support.worker_deaths`` loads it elsewhere).

pytest-xdist reports a dead worker as ``[gwN] node down: Not properly terminated`` and ``worker 'gwN'
crashed while running T``, whatever ended it, and two ends print nothing else: pytest-timeout's
thread method (its stack dump goes to the worker's standard output, which execnet points at
/dev/null; then ``os._exit(1)``), and a SIGSEGV in a thread of librdkafka (an in-process Kafka
client), which blocks every signal in its threads so the kernel bypasses faulthandler's handler and
kills the process as if there were none.  This module owns the line that tells them apart:
``[gwN] pid P ended by signal SIGSEGV`` (or ``with exit status 1``, SIGKILL, ...).
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any

EXIT_MEANINGS = {1: "pytest-timeout's os._exit(1) when a test runs past its timeout, or a sys.exit(1)"}
"""What an exit status of a worker that died usually means (for the line it prints)."""


def describe_end(status: int | None) -> str:
    """``Popen.returncode`` of a worker in words: the signal that killed it, or its exit status."""
    if status is None:
        return "still running 10 s after pytest-xdist saw it go down"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"ended by signal {name}"
    meaning = EXIT_MEANINGS.get(status)
    return f"ended with exit status {status}" + (f" ({meaning})" if meaning else "")


def worker_status(node: Any, wait: float = 10.0) -> tuple[int | None, int | None]:
    """``(pid, returncode)`` of the worker process behind pytest-xdist's ``node`` (execnet's popen;
    ``(None, None)`` when the gateway has none, e.g. a remote one)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if not isinstance(popen, subprocess.Popen):
        return None, None
    try:
        return popen.pid, popen.wait(wait)
    except subprocess.TimeoutExpired:
        return popen.pid, None


def pytest_testnodedown(node: Any, error: object | None) -> None:
    """(pytest-xdist hook, in the controller) A worker went down: if it died, print how."""
    if not error:
        return
    pid, status = worker_status(node)
    if pid is None:
        return
    name = getattr(getattr(node, "gateway", None), "id", "?")
    reporter = node.config.pluginmanager.get_plugin("terminalreporter")
    line = f"[{name}] pid {pid} {describe_end(status)}"
    if reporter is not None:
        reporter.write_line(line)
    else:  # pragma: no cover - pytest always has one unless -p no:terminal
        print(line)
