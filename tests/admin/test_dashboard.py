"""The dashboard in headless Chromium: the page fetches the API with the token and shows teams and numbers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.admin.conftest import Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--virtual-time-budget=10000",
]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_dashboard_shows_tree_queues_and_credits(server: Server, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    url = f"{server.url}/#token={server.tokens['watcher']}"
    base = [CHROMIUM, *FLAGS]
    dom = subprocess.run(
        [*base, f"--user-data-dir={tmp_path / 'profile-dom'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert 'data-loaded="true"' in dom, dom[-2000:]
    assert "<td>nlp</td>" in dom and "<td>vision</td>" in dom
    assert "<td>nvidia.com/gpu</td>" in dom and "<td>64Gi</td>" in dom  # quota printed in Kubernetes syntax
    assert "vision/huge" in dom  # pending queue with positions
    assert "as watcher (viewer)" in dom
    shot = tmp_path / "dashboard.png"
    subprocess.run(
        [*base, f"--user-data-dir={tmp_path / 'profile-shot'}", f"--screenshot={shot}", "--window-size=1280,1600", url],
        capture_output=True,
        timeout=60,
    )
    assert shot.exists() and shot.stat().st_size > 10_000
