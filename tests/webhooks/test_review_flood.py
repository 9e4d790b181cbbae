"""A flood of the largest and most hostile reviews a client can send does not stall `kuota serve`'s webhook.

The server is a real `kuota serve --components webhook` process on a TLS port; this process floods it with
reviews near the 8 MiB body cap (a Job of 20,000 containers, 5 MB; a 7 MB JSON array that is not a review;
deeply nested JSON; a 100,000-digit quantity) from several connections at once, while probing `/healthz` and an
ordinary review on a connection of their own. Every hostile body must get an answer the API server can report, every
probe its right answer, and the server must not crash.

How fast the probes are answered meanwhile is a measurement, not a test: bench/review_flood.py times them beside
the same probes with no flood. That large reviews leave the event loop at all is shown without a clock in
tests/webhooks/test_server.py, which holds one in the worker thread while probes are answered.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from bench.review_flood import client_context, hostile_bodies, probe_during, serving

from .helpers import QUOTA_FILE, encode, gpu_job, manifest, review

FLOOD_SECONDS = 4.0
FLOODERS = 6


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[tuple[str, str]]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca_pem = ca.cert_pem.bytes().decode()
    # No traceback in its log, or leaving this block raises.
    with serving(QUOTA_FILE, cert, key, client_context(ca_pem)) as url:
        yield url, ca_pem


async def test_a_flood_of_hostile_reviews_gets_answers_while_probes_keep_being_answered(
    webhook: tuple[str, str],
) -> None:
    url, ca_pem = webhook
    ordinary = encode(review(manifest("kueue/jobs__sample-job.yaml"), uid="ordinary"))
    # Each probe's answer is checked as it comes: /healthz 200, the ordinary review allowed.
    seen = await probe_during(url, ca_pem, hostile_bodies(gpu_job()), ordinary, FLOOD_SECONDS, FLOODERS)
    print(
        f"\n{seen.sent} hostile reviews in {FLOOD_SECONDS:.0f} s; /healthz median "
        f"{statistics.median(seen.health) * 1e3:.1f} ms max {max(seen.health) * 1e3:.1f} ms; ordinary review median "
        f"{statistics.median(seen.reviews) * 1e3:.1f} ms max {max(seen.reviews) * 1e3:.1f} ms "
        f"({len(seen.reviews)} probes)"
    )
    # Every hostile body got an answer the API server can report: a review (allowed or denied) or a 400.
    for what, statuses in seen.answers.items():
        assert statuses, f"{what}: never answered"
        assert set(statuses) <= {200, 400}, (what, sorted(set(statuses)))
    # The probes went on through the flood.
    assert len(seen.reviews) >= 10, len(seen.reviews)
