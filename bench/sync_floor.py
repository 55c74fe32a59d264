"""Issue 39: what one synchronous disk write costs on this host, the floor under a RECEIPT per persistent SEND.

Times, in a directory of the disk under test (default: a temporary one), 2,000 writes of 200 bytes each followed by
``fdatasync`` (and by ``fsync``) to a file that grows with each write and to one preallocated (a journal reusing
its file), and the ``COMMIT`` of one 200-byte row in SQLite with WAL and ``synchronous = FULL`` (the gateway's
store settings), after 2,000 commits of warm-up. Prints the median and p90 in µs.

Run: ``python -m bench.sync_floor [DIRECTORY] [--count N]``
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable

RECORD = b"x" * 200


def _percentiles(samples: list[int]) -> tuple[float, float]:
    samples.sort()
    return samples[len(samples) // 2] / 1000, samples[int(len(samples) * 0.9)] / 1000


def file_syncs(directory: str, count: int, preallocated: bool, sync: Callable[[int], None]) -> tuple[float, float]:
    """Median and p90 µs of a 200-byte write plus ``sync`` to a growing or a preallocated file."""
    path = os.path.join(directory, "sync-floor.dat")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        if preallocated:
            os.write(fd, b"\0" * (count * len(RECORD) + 4096))
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        samples = []
        for _ in range(count):
            began = time.perf_counter_ns()
            os.write(fd, RECORD)
            sync(fd)
            samples.append(time.perf_counter_ns() - began)
    finally:
        os.close(fd)
        os.unlink(path)
    return _percentiles(samples)


def sqlite_commits(directory: str, count: int, page_size: int = 4096) -> tuple[float, float]:
    """Median and p90 µs of the ``COMMIT`` of one 200-byte row (WAL, ``synchronous = FULL``)."""
    path = os.path.join(directory, "sync-floor.db")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute(f"PRAGMA page_size = {page_size}")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = FULL")
        connection.execute("CREATE TABLE messages (seq INTEGER PRIMARY KEY, destination TEXT, id TEXT UNIQUE, "
                           "body BLOB)")
        samples = []
        for n in range(2000 + count):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO messages (destination, id, body) VALUES (?, ?, ?)",
                               ("/queue/a", f"m{n}", RECORD))
            began = time.perf_counter_ns()
            connection.execute("COMMIT")
            if n >= 2000:
                samples.append(time.perf_counter_ns() - began)
    finally:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    return _percentiles(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", help="a directory on the disk under test (default: a temporary one)")
    parser.add_argument("--count", type=int, default=2000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=options.directory) as directory:
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
              f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}, directory {directory}")
        for name, preallocated, sync in (("growing, fdatasync", False, os.fdatasync),
                                         ("preallocated, fdatasync", True, os.fdatasync),
                                         ("growing, fsync", False, os.fsync),
                                         ("preallocated, fsync", True, os.fsync)):
            median, p90 = file_syncs(directory, options.count, preallocated, sync)
            print(f"  {name:<28} median {median:7.1f} µs   p90 {p90:7.1f} µs")
        for page_size in (4096, 1024):
            median, p90 = sqlite_commits(directory, options.count, page_size)
            print(f"  SQLite WAL COMMIT, page {page_size:<5} median {median:7.1f} µs   p90 {p90:7.1f} µs")


if __name__ == "__main__":
    main()
