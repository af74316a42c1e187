"""Durable session state in SQLite (stdlib sqlite3, WAL).

Tables:

- ``sessions``: one row per session — its whole state as one JSON document
  (config, active jobs with their bookkeeping, the allocator's state, the
  allocation in force, the round counter) and a version number;
- ``finished_jobs``: a row per finished job (written once, when it finishes),
  so the session's row stays the size of its active set;
- ``events``: an append-only log of the state changes (kind, request,
  summary), one row per committed change.

Every change is one transaction (``BEGIN IMMEDIATE`` … ``COMMIT``) written
before the service answers; ``synchronous=FULL`` by default, so a committed
change survives a killed process and a power loss (``NORMAL``: a killed
process only). The version column is checked on update: two servers writing
the same session through one database file is a conflict, not a lost update.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

SCHEMA_VERSION = 1
SYNC_MODES = ("FULL", "NORMAL", "OFF")


class StoreConflict(Exception):
    """The session's row changed under us (another process), or already exists."""


class Store:
    def __init__(self, path: str | Path = ":memory:", synchronous: str = "FULL"):
        sync = synchronous.upper()
        if sync not in SYNC_MODES:
            raise ValueError(f"synchronous: choose from {', '.join(SYNC_MODES)} (got {synchronous!r})")
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={sync}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._init_schema()

    def _init_schema(self) -> None:
        with self._lock:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"database {self.path} has schema version {version}, newer than this optsched ({SCHEMA_VERSION})")
            self._db.executescript(
                """
                BEGIN;
                CREATE TABLE IF NOT EXISTS sessions (
                    id TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL,
                    created REAL NOT NULL, updated REAL NOT NULL);
                CREATE TABLE IF NOT EXISTS finished_jobs (
                    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                    job_id TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (session_id, job_id));
                CREATE TABLE IF NOT EXISTS events (
                    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                    seq INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
                    PRIMARY KEY (session_id, seq));
                PRAGMA user_version = 1;
                COMMIT;
                """
            )

    # ------------------------------------------------------------------ writes

    def create(self, session_id: str, state: str, event: dict | None = None) -> None:
        now = time.time()
        with self._lock, _transaction(self._db):
            try:
                self._db.execute("INSERT INTO sessions (id, state, version, created, updated) VALUES (?, ?, 0, ?, ?)",
                                 (session_id, state, now, now))
            except sqlite3.IntegrityError:
                raise StoreConflict(f"session {session_id!r} already exists") from None
            self._db.execute("INSERT INTO events (session_id, seq, at, kind, body) VALUES (?, 0, ?, 'create', ?)",
                             (session_id, now, json.dumps(event or {}, allow_nan=False)))

    def commit(self, session_id: str, state: str, version: int, kind: str, event: dict,
               finished: list[tuple[str, str]] = ()) -> None:
        """Write the state as ``version`` (the row must be at version − 1), an
        event and finished-job records, in one transaction."""
        now = time.time()
        with self._lock, _transaction(self._db):
            cur = self._db.execute("UPDATE sessions SET state = ?, version = ?, updated = ? WHERE id = ? AND version = ?",
                                   (state, version, now, session_id, version - 1))
            if cur.rowcount != 1:
                raise StoreConflict(f"session {session_id!r} was changed or deleted by another writer")
            self._db.execute("INSERT INTO events (session_id, seq, at, kind, body) VALUES (?, ?, ?, ?, ?)",
                             (session_id, version, now, kind, json.dumps(event, allow_nan=False)))
            if finished:
                self._db.executemany("INSERT INTO finished_jobs (session_id, job_id, record) VALUES (?, ?, ?)",
                                     [(session_id, j, r) for j, r in finished])

    def delete(self, session_id: str) -> bool:
        with self._lock, _transaction(self._db):
            return self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 1

    # ------------------------------------------------------------------ reads

    def load(self, session_id: str) -> tuple[str, int] | None:
        with self._lock:
            row = self._db.execute("SELECT state, version FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else (row[0], int(row[1]))

    def finished_job(self, session_id: str, job_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM finished_jobs WHERE session_id = ? AND job_id = ?",
                                   (session_id, job_id)).fetchone()
        return None if row is None else json.loads(row[0])

    def finished_jobs(self, session_id: str, limit: int = 1000, offset: int = 0) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT record FROM finished_jobs WHERE session_id = ? ORDER BY rowid LIMIT ? OFFSET ?",
                                    (session_id, limit, offset)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def events(self, session_id: str, after: int = -1, limit: int = 1000) -> list[dict]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, at, kind, body FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (session_id, after, limit)).fetchall()
        return [{"seq": s, "at": a, "kind": k, "body": json.loads(b)} for s, a, k, b in rows]

    def session_ids(self, limit: int = 1000) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT id FROM sessions ORDER BY created, id LIMIT ?", (limit,))]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _transaction:
    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
