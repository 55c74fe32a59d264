"""The message store's file lock: whoever holds it is the active gateway.

The SQLite store locks its file with ``flock(LOCK_EX)`` for one process
(:mod:`gateway.broker.store.sqlite_store`); a second gateway on the same data
directory takes the same lock here first, without blocking, and waits as a
standby when it cannot.  The wait is a blocking ``flock`` (never a timeout or a
timing-based election): the kernel (or the shared file system's lock manager)
gives the lock to the waiter the moment the holder's process dies or closes it.

A file system that accepts ``flock`` without enforcing it would let two gateways
both be active: :meth:`StoreLock.try_acquire` checks that a second open of the
file cannot take the lock and refuses to start otherwise.  Nothing here touches
SQLite; the lock is handed to the store (:meth:`SqliteStore.adopt_lock`).
"""

from __future__ import annotations

import fcntl
import os

from gateway.errors import GatewayError


class LocksNotEnforced(GatewayError):
    """The data directory's file system does not enforce file locks (or refuses them)."""


def _no_locks(path: str, why: str) -> LocksNotEnforced:
    return LocksNotEnforced(
        f"the file system of {path} {why}: two gateways on this data directory could both be active, so "
        "this one does not start (put data_dir on a local disk or on a shared volume with working POSIX "
        "locks: NFSv4, or NFSv3 with lockd; see docs/high-availability.md)"
    )


class StoreLock:
    """The exclusive ``flock`` on ``path`` (the store's database file), held by an open descriptor."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.fd: int | None = None
        """The descriptor holding the lock (None: not held, or handed over)."""

    def _open(self) -> int:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise GatewayError(f"message store {self.path} cannot be opened: {error.strerror or error}") from None

    def try_acquire(self) -> bool:
        """Take the lock if it is free (True); False while another process holds it.

        :raises LocksNotEnforced: the file system refuses locks or does not enforce them.
        """
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as error:  # ENOLCK, EOPNOTSUPP ...: no locks at all
            os.close(fd)
            raise _no_locks(self.path, f"refuses file locks ({error.strerror or error})") from None
        return self._held(fd)

    def wait(self) -> None:
        """Block until the lock is ours (run in a thread of its own, never the reactor's).

        :raises LocksNotEnforced: as :meth:`try_acquire`.
        """
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as error:
            os.close(fd)
            raise _no_locks(self.path, f"refuses file locks ({error.strerror or error})") from None
        self._held(fd)

    def _held(self, fd: int) -> bool:
        """Keep ``fd`` as the holder once a second descriptor is shown not to get the lock too."""
        probe = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            enforced = True  # (BlockingIOError: the lock excludes, as it must)
        else:
            enforced = False
        finally:
            os.close(probe)  # (a flock belongs to its open file: closing the probe leaves fd's lock alone)
        if not enforced:
            os.close(fd)
            raise _no_locks(self.path, "does not enforce file locks (a second open of the file got the lock too)")
        self.fd = fd
        return True

    def hand_over(self) -> int:
        """The held descriptor, now the caller's to keep open (the lock lasts while it is open)."""
        fd, self.fd = self.fd, None
        if fd is None:
            raise GatewayError(f"the lock on {self.path} is not held")
        return fd

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
