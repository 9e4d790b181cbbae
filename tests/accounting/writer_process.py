"""One OS process writing a stream of events through its own Ledger (for the concurrent-writers test).

python -m tests.accounting.writer_process URL SHARED_PREFIX OWN_PREFIX COUNT
Prints a JSON summary on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys

from accounting import Ledger
from tests.accounting.builders import interleave, stream


async def main(url: str, shared_prefix: str, own_prefix: str, count: int) -> None:
    events = interleave(stream(count, prefix=shared_prefix), stream(count, prefix=own_prefix))
    ledger = Ledger(url, batch_size=25, retry_initial=0.01, retry_max=0.2)
    await ledger.start()
    for i, event in enumerate(events):
        ledger.record(event)
        if i % 25 == 0:
            await asyncio.sleep(0)
    await ledger.close()
    print(json.dumps({"written": ledger.written, "rejected": len(ledger.rejected), "backlog": ledger.backlog}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
