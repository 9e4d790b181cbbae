"""Bearer tokens: a file of `{name, role, hash}` entries, hashed at rest, and what each role may do.

The file is YAML or JSON (a Kubernetes Secret mounts the same file): either a list of entries or
`{tokens: [...]}`. Hashes are `sha256:<hex>` (tokens are 256-bit random, so a plain digest cannot be brute-forced)
or `scrypt:<n>:<r>:<p>:<salt hex>:<hex>` for tokens chosen by people. The file is re-read when it changes, so a
rotated Secret takes effect without a restart.

Roles: `admin` may do everything; `viewer` reads everything; `team:<name>` reads everything and may hold,
release and preempt its own team's workloads.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SCRYPT_MAX_N = 2**20
SCRYPT_MAX_MEMORY = 32 * 1024 * 1024 - 1024 * 1024  # under hashlib's 32 MiB default, with room for its overhead

#: scrypt checks run at once (each takes tens of milliseconds of a core), and how many may wait for one; beyond
#: that an unknown token is refused with 429 at once instead of queueing work behind it.
HASHING_AT_ONCE = 2
HASHING_WAITING = 16
#: Unknown tokens remembered (by their SHA-256), so that the same wrong token sent again costs no scrypt work.
REMEMBERED_UNKNOWN = 4096


class Access(StrEnum):
    PUBLIC = "public"
    READ = "read"
    TEAM_ACTION = "team-action"
    ADMIN = "admin"


class TooManyAttempts(Exception):
    """Too many unknown tokens are being checked at once: the request is refused (429), not queued."""


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the entry."""


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: str

    @property
    def team(self) -> str | None:
        return self.role.removeprefix("team:") if self.role.startswith("team:") else None

    def may(self, access: Access, team: str | None = None) -> bool:
        if access in (Access.PUBLIC, Access.READ) or self.role == "admin":
            return True
        if access is Access.TEAM_ACTION:
            return self.team is not None and (team is None or team == self.team)
        return False


@dataclass(frozen=True, slots=True)
class TokenEntry:
    name: str
    role: str
    hash: str

    def matches(self, token: str, digest: str) -> bool:
        scheme, _, rest = self.hash.partition(":")
        if scheme == "sha256":
            return hmac.compare_digest(rest, digest)
        n, r, p, salt, expected = rest.split(":")
        computed = hashlib.scrypt(token.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p), dklen=32)
        return hmac.compare_digest(computed.hex(), expected)


def validate_role(role: str) -> str:
    if role in ("admin", "viewer") or (role.startswith("team:") and len(role) > len("team:")):
        return role
    raise TokenFileError(f"role {role!r} is not admin, viewer or team:<name>")


def hash_token(token: str, scheme: str = "sha256") -> str:
    if scheme == "sha256":
        return "sha256:" + hashlib.sha256(token.encode()).hexdigest()
    if scheme == "scrypt":
        salt = secrets.token_bytes(16)
        digest = hashlib.scrypt(token.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
        return f"scrypt:{SCRYPT_N}:{SCRYPT_R}:{SCRYPT_P}:{salt.hex()}:{digest.hex()}"
    raise ValueError(f"unknown hash scheme {scheme!r} (sha256 or scrypt)")


def new_token() -> str:
    return "kuota_" + secrets.token_urlsafe(32)


def parse_entries(data: Any, source: str = "token file") -> list[TokenEntry]:
    if isinstance(data, dict):
        data = data.get("tokens", [])
    if data is None:
        return []
    if not isinstance(data, list):
        raise TokenFileError(f"{source}: expected a list of tokens or {{tokens: [...]}}")
    entries: list[TokenEntry] = []
    names: set[str] = set()
    for index, item in enumerate(data):
        where = f"{source}: entry {index + 1}"
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("name", "role", "hash")):
            raise TokenFileError(f"{where}: needs string fields name, role and hash")
        name, role, hashed = item["name"], item["role"], item["hash"]
        try:
            validate_role(role)
        except TokenFileError as exc:
            raise TokenFileError(f"{where} ({name}): {exc}") from None
        if not _valid_hash(hashed):
            raise TokenFileError(f"{where} ({name}): hash must be sha256:<64 hex> or scrypt:n:r:p:salt:hex")
        if name in names:
            raise TokenFileError(f"{where}: the name {name!r} is used twice (audit entries would be ambiguous)")
        names.add(name)
        entries.append(TokenEntry(name, role, hashed))
    return entries


def _valid_hash(value: str) -> bool:
    scheme, _, rest = value.partition(":")
    try:
        if scheme == "sha256":
            return len(rest) == 64 and bytes.fromhex(rest) is not None
        if scheme == "scrypt":
            n, r, p, salt, digest = rest.split(":")
            cost, block, parallel = int(n), int(r), int(p)
            # Powers of two, and at most what fits hashlib's 32 MiB default (128·n·r bytes): a file asking for
            # more would make every login fail, or take seconds.
            return (
                1 < cost <= SCRYPT_MAX_N
                and cost & (cost - 1) == 0
                and 0 < block <= 32
                and 0 < parallel <= 16
                and 128 * cost * block <= SCRYPT_MAX_MEMORY
                and bool(bytes.fromhex(salt))
                and bool(bytes.fromhex(digest))
            )
    except ValueError:
        return False
    return False


def read_token_file(path: Path) -> list[TokenEntry]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text) if text.strip() else []
    except yaml.YAMLError as exc:
        raise TokenFileError(f"{path}: not YAML or JSON: {exc}") from None
    return parse_entries(data, str(path))


class TokenStore:
    """Looks a bearer token up; re-reads its file when the file's modification time changes.

    A token file that does not exist yet is waited for rather than refused: in a cluster it comes from a Secret
    mounted `optional: true`, which may be created after kuota starts. Until it appears (or when kuota runs
    without one), every API request is refused with a 401 that says why; health, readiness and /metrics need no
    token and keep working.
    """

    def __init__(self, entries: list[TokenEntry] | None = None, path: Path | None = None) -> None:
        self.path = path
        self._entries = list(entries or [])
        self._stamp: tuple[float, int] | None = None
        self._cache: dict[str, Principal] = {}
        self._unknown: dict[str, None] = {}
        self._hashing = asyncio.Semaphore(HASHING_AT_ONCE)
        self._waiting = 0
        self._seen_file = False
        if path is not None:
            self._reload(force=True)

    @classmethod
    def from_file(cls, path: Path) -> TokenStore:
        return cls(path=path)

    def why_empty(self) -> str | None:
        """Why no token can match (no file configured, or not there yet), for the 401's message; None otherwise."""
        if self._entries:
            return None
        if self.path is None:
            return "no admin tokens are configured: start kuota serve with --admin-tokens FILE (see `kuota tokens add`)"
        if not self._seen_file:
            return f"no admin tokens loaded: the token file {self.path} does not exist yet"
        return f"the token file {self.path} holds no tokens"

    def _reload(self, force: bool = False) -> None:
        if self.path is None:
            return
        try:
            stat = self.path.stat()
        except OSError:
            return  # not there yet, or a Secret being swapped; keep the tokens we had
        stamp = (stat.st_mtime, stat.st_size)
        if stamp == self._stamp and not force:
            return
        try:
            self._entries = read_token_file(self.path)
        except TokenFileError:
            if force:
                raise
            return  # keep the last good file rather than locking everyone out
        self._seen_file = True
        self._stamp = stamp
        self._cache.clear()
        self._unknown.clear()  # a token unknown before may be in the new file

    def authenticate(self, token: str) -> Principal | None:
        """The principal of `token`, checking every entry here and now (scrypt ones too): for commands and tests.
        The server calls `authenticate_async`, which keeps scrypt off the event loop."""
        self._reload()
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = self._fast(digest)
        if found is not None or digest in self._unknown:
            return found
        return self._remember(digest, self._slow(token, digest))

    async def authenticate_async(self, token: str) -> Principal | None:
        """As `authenticate`, with the scrypt entries checked in a worker thread, a few at a time.

        SHA-256 entries and tokens seen before answer at once. An unknown token with scrypt entries in the file
        costs one scrypt per entry: at most HASHING_AT_ONCE run (in threads: hashlib's scrypt releases the GIL),
        HASHING_WAITING more may wait, and past that TooManyAttempts says to retry later, so a flood of made-up
        tokens cannot stall health checks, webhook reviews or the controller that share this process."""
        self._reload()
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = self._fast(digest)
        if found is not None or digest in self._unknown or not self._scrypt:
            return found
        if self._waiting >= HASHING_WAITING:
            raise TooManyAttempts("too many token checks in flight; retry in a second")
        self._waiting += 1
        try:
            async with self._hashing:
                principal = await asyncio.to_thread(self._slow, token, digest)
        finally:
            self._waiting -= 1
        return self._remember(digest, principal)

    def _fast(self, digest: str) -> Principal | None:
        cached = self._cache.get(digest)
        if cached is not None:
            return cached
        for entry in self._entries:
            scheme, _, expected = entry.hash.partition(":")
            if scheme == "sha256" and hmac.compare_digest(expected, digest):
                principal = self._cache[digest] = Principal(entry.name, entry.role)
                return principal
        return None

    def _slow(self, token: str, digest: str) -> Principal | None:
        for entry in self._scrypt:
            if entry.matches(token, digest):
                return Principal(entry.name, entry.role)
        return None

    def _remember(self, digest: str, principal: Principal | None) -> Principal | None:
        if principal is not None:
            self._cache[digest] = principal
            return principal
        if len(self._unknown) >= REMEMBERED_UNKNOWN:
            self._unknown.pop(next(iter(self._unknown)))  # the oldest: dicts keep insertion order
        self._unknown[digest] = None
        return None

    @property
    def _scrypt(self) -> list[TokenEntry]:
        return [entry for entry in self._entries if entry.hash.startswith("scrypt:")]


def add_token(path: Path, name: str, role: str, scheme: str = "sha256") -> str:
    """Create a token for `name`, store its hash in `path` (created if missing), return the token."""
    validate_role(role)
    entries: list[dict[str, str]] = []
    if path.exists():
        entries = [{"name": e.name, "role": e.role, "hash": e.hash} for e in read_token_file(path)]
    if any(e["name"] == name for e in entries):
        raise TokenFileError(f"{path}: a token named {name!r} exists already")
    token = new_token()
    entries.append({"name": name, "role": role, "hash": hash_token(token, scheme)})
    path.write_text(yaml.safe_dump({"tokens": entries}, sort_keys=False), encoding="utf-8")
    path.chmod(0o600)
    return token
