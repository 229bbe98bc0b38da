"""psycopg's errors translated into eventsourcing's persistence error tree."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from eventsourcing.persistence import (
    IntegrityError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
)

BUSY_ERRORS = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
    psycopg.errors.QueryCanceled,
)
"""Errors that mean another writer held what this one needed (retrying later can succeed)."""


@contextmanager
def translated() -> Iterator[None]:
    """Map psycopg errors onto eventsourcing's (unique violations become IntegrityError)."""
    try:
        yield
    except psycopg.IntegrityError as exc:
        raise IntegrityError(str(exc)) from exc
    except BUSY_ERRORS as exc:
        raise OperationalError(f"database is busy: {exc}") from exc
    except psycopg.OperationalError as exc:
        raise OperationalError(str(exc)) from exc
    except psycopg.ProgrammingError as exc:
        raise ProgrammingError(str(exc)) from exc
    except psycopg.Error as exc:
        raise PersistenceError(str(exc)) from exc
