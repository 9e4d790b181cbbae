from __future__ import annotations

import pytest

from webhooks.state import WebhookState

from .helpers import load_quota_state


@pytest.fixture
def state() -> WebhookState:
    return load_quota_state()
