"""One error tree for hermes_es: every expected failure is a ``HermesError``.

Each error carries the identifier that failed (``subject``) and the process exit code the CLI
uses for it. Expected failures are printed as ``Error: …`` without a traceback.
"""

from __future__ import annotations


class HermesError(Exception):
    """Base of every expected failure; ``exit_code`` is what the CLI exits with."""

    exit_code: int = 1

    def __init__(self, message: str, *, subject: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.subject = subject

    def __str__(self) -> str:
        return self.message


class UsageError(HermesError):
    """The command line itself was wrong (exit code 2)."""

    exit_code = 2


class ValidationError(HermesError):
    """Input was malformed: an invalid role, an empty message, a bad title, a bad file."""


class SessionNotFoundError(HermesError):
    """No session matches the given id, prefix or title."""


class AmbiguousSessionError(HermesError):
    """A prefix or title matches more than one session."""

    def __init__(self, message: str, *, subject: str, candidates: list[str]) -> None:
        super().__init__(message, subject=subject)
        self.candidates = candidates


class InvariantError(HermesError):
    """A command was refused by the session aggregate (e.g. append to a deleted session)."""


class ConflictError(HermesError):
    """A writer named a stream version that is no longer current (optimistic concurrency)."""

    def __init__(self, message: str, *, subject: str, expected: int | None, actual: int) -> None:
        super().__init__(message, subject=subject)
        self.expected = expected
        self.actual = actual

    @classmethod
    def lost_race(cls, cause: Exception) -> ConflictError:
        """The store refused an event version another writer had just taken (its unique
        stream/version key): reload and retry."""
        return cls(
            f"a concurrent writer changed the session first ({cause}); reload and retry",
            subject=str(cause),
            expected=None,
            actual=-1,
        )


class StoreBusyError(HermesError):
    """The database stayed locked by another process for longer than the busy timeout."""


class StoreError(HermesError):
    """The store is damaged or its projections disagree with the log."""


class HolderError(HermesError):
    """Another hermes process holds state.db and the operation needs it alone."""


class GuardError(HermesError):
    """A configured guard (e.g. max_export_messages) refused the operation."""

    def __init__(self, message: str, *, subject: str | None = None, code: int = 0) -> None:
        super().__init__(message, subject=subject)
        self.code = code


class ConfigError(HermesError):
    """config.yaml is malformed or names a value of the wrong type."""


class ResponderError(HermesError):
    """The model endpoint failed: down, timed out, or answered something unusable."""
