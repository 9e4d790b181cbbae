"""`kuota serve --requeue-backoff` sets the first wait of a preempted Job before it may be admitted again."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kuota.cli import app
from kuota.commands.serve import ServeOptions
from kuota.components.controller import ControllerComponent
from kuota.runtime import Runtime

QUOTA = Path(__file__).resolve().parents[2] / "config" / "samples" / "org-quota.yaml"


def test_an_unreadable_backoff_stops_serve_with_exit_2() -> None:
    result = CliRunner().invoke(app, ["serve", "--components", "controller", "--requeue-backoff", "soon"])
    assert result.exit_code == 2
    assert "--requeue-backoff" in result.stderr and "not a duration" in result.stderr


async def test_the_backoff_reaches_the_controller(tmp_path: Path) -> None:
    options = ServeOptions(
        QUOTA, None, None, "127.0.0.1", 0, "system:serviceaccount:kuota-system:kuota",
        cluster="sim", database_url=f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}", requeue_backoff_ms=1_500,
    )  # fmt: skip
    runtime = Runtime.from_file(QUOTA)
    component = ControllerComponent(options, runtime)
    await component.start()
    try:
        assert runtime.controller is not None
        assert runtime.controller.backoff_base_ms == 1_500
    finally:
        await component.stop()
