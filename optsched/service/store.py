"""Durable session state in SQLite (stdlib sqlite3, WAL).

Tables:

- ``sessions``: one row per session — the head of its state as one JSON
  document (config, clock, round counter, pending reports) and a version
  number, checked on every change;
- ``session_parts``: the session's large parts, one JSON document each
  (``allocator``: the allocator's state, ``allocation``: the allocation in
  force, ``last_round``), rewritten only by a change that alters them (a round);
- ``active_jobs``: a row per active job (its spec and bookkeeping), in
  arrival order (``ord``); a change rewrites only the jobs it touched, so a
  submit, an update or a progress report costs O(jobs in it), not O(active jobs);
- ``finished_jobs``: a row per finished job (written once, when it finishes);
- ``events``: an append-only log of the state changes (kind, request,
  summary), one row per committed change.

Every change is committed before the call returns (so before the service
answers); ``synchronous=FULL`` by default, so a committed change survives a
killed process and a power loss (``NORMAL``: a killed process only — no fsync
per commit, about 10x cheaper here). **Group commit**: one writer thread takes
every change waiting at that moment (from any session) into one transaction,
each change in its own savepoint (a failing change rolls back alone), and
fsyncs once for the group; each caller waits for its own change's outcome.
Reads use a second connection (WAL readers do not wait for the writer). The version column is checked on update: two servers writing
the same session through one database file is a conflict, not a lost update.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 2  # 1: the whole state in sessions.state (read and upgraded in place)
SYNC_MODES = ("FULL", "NORMAL", "OFF")
PARTS = ("allocator", "allocation", "last_round")  # a session's large parts, each its own row


@dataclass(frozen=True)
class StoredSession:
    head: str  # the state without its parts and active jobs (JSON)
    version: int
    parts: dict[str, str]  # name -> JSON
    jobs: list[tuple[str, int, str]]  # (job id, ord, record JSON) in arrival order


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL,
        created REAL NOT NULL, updated REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS finished_jobs (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        job_id TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (session_id, job_id))""",
    """CREATE TABLE IF NOT EXISTS events (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq))""",
    """CREATE TABLE IF NOT EXISTS session_parts (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        name TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, name))""",
    """CREATE TABLE IF NOT EXISTS active_jobs (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        job_id TEXT NOT NULL, ord INTEGER NOT NULL, record TEXT NOT NULL,
        PRIMARY KEY (session_id, job_id))""",
    "CREATE INDEX IF NOT EXISTS active_jobs_order ON active_jobs (session_id, ord)",
)


def _split_v1_sessions(db: sqlite3.Connection) -> None:
    """Schema 1 → 2 (inside the schema transaction): each session's one
    document becomes its head, its parts and one row per active job, in the
    document's (arrival) order."""
    for sid, text in db.execute("SELECT id, state FROM sessions").fetchall():
        doc = json.loads(text)
        jobs = doc.pop("jobs", {})
        parts = {p: json.dumps(doc.pop(p, None), separators=(",", ":"), allow_nan=False) for p in PARTS}
        doc["format"], doc["next_ord"] = 2, len(jobs)
        db.execute("UPDATE sessions SET state = ? WHERE id = ?", (json.dumps(doc, separators=(",", ":")), sid))
        _write_parts(db, sid, parts)
        db.executemany("INSERT INTO active_jobs (session_id, job_id, ord, record) VALUES (?, ?, ?, ?)",
                       [(sid, j, o, json.dumps(r, separators=(",", ":"))) for o, (j, r) in enumerate(jobs.items())])


def _write_parts(db: sqlite3.Connection, session_id: str, parts: dict[str, str]) -> None:
    if parts:
        db.executemany("INSERT OR REPLACE INTO session_parts (session_id, name, body) VALUES (?, ?, ?)",
                       [(session_id, name, body) for name, body in parts.items()])


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
        self._lock = threading.Lock()  # the read connection
        self._db = self._connect(sync)  # writes: only the writer thread (and schema set-up) use it
        self._init_schema()
        self._read = self._db if self.path == ":memory:" else self._connect(sync)
        self._queue: queue.Queue = queue.Queue()
        self.stats = {"groups": 0, "changes": 0, "commit_seconds": 0.0}  # group commit, for /healthz
        self._writer = threading.Thread(target=self._write_loop, name="optsched-store-writer", daemon=True)
        self._writer.start()

    def _connect(self, sync: str) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={sync}")
        db.execute("PRAGMA foreign_keys=ON")
        return db

    def _init_schema(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")  # two processes opening one file: one creates or upgrades
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"database {self.path} has schema version {version}, newer than this optsched ({SCHEMA_VERSION})")
            for statement in _SCHEMA:
                db.execute(statement)
            if version == 1:  # the first three tables only, each session's state in one document
                _split_v1_sessions(db)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


    # ------------------------------------------------------------------ writes

    def create(self, session_id: str, state: str, event: dict | None = None, parts: dict[str, str] | None = None) -> None:
        now = time.time()
        body = json.dumps(event or {}, allow_nan=False)

        def write(db: sqlite3.Connection) -> None:
            try:
                db.execute("INSERT INTO sessions (id, state, version, created, updated) VALUES (?, ?, 0, ?, ?)",
                           (session_id, state, now, now))
            except sqlite3.IntegrityError:
                raise StoreConflict(f"session {session_id!r} already exists") from None
            db.execute("INSERT INTO events (session_id, seq, at, kind, body) VALUES (?, 0, ?, 'create', ?)",
                       (session_id, now, body))
            _write_parts(db, session_id, parts or {})

        self._write(write)

    def commit(self, session_id: str, state: str, version: int, kind: str, event: dict,
               finished: list[tuple[str, str]] = (), parts: dict[str, str] | None = None,
               jobs: list[tuple[str, int, str]] = (), removed: list[str] = ()) -> None:
        """Write the head ``state`` as ``version`` (the row must be at version − 1),
        an event, finished-job records, the changed ``parts``, the changed active
        ``jobs`` (id, ord, record) and the ``removed`` ones, atomically; returns
        once durable."""
        now = time.time()
        body = json.dumps(event, allow_nan=False)

        def write(db: sqlite3.Connection) -> None:
            cur = db.execute("UPDATE sessions SET state = ?, version = ?, updated = ? WHERE id = ? AND version = ?",
                             (state, version, now, session_id, version - 1))
            if cur.rowcount != 1:
                raise StoreConflict(f"session {session_id!r} was changed or deleted by another writer")
            db.execute("INSERT INTO events (session_id, seq, at, kind, body) VALUES (?, ?, ?, ?, ?)",
                       (session_id, version, now, kind, body))
            if finished:
                db.executemany("INSERT INTO finished_jobs (session_id, job_id, record) VALUES (?, ?, ?)",
                               [(session_id, j, r) for j, r in finished])
            _write_parts(db, session_id, parts or {})
            if removed:
                db.executemany("DELETE FROM active_jobs WHERE session_id = ? AND job_id = ?",
                               [(session_id, j) for j in removed])
            if jobs:
                db.executemany("INSERT OR REPLACE INTO active_jobs (session_id, job_id, ord, record) VALUES (?, ?, ?, ?)",
                               [(session_id, j, o, r) for j, o, r in jobs])

        self._write(write)

    def delete(self, session_id: str) -> bool:
        return self._write(lambda db: db.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 1)

    def _write(self, fn):
        if not self._writer.is_alive():
            raise RuntimeError("the store is closed")
        fut: Future = Future()
        self._queue.put((fn, fut))
        return fut.result()

    def _write_loop(self) -> None:
        db = self._db
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < 512:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            outcomes: list = []
            t0 = time.perf_counter()
            try:
                db.execute("BEGIN IMMEDIATE")
                for fn, fut in batch:
                    db.execute("SAVEPOINT change")
                    try:
                        outcomes.append((fut, fn(db), None))
                        db.execute("RELEASE change")
                    except Exception as e:  # this change alone is undone
                        db.execute("ROLLBACK TO change")
                        db.execute("RELEASE change")
                        outcomes.append((fut, None, e))
                db.execute("COMMIT")
            except Exception as e:  # the group failed (disk full, I/O error): nobody's change is durable
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                outcomes = [(fut, None, e) for _, fut in batch]
            st = self.stats
            st["groups"], st["changes"] = st["groups"] + 1, st["changes"] + len(batch)
            st["commit_seconds"] += time.perf_counter() - t0
            for fut, result, exc in outcomes:
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)

    # ------------------------------------------------------------------ reads

    def _query(self, sql: str, args: tuple = ()) -> list:
        """Rows of a read. An in-memory database has one connection: its reads
        queue behind the writes (never seeing a change before it commits)."""
        if self._read is self._db:
            return self._write(lambda db: db.execute(sql, args).fetchall())
        with self._lock:
            return self._read.execute(sql, args).fetchall()

    def load(self, session_id: str) -> "StoredSession | None":
        """The session's head, version, parts and active jobs (in arrival order),
        read in one transaction (a consistent version)."""

        def read(db: sqlite3.Connection) -> StoredSession | None:
            row = db.execute("SELECT state, version FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                return None
            parts = dict(db.execute("SELECT name, body FROM session_parts WHERE session_id = ?", (session_id,)))
            jobs = db.execute("SELECT job_id, ord, record FROM active_jobs WHERE session_id = ? ORDER BY ord",
                              (session_id,)).fetchall()
            return StoredSession(row[0], int(row[1]), parts, jobs)

        if self._read is self._db:  # in memory: inside the writer's transaction
            return self._write(read)
        with self._lock:
            self._read.execute("BEGIN")  # one snapshot of the three tables
            try:
                return read(self._read)
            finally:
                self._read.execute("COMMIT")

    def finished_job(self, session_id: str, job_id: str) -> dict | None:
        rows = self._query("SELECT record FROM finished_jobs WHERE session_id = ? AND job_id = ?", (session_id, job_id))
        row = rows[0] if rows else None
        return None if row is None else json.loads(row[0])

    def finished_jobs(self, session_id: str, limit: int = 1000, offset: int = 0) -> list[dict]:
        rows = self._query("SELECT record FROM finished_jobs WHERE session_id = ? ORDER BY rowid LIMIT ? OFFSET ?",
                           (session_id, limit, offset))
        return [json.loads(r[0]) for r in rows]

    def events(self, session_id: str, after: int = -1, limit: int = 1000) -> list[dict]:
        rows = self._query("SELECT seq, at, kind, body FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                           (session_id, after, limit))
        return [{"seq": s, "at": a, "kind": k, "body": json.loads(b)} for s, a, k, b in rows]

    def session_ids(self, limit: int = 1000) -> list[str]:
        return [r[0] for r in self._query("SELECT id FROM sessions ORDER BY created, id LIMIT ?", (limit,))]

    def close(self) -> None:
        self._queue.put(None)
        self._writer.join(30)
        with self._lock:
            if self._read is not self._db:
                self._read.close()
            self._db.close()


