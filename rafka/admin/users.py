"""The users file (``--auth-users``) as the REST admin API reads it.

The file is the one the gateway's SASL layer reads (``rafka.gateway.auth``, not
imported here so the admin API stays independent of it): TOML ``[[users]]``
tables with ``name``, ``org`` and either ``password`` (plain text) or salted SCRAM
credentials, ``scram_sha_256`` / ``scram_sha_512`` tables with base64 ``salt``,
``stored_key`` and ``server_key`` and an ``iterations`` count. HTTP Basic
credentials are checked against ``password``, or — for a SCRAM-only user — by
deriving ``StoredKey = H(HMAC(PBKDF2(password, salt, i), "Client Key"))`` (RFC
5802) and comparing it with the stored one. The file is re-read when its
modification time changes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading
import tomllib
from dataclasses import dataclass, field
from typing import Any

from rafka.ids import DEFAULT_ORG

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes

    def verify(self, password: str) -> bool:
        """True if ``password`` derives this credential's stored key."""
        name = _HASHES.get(self.mechanism.upper())
        if name is None or self.iterations <= 0:
            return False
        salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), self.salt, self.iterations)
        client_key = hmac.new(salted, b"Client Key", name).digest()
        return hmac.compare_digest(hashlib.new(name, client_key).digest(), self.stored_key)


@dataclass(frozen=True)
class User:
    name: str
    org: str
    password: str | None = None
    scram: tuple[ScramCredential, ...] = field(default=())

    def check(self, password: str) -> bool:
        """True if ``password`` is this user's."""
        if self.password is not None:
            return hmac.compare_digest(self.password.encode("utf-8"), password.encode("utf-8"))
        return any(c.verify(password) for c in self.scram)


def _b64(value: Any) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"bad base64 value {value!r}") from exc


_SCRAM_KEYS = {"scram_sha_256": "SCRAM-SHA-256", "scram_sha_512": "SCRAM-SHA-512"}


def parse_scram(mechanism: str, table: dict[str, Any]) -> ScramCredential:
    """One ``scram_sha_*`` table of a user."""
    return ScramCredential(mechanism=mechanism, salt=_b64(table["salt"]), iterations=int(table["iterations"]),
                           stored_key=_b64(table["stored_key"]))


def parse_users(raw: dict[str, Any]) -> dict[str, User]:
    """Users by name from a parsed users file."""
    users = {}
    for entry in raw.get("users", []):
        name = str(entry["name"])
        password = entry.get("password")
        scram = tuple(parse_scram(mech, entry[key]) for key, mech in _SCRAM_KEYS.items() if key in entry)
        users[name] = User(name=name, org=str(entry.get("org") or DEFAULT_ORG),
                           password=None if password is None else str(password), scram=scram)
    return users


class UsersFile:
    """The users of ``path``, re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._users: dict[str, User] = {}

    def users(self) -> dict[str, User]:
        with self._lock:
            mtime = os.stat(self.path).st_mtime
            if mtime != self._mtime:
                with open(self.path, "rb") as f:
                    self._users = parse_users(tomllib.load(f))
                self._mtime = mtime
            return self._users

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if ``name``/``password`` match, else None."""
        user = self.users().get(name)
        return user if user is not None and user.check(password) else None


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """``(user, password)`` from an ``Authorization: Basic …`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    return (name, password) if sep else None
