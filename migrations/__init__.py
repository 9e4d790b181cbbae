"""Alembic migrations of the ledger schema (one linear history from 0001).

Run them with ``kuota migrate`` or ``accounting.migrate``; the scripts are found next to this file, so they work
from an installed kuota as well as from a checkout.
"""
