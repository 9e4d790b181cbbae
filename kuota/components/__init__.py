"""The long-lived parts `kuota serve` runs, each built from the command's options and the shared Runtime."""

from __future__ import annotations


class StartError(Exception):
    """A component cannot start with the options given; the message says which and why."""
