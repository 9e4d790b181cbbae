"""Schemathesis against /openapi.json: no 5xx, and every answer matches the document.

Driven through hypothesis directly: schemathesis' pytest plugin does not work with the pytest in use.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.admin.conftest import Server

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Actions and apply change the shared server's state; their behaviour is tested in test_api.
STATEFUL = ("/hold", "/release", "/preempt", "/apply")


def test_api_conforms(server: Server) -> None:
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    tested = 0
    for operation in operations:
        if operation.method.upper() == "POST" and operation.path.endswith(STATEFUL):
            continue

        @given(case=operation.as_strategy())
        @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=server.headers("watcher"), checks=CHECKS)

        check()
        tested += 1
    assert tested >= 15
