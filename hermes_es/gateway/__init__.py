"""The gateway: one process per profile that owns execution of every session.

Layout: ``paths`` (files under the profile), ``identity`` (Principal), ``tickets`` and
``control`` (the owner-only Unix socket that mints tickets), ``protocol`` (JSON-RPC Structs),
``authority`` (admission queues, the turn runner, fan-out), ``reaper`` (orphaned sessions),
``app`` (Starlette routes and lifespan), ``server`` (process lifecycle), ``client`` (what the
CLI uses).
"""
