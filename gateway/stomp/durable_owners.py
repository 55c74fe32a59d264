"""Owners of the durable subscriptions that live at a connector (ActiveMQ over stomp://, the JMS
API, Kafka): (connector name, client-id, subscription name) -> the login that created it.

Through a connector the gateway uses one broker account, so the broker cannot tell logins apart;
this registry lets the STOMP session refuse another login's SUBSCRIBE or UNSUBSCRIBE naming the
durable, as the embedded broker does with its own ``durables.owner`` column.

The owners are kept in memory and in a small SQLite file in the data directory (``durable-owners.sqlite``,
opened at the first change, so a gateway that never records one writes nothing).  Changes are rare
(a durable's first SUBSCRIBE, its owner's UNSUBSCRIBE); each is one short transaction in WAL mode with
``synchronous = NORMAL`` (no fsync on the reactor).  An entry is removed when its owner UNSUBSCRIBEs
the durable, so the registry holds at most one row per live durable subscription.
"""

from __future__ import annotations

import os
import sqlite3

from twisted.logger import Logger

FILE_NAME = "durable-owners.sqlite"
"""The registry's file in the data directory."""

Key = tuple[str, str, str]
"""(connector name, client-id, subscription name)."""


def broker_name(client_id: str, name: str) -> str:
    """The name a connector's broker knows the durable by (``client-id.name``, as the stomp:// connector
    and Kafka's group names build it): two keys with one such name are the same durable there."""
    return f"{client_id}.{name}" if client_id else name


class DurableOwners:
    """The login owning each connector-backed durable subscription, persistent across restarts."""

    log = Logger()

    def __init__(self, path: str) -> None:
        self.path = path
        self._owners: dict[Key, str] = {}
        self._by_broker_name: dict[tuple[str, str], Key] = {}
        """(connector, :func:`broker_name`) -> the key recorded under it."""
        self._db: sqlite3.Connection | None = None
        self._loaded = False
        """Read at the first use, not at construction: a standby on the same data directory
        (docs/high-availability.md) reads what the active gateway wrote until it took over."""

    def owner(self, connector: str, client_id: str, name: str) -> str | None:
        """The login that created the durable (None: no entry), also when it was recorded under another
        client-id and name that reach the same durable at the broker (``a`` + ``b.c`` and ``a.b`` + ``c``)."""
        self._load()
        owner = self._owners.get((connector, client_id, name))
        if owner is None:
            key = self._by_broker_name.get((connector, broker_name(client_id, name)))
            owner = self._owners.get(key) if key is not None else None
        return owner

    def claim(self, connector: str, client_id: str, name: str, login: str) -> bool:
        """Record ``login`` as the owner unless the durable has one; True when it was recorded now."""
        key = (connector, client_id, name)
        if self.owner(*key) is not None:
            return False
        self._remember(key, login)
        self._write("INSERT OR REPLACE INTO owners (connector, client_id, name, login) VALUES (?, ?, ?, ?)",
                    (*key, login))
        return True

    def release(self, connector: str, client_id: str, name: str) -> None:
        """Forget the durable's owner (its owner unsubscribed it, or a claim's SUBSCRIBE failed)."""
        self._load()
        key = (connector, client_id, name)
        if self._owners.pop(key, None) is not None:
            self._by_broker_name.pop((connector, broker_name(client_id, name)), None)
            self._write("DELETE FROM owners WHERE connector = ? AND client_id = ? AND name = ?",
                        (connector, client_id, name))

    def __len__(self) -> int:
        self._load()
        return len(self._owners)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS owners (connector TEXT NOT NULL, client_id TEXT NOT NULL, "
                       "name TEXT NOT NULL, login TEXT NOT NULL, PRIMARY KEY (connector, client_id, name))")
            self._db = db
        return self._db

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if not os.path.exists(self.path):
            return
        rows = self._connection().execute("SELECT connector, client_id, name, login FROM owners").fetchall()
        for connector, client_id, name, login in rows:
            self._remember((connector, client_id, name), login)

    def _remember(self, key: Key, login: str) -> None:
        self._owners[key] = login
        self._by_broker_name[(key[0], broker_name(key[1], key[2]))] = key

    def _write(self, statement: str, values: tuple[str, ...]) -> None:
        try:
            self._connection().execute(statement, values)
        except sqlite3.Error as error:  # (the in-memory owner still holds for this run)
            self.log.error("could not record a durable subscription's owner in {path}: {error}",
                           path=self.path, error=error)
