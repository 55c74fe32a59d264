"""Free TCP ports on 127.0.0.1 (no two xdist workers given the same one), waiting for a port to accept
connections, and which ports a process itself listens on (``/proc``: Linux)."""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

LISTEN = "0A"
"""A socket's state in ``/proc/net/tcp`` when it listens."""


GIVEN_MEMORY = 1024
"""How many of the ports it handed out :func:`free_port` remembers (and does not hand out again)."""

_given: deque[int] = deque(maxlen=GIVEN_MEMORY)


def worker_share() -> tuple[int, int]:
    """(this pytest-xdist worker's index, how many workers there are); (0, 1) outside xdist."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return (int(worker) if worker.isdigit() else 0) % max(count, 1), max(count, 1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, from this xdist worker's share of the
    ports and not one this process handed out lately.

    The port is free only until someone binds it: two workers given the same port (or one test given
    it twice, for a gateway and its admin endpoint) would see the first bind win and the other start
    fail, or a test connect to the wrong listener.  The shares are ``(port >> 1) % workers``, so each
    worker has ports of either parity (Linux hands out odd ports for ``bind`` and even ones for
    ``connect``)."""
    worker, workers = worker_share()
    for _ in range(100 * workers):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if (port >> 1) % workers == worker and port not in _given:
            _given.append(port)
            return port
    raise RuntimeError(f"no free port of worker {worker}'s share in {100 * workers} tries")


def wait_for_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1") -> None:
    """Block until ``host:port`` accepts a TCP connection, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout}s") from None
            time.sleep(0.1)


def socket_inodes(pids: Iterable[int]) -> set[str]:
    """The inodes of the sockets these processes hold open (processes that ended are passed over)."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports (IPv4 and IPv6) that process ``pid`` itself listens on: a port another process
    took first is not among them, though it accepts connections."""
    inodes = socket_inodes([pid])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
