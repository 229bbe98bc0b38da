"""Storage: APSW connections, the eventsourcing persistence module, and the event codec."""
