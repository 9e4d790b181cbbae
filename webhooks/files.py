"""Noticing that a file on disk changed, cheaply enough to ask every couple of seconds."""

from __future__ import annotations

import os
from pathlib import Path

FileSignature = tuple[int, int, int] | None


def file_signature(path: Path) -> FileSignature:
    """(mtime, inode, size) of the file a path leads to, or None if it is missing.

    Kubernetes updates mounted ConfigMaps and Secrets by swapping a symlink, which changes the inode even when the
    size and the second of the mtime do not.
    """
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_ino, stat.st_size
