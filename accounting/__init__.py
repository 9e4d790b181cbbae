"""The ledger: every decision and every GPU-second, in PostgreSQL or SQLite, never lost nor counted twice.

Public surface:
- ``accounting.events`` — the events the queue manager records (pure values);
- ``accounting.Ledger`` — ``record(event)`` without waiting, batched idempotent writes in the background;
- ``accounting.repository`` / ``accounting.reports`` / ``accounting.recovery`` — reads, reports, rollups, recovery;
- ``accounting.migrate`` — the schema (alembic, in the ``migrations`` package).
"""

from accounting.database import DEFAULT_DATABASE_URL, create_engine, resolve_database_url
from accounting.ledger import Ledger, LedgerClosedError, RejectedEvent

__all__ = [
    "DEFAULT_DATABASE_URL",
    "Ledger",
    "LedgerClosedError",
    "RejectedEvent",
    "create_engine",
    "resolve_database_url",
]
