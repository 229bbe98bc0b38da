"""The PostgreSQL backend: eventsourcing's postgres recorder for the log, projections beside it.

Imported only when a ``postgresql://`` store is opened (psycopg and the pool are not needed by
the SQLite path).
"""
