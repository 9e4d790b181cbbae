"""Every route answers 401 without a token or with an unknown one, and 403 where the role does not allow it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from admin.app import all_routes
from admin.auth import Access, Principal, TokenFileError, TokenStore, add_token, hash_token, parse_entries
from tests.admin.conftest import Server

PUBLIC = {"/healthz", "/readyz", "/metrics", "/openapi.json"}
ROUTES = [
    (
        r.method,
        re.sub(r"\{namespace\}/\{name\}", "vision/next", r.path).replace("{team}", "nlp").replace("{kind}", "_"),
        r.access,
    )
    for r in all_routes()
]


@pytest.mark.parametrize(("method", "path", "access"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_no_token_and_bad_token(server: Server, method: str, path: str, access: Access) -> None:
    anonymous = requests.request(method, server.url + path, json={}, timeout=5)
    forged = requests.request(
        method, server.url + path, json={}, timeout=5, headers={"Authorization": "Bearer kuota_not-a-real-token"}
    )
    if path in PUBLIC:
        assert anonymous.status_code in (200, 503)
        return
    for response in (anonymous, forged):
        assert response.status_code == 401, response.text
        assert response.headers["Content-Type"].startswith("application/problem+json")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("method", "path", "access"),
    [r for r in ROUTES if r[2] in (Access.ADMIN, Access.TEAM_ACTION)],
    ids=lambda v: str(v),
)
def test_forbidden_roles(server: Server, method: str, path: str, access: Access) -> None:
    body = {"text": "teams: []"} if "config" in path else {}
    assert (
        requests.request(method, server.url + path, json=body, headers=server.headers("watcher"), timeout=5).status_code
        == 403
    )
    # nlp's lead on vision's workload, or on the quota file
    assert (
        requests.request(
            method, server.url + path, json=body, headers=server.headers("nlp-lead"), timeout=5
        ).status_code
        == 403
    )


def test_dashboard_shell_has_no_data(server: Server) -> None:
    page = requests.get(server.url + "/", timeout=5)
    assert page.status_code == 200 and "nlp" not in page.text and "Content-Security-Policy" in page.headers


def test_roles() -> None:
    assert Principal("a", "admin").may(Access.ADMIN)
    assert not Principal("v", "viewer").may(Access.TEAM_ACTION)
    lead = Principal("l", "team:nlp")
    assert lead.may(Access.TEAM_ACTION, "nlp") and not lead.may(Access.TEAM_ACTION, "vision")
    assert not lead.may(Access.ADMIN) and lead.may(Access.READ)


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    token = add_token(path, "alice", "team:nlp", scheme="scrypt")
    assert token not in path.read_text() and "scrypt:" in path.read_text()
    assert path.stat().st_mode & 0o077 == 0
    store = TokenStore.from_file(path)
    assert store.authenticate(token) == Principal("alice", "team:nlp")
    assert store.authenticate(token + "x") is None
    with pytest.raises(TokenFileError, match="exists already"):
        add_token(path, "alice", "admin")
    with pytest.raises(TokenFileError, match="role"):
        parse_entries([{"name": "b", "role": "root", "hash": hash_token("t")}])
    with pytest.raises(TokenFileError, match="hash"):
        parse_entries([{"name": "b", "role": "admin", "hash": "md5:abc"}])
    second = add_token(path, "bob", "viewer")  # the running store picks the change up
    assert store.authenticate(second) == Principal("bob", "viewer")
