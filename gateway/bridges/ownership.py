"""One owner per bridge store: the lock a gateway (or ``jmsgateway bridge``) takes on
``<data_dir>/bridges.lock`` before it starts its bridges.

The model is ActiveMQ's shared-store master/slave: whoever holds the lock runs the bridges;
a second process on the same data directory stands by (no bridge consumes, one log line)
and takes over when the lock is free, its start being the normal start-up (the in-doubt
check included).  The lock is a POSIX record lock (``fcntl.lockf``): the kernel drops it when
the process dies, even by SIGKILL, and a child process (Kafka's consumer host) does not
inherit it.  It says nothing about two processes with *different* data directories: the
source's own exclusivity does that (docs/bridges.md, "One owner per bridge").
"""

from __future__ import annotations

import fcntl
import os

LOCK_FILE = "bridges.lock"


class BridgeStoreLock:
    """The lock on one data directory's bridge store (see the module docstring)."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free (never waits); True when this process holds it."""
        if self._fd is not None:
            return True
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid written by the process that holds the lock, or ``?``."""
        try:
            with open(self.path, encoding="ascii") as file:
                return file.read().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops a POSIX lock
