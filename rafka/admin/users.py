"""HTTP Basic credentials of the REST admin API, checked against the users file.

The users file (``--auth-users``) is parsed and validated by the gateway's own
parser (``rafka.gateway.auth``), so the REST API accepts exactly the files and
users the Kafka listener does. A Basic password is checked against the user's
``password``, or — for a SCRAM-only user — by deriving ``StoredKey =
H(HMAC(PBKDF2(password, salt, i), "Client Key"))`` (RFC 5802) for each stored
mechanism and comparing it with the stored one. The file is re-read when its
modification time changes; a file the parser refuses raises ``UsersFileError``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import threading

from rafka.gateway.auth import ScramCredential, User, Users, UsersFileError, load_users

__all__ = ["UsersFile", "UsersFileError", "basic_credentials", "check_password"]

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def _scram_matches(mechanism: str, cred: ScramCredential, password: str) -> bool:
    name = _HASHES.get(mechanism.upper())
    if name is None or cred.iterations <= 0:
        return False
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hmac.compare_digest(hashlib.new(name, client_key).digest(), cred.stored_key)


def check_password(user: User, password: str) -> bool:
    """True if ``password`` is ``user``'s."""
    if user.password is not None:
        return hmac.compare_digest(user.password.encode("utf-8"), password.encode("utf-8"))
    return any(_scram_matches(mech, cred, password) for mech, cred in user.scram.items())


class UsersFile:
    """The users of ``path``, re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._users: Users | None = None

    def users(self) -> Users:
        with self._lock:
            mtime = os.stat(self.path).st_mtime
            if mtime != self._mtime or self._users is None:
                self._users = load_users(self.path)
                self._mtime = mtime
            return self._users

    def authenticate(self, name: str, password: str) -> User | None:
        """The user if ``name``/``password`` match, else None."""
        user = self.users().get(name)
        return user if user is not None and check_password(user, password) else None


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
