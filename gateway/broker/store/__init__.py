"""Message stores of the embedded broker: the snapshot a store recovers
(:mod:`.snapshot`), the memory store (:mod:`.memory_store`) and the SQLite store
(:mod:`.sqlite_store` and its ``sqlite_*`` parts)."""
