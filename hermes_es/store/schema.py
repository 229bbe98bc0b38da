"""DDL of the event log and the reader-position (tracking) table."""

from __future__ import annotations

EVENTS_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS events ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " originator_id TEXT NOT NULL,"
    " originator_version INTEGER NOT NULL,"
    " topic TEXT NOT NULL,"
    " state BLOB NOT NULL,"
    " UNIQUE (originator_id, originator_version))",
    "CREATE TABLE IF NOT EXISTS tracking ("
    " application_name TEXT PRIMARY KEY,"
    " notification_id INTEGER NOT NULL) WITHOUT ROWID",
]
