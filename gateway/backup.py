"""``jmsgateway backup DEST`` and ``jmsgateway restore SRC``: the files of one installation.

What matters under ``data_dir``: the message store (``[broker] database``,
``broker.sqlite``), the bridges' duplicate store (``bridges.sqlite``), the owners of
durable subscriptions at connectors (``durable-owners.sqlite``), the scheduled messages
(``schedule.sqlite``) and the
installation's id (``gateway.id``).  The page file holds only non-persistent
messages and is deleted at every start: it is not backed up.

:func:`backup` runs while the gateway runs: each SQLite file is copied with
SQLite's online backup API in one step (one read transaction, so the copy is
the database as of one commit: every message receipted before the backup
began is in it, a message whose SEND was still in flight may or may not be),
checked (``PRAGMA quick_check``), fsynced and renamed into ``DEST``, a new
directory, with the configuration in use and a ``MANIFEST.json``.
:func:`restore` puts a backup back into a stopped gateway's ``data_dir``:
it refuses while the store is locked by a running gateway, and moves what is
there aside (``before-restore-<time>/``) only with ``force``.  Nothing here
runs in the reactor; both are command-line operations.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass

from gateway.bridges.qos import DEDUP_DATABASE
from gateway.broker.scheduler import SCHEDULE_DATABASE
from gateway.config import GatewayConfig
from gateway.errors import GatewayError
from gateway.identity import ID_FILE
from gateway.stomp.durable_owners import FILE_NAME as DURABLE_OWNERS_FILE

MANIFEST = "MANIFEST.json"
CONFIG_COPY = "jmsgateway.toml"


class BackupError(GatewayError):
    """A backup or restore that cannot be done (the message says what and where)."""


@dataclass(frozen=True, slots=True)
class DataFile:
    """One file of an installation: its name in a backup, its path under ``data_dir``, whether SQLite."""

    name: str
    path: str
    database: bool


def data_files(config: GatewayConfig) -> list[DataFile]:
    """The files that matter for ``config``, whether or not they exist yet."""
    files = []
    if config.broker.persistence == "sqlite":
        files.append(DataFile("broker.sqlite", config.data_path(config.broker.database), True))
    files.append(DataFile(DEDUP_DATABASE, config.data_path(DEDUP_DATABASE), True))
    files.append(DataFile(ID_FILE, config.data_path(ID_FILE), False))
    files.append(DataFile(DURABLE_OWNERS_FILE, config.data_path(DURABLE_OWNERS_FILE), True))
    if config.broker.persistence == "sqlite":
        files.append(DataFile(SCHEDULE_DATABASE, config.data_path(SCHEDULE_DATABASE), True))
    return files


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check(path: str) -> None:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
    finally:
        db.close()
    if problems != ["ok"]:
        raise BackupError(f"the copy {path} does not check: {'; '.join(problems[:3])}")


def copy_database(source: str, target: str) -> None:
    """An online copy of the SQLite database ``source`` (written by another process meanwhile) to
    ``target``, in one step; checked and fsynced."""
    temporary = f"{target}.partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as error:
        raise BackupError(f"cannot open {source}: {error}") from None
    try:
        dst = sqlite3.connect(temporary)
        try:
            src.backup(dst, pages=-1)  # every page in one read transaction: one commit's state
            dst.execute("PRAGMA journal_mode = DELETE")
        finally:
            dst.close()
    except sqlite3.Error as error:
        raise BackupError(f"cannot copy {source}: {error}") from None
    finally:
        src.close()
    _check(temporary)
    _fsync(temporary)
    os.replace(temporary, target)


def copy_file(source: str, target: str) -> None:
    """A plain copy, fsynced, put in place by a rename."""
    temporary = f"{target}.partial"
    shutil.copyfile(source, temporary)
    _fsync(temporary)
    os.replace(temporary, target)


def _sync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(config: GatewayConfig, destination: str) -> list[str]:
    """Copy the installation's files to the new directory ``destination``; the names copied."""
    if os.path.exists(destination) and (not os.path.isdir(destination) or os.listdir(destination)):
        raise BackupError(f"{destination} exists and is not an empty directory: give a new one")
    os.makedirs(destination, exist_ok=True)
    copied: list[dict[str, object]] = []
    started = time.time()
    for item in data_files(config):
        if not os.path.exists(item.path):
            continue
        target = os.path.join(destination, item.name)
        (copy_database if item.database else copy_file)(item.path, target)
        copied.append({"name": item.name, "from": os.path.abspath(item.path), "bytes": os.path.getsize(target)})
    if config.path and os.path.isfile(config.path):
        copy_file(config.path, os.path.join(destination, CONFIG_COPY))
    manifest = {"format": 1, "gateway_id": config.id, "started": started, "finished": time.time(),
                "configuration": os.path.abspath(config.path) if config.path else "", "files": copied}
    with open(os.path.join(destination, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    _sync_directory(destination)
    return [str(entry["name"]) for entry in copied]


@contextlib.contextmanager
def stopped_store(config: GatewayConfig) -> Iterator[None]:
    """Hold the message store's lock (the one a running gateway holds); BackupError if it is taken."""
    files = [f for f in data_files(config) if f.name == "broker.sqlite" and os.path.exists(f.path)]
    if not files:
        yield
        return
    fd = os.open(files[0].path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(f"{files[0].path} is in use by a running gateway: stop it first") from None
        yield
    finally:
        os.close(fd)


def restore(config: GatewayConfig, source: str, *, force: bool = False) -> tuple[list[str], str | None]:
    """Put the backup in ``source`` into ``config``'s data directory (the gateway stopped).

    :return: the names restored, and where the files that were there went (None: there were none).
    """
    try:
        with open(os.path.join(source, MANIFEST), encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as error:
        raise BackupError(f"{source} is not a jmsgateway backup ({MANIFEST}: {error})") from None
    names = {str(entry["name"]) for entry in manifest.get("files", [])}
    wanted = [f for f in data_files(config) if f.name in names]
    for item in wanted:
        if item.database:
            _check(os.path.join(source, item.name))
    os.makedirs(config.data_dir, exist_ok=True)
    with stopped_store(config):
        present = [f for f in data_files(config)
                   if any(os.path.exists(f.path + suffix) for suffix in ("", "-wal", "-shm"))]
        aside = None
        if present:
            if not force:
                raise BackupError(f"{config.data_dir} already holds {', '.join(f.name for f in present)}: "
                                  f"restore with --force to move them aside first")
            aside = os.path.join(config.data_dir, time.strftime("before-restore-%Y%m%dT%H%M%SZ", time.gmtime()))
            os.makedirs(aside)
            for item in present:
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(item.path + suffix):
                        os.replace(item.path + suffix, os.path.join(aside, os.path.basename(item.path) + suffix))
        for item in wanted:
            os.makedirs(os.path.dirname(os.path.abspath(item.path)), exist_ok=True)
            copy_file(os.path.join(source, item.name), item.path)
        _sync_directory(config.data_dir)
    return [f.name for f in wanted], aside
