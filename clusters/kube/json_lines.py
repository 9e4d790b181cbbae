"""A watch stream's bytes into its lines, whatever the chunks: one JSON event per line.

A chunk holds many short events (a watch of thousands of Jobs delivers them in bursts) or a piece of one long
event (a big object). Splitting each chunk once and keeping only the unfinished tail costs linear time either way;
cutting one line at a time off the front of the buffer, as the reflector once did, copied the rest of the buffer
for every line, quadratic in the events per chunk.
"""

from __future__ import annotations

from collections.abc import Iterator


class JsonLines:
    def __init__(self) -> None:
        self._tail = bytearray()
        """The bytes after the last newline seen: the start of a line still arriving."""

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The lines this chunk completes (blank ones left out); what follows its last newline waits for more."""
        end = chunk.rfind(b"\n")
        if end < 0:
            self._tail += chunk
            return
        if self._tail:
            self._tail += chunk[:end]
            complete, self._tail = bytes(self._tail), bytearray(chunk[end + 1 :])
        else:
            complete, self._tail = chunk[:end], bytearray(chunk[end + 1 :])
        for line in complete.split(b"\n"):
            if line and not line.isspace():
                yield line

    @property
    def pending(self) -> int:
        """Bytes of an unfinished line held back."""
        return len(self._tail)
