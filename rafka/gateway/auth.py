"""SASL identities: the users file, PLAIN and SCRAM-SHA-256/512 (server side).

How this works: ``--auth-users FILE`` names a TOML file of ``[[users]]`` tables,
each with ``name``, ``org`` and either ``password`` (plain text; used for PLAIN and
turned into SCRAM credentials with a fresh salt when the file is loaded) or
salted SCRAM credentials (``scram_sha_256`` / ``scram_sha_512`` tables with
``salt``, ``iterations``, ``stored_key``, ``server_key``, base64), which then
only serve SCRAM. A user authenticates as its ``org``: the connection's org_id
becomes that organisation, which is what isolates tenants. ``load_users``
validates the whole file or raises ``UsersFileError``; the gateway keeps the old
users when a reload (SIGHUP) fails. An exchange (``new_exchange``) is a small
state machine fed with client tokens: PLAIN finishes in one step (RFC 4616,
constant-time password compare); SCRAM (RFC 5802, RFC 7677) answers client-first
with server-first (combined nonce, salt, iterations), checks the client proof
in client-final and answers ``v=<server signature>``. Failures raise ``AuthError``;
as in Kafka, only some messages reach the client (``shown``: those of Kafka's
SaslAuthenticationException, e.g. PLAIN's "Invalid username or password"), the others
(SCRAM's "Invalid user credentials" would tell which user names exist) are logged and
the client reads Kafka's generic "... due to invalid credentials with SASL mechanism X".
SCRAM extensions are ignored, as Kafka ignores those it does not support, except
``tokenauth=true``: rafka has no delegation tokens. Only hashlib/hmac.
Like Kafka, SASLprep is not applied (names and passwords are used as UTF-8), and
SCRAM iteration counts below 4096 are refused.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import logging
import re
import secrets
import time
import tomllib
from functools import cache
from typing import Any

from prometheus_client import Counter

from rafka import ids
from rafka.config import SASL_MECHANISMS

log = logging.getLogger("rafka.gateway.auth")

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = SASL_MECHANISMS  # every one the gateway can serve (--sasl-enabled-mechanisms picks)
_SCRAM_HASH = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
_SCRAM_KEY = {"scram_sha_256": SCRAM_SHA_256, "scram_sha_512": SCRAM_SHA_512}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
DEFAULT_ITERATIONS = 4096
MAX_ORG_BYTES = 255


class UsersFileError(ValueError):
    """The users file cannot be used; the message names the file and the entry."""


class AuthError(Exception):
    """Authentication failed; ``str(exc)`` goes to the client only when ``shown``."""

    def __init__(self, message: str, shown: bool = False) -> None:
        super().__init__(message)
        self.shown = shown


@cache
def auth_metrics() -> Counter:
    return Counter("rafka_gateway_sasl_authentications", "SASL authentications by mechanism and result",
                   ["mechanism", "result"])


# --------------------------------------------------------------------------
# credentials and the users file


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def scram_credential(mechanism: str, password: str, salt: bytes | None = None,
                     iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """Salted SCRAM credentials for ``password`` (RFC 5802 §3)."""
    name = _SCRAM_HASH[mechanism]
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    server_key = hmac.digest(salted, b"Server Key", name)
    return ScramCredential(salt, iterations, hashlib.new(name, client_key).digest(), server_key)


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    name: str
    org: str
    password: str | None
    scram: dict[str, ScramCredential]  # mechanism → credential


@dataclasses.dataclass(frozen=True, slots=True)
class Users:
    path: str
    by_name: dict[str, User]

    def get(self, name: str) -> User | None:
        return self.by_name.get(name)

    def __len__(self) -> int:
        return len(self.by_name)


def _b64(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise UsersFileError(f"{where}: expected a non-empty base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise UsersFileError(f"{where}: invalid base64 ({exc})") from None


def _scram_entry(mechanism: str, raw: Any, where: str) -> ScramCredential:
    if not isinstance(raw, dict):
        raise UsersFileError(f"{where}: expected a table with salt, iterations, stored_key, server_key")
    unknown = set(raw) - {"salt", "iterations", "stored_key", "server_key"}
    if unknown:
        raise UsersFileError(f"{where}: unknown keys {sorted(unknown)}")
    iterations = raw.get("iterations")
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < MIN_ITERATIONS:
        raise UsersFileError(f"{where}.iterations: expected an integer >= {MIN_ITERATIONS}")
    salt = _b64(raw.get("salt"), f"{where}.salt")
    digest = hashlib.new(_SCRAM_HASH[mechanism]).digest_size
    stored_key = _b64(raw.get("stored_key"), f"{where}.stored_key")
    server_key = _b64(raw.get("server_key"), f"{where}.server_key")
    for key, value in (("stored_key", stored_key), ("server_key", server_key)):
        if len(value) != digest:
            raise UsersFileError(f"{where}.{key}: expected {digest} bytes for {mechanism}, got {len(value)}")
    return ScramCredential(salt, iterations, stored_key, server_key)


def _user(raw: Any, where: str) -> User:
    if not isinstance(raw, dict):
        raise UsersFileError(f"{where}: expected a table")
    unknown = set(raw) - {"name", "org", "password", *_SCRAM_KEY}
    if unknown:
        raise UsersFileError(f"{where}: unknown keys {sorted(unknown)}")
    name, org, password = raw.get("name"), raw.get("org"), raw.get("password")
    if not isinstance(name, str) or not name:
        raise UsersFileError(f"{where}.name: expected a non-empty string")
    if not isinstance(org, str) or not org or len(org.encode()) > MAX_ORG_BYTES or not org.isprintable():
        raise UsersFileError(f"{where}.org: expected a non-empty printable string of at most {MAX_ORG_BYTES} bytes")
    if (encoded := len(ids.dir_name(org))) > ids.MAX_DIR_NAME:  # an org's topics live under a directory named after it
        raise UsersFileError(f"{where}.org: {org[:20]!r}... is {encoded} bytes once percent-encoded "
                             f"for its data directory; at most {ids.MAX_DIR_NAME} (characters other than letters, "
                             f"digits and . _ - ~ take three bytes each)")
    if password is not None and (not isinstance(password, str) or not password):
        raise UsersFileError(f"{where}.password: expected a non-empty string")
    scram = {mech: _scram_entry(mech, raw[key], f"{where}.{key}") for key, mech in _SCRAM_KEY.items() if key in raw}
    if password is None and not scram:
        raise UsersFileError(f"{where}: user {name!r} has neither password nor SCRAM credentials")
    if password is not None:
        for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
            scram.setdefault(mech, scram_credential(mech, password))
    return User(name, org, password, scram)


def parse_users(data: str, path: str = "<users>") -> Users:
    """Validate a users file's text."""
    try:
        raw = tomllib.loads(data)
    except tomllib.TOMLDecodeError as exc:
        raise UsersFileError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(raw) - {"users"}
    if unknown:
        raise UsersFileError(f"{path}: unknown top-level keys {sorted(unknown)} (expected [[users]] tables)")
    entries = raw.get("users", [])
    if not isinstance(entries, list):
        raise UsersFileError(f"{path}: 'users' must be an array of tables ([[users]])")
    by_name: dict[str, User] = {}
    for i, entry in enumerate(entries):
        user = _user(entry, f"{path}: users[{i}]")
        if user.name in by_name:
            raise UsersFileError(f"{path}: users[{i}]: duplicate user name {user.name!r}")
        by_name[user.name] = user
    return Users(path, by_name)


def load_users(path: str) -> Users:
    """Read and validate the users file at ``path`` (UsersFileError if unusable)."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsersFileError(f"{path}: cannot read: {exc}") from None
    return parse_users(data, path)


# --------------------------------------------------------------------------
# exchanges


class Exchange:
    """One SASL exchange: feed client tokens to ``step`` until ``complete``."""

    mechanism = ""

    def __init__(self, users: Users) -> None:
        self.users = users
        self.complete = False
        self.user: User | None = None

    def step(self, token: bytes) -> bytes:
        raise NotImplementedError


def new_exchange(mechanism: str, users: Users) -> Exchange:
    """A server exchange for ``mechanism`` (ValueError if unsupported)."""
    if mechanism == PLAIN:
        return PlainExchange(users)
    if mechanism in _SCRAM_HASH:
        return ScramExchange(users, mechanism)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}")


_DUMMY = b"\0" * 32


class PlainExchange(Exchange):
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``, checked in one step."""

    mechanism = PLAIN

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthError("Authentication failed: unexpected SASL/PLAIN token after completion")
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise AuthError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, name, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not name:
            raise AuthError("Authentication failed: username not specified", shown=True)
        if not password:
            raise AuthError("Authentication failed: password not specified", shown=True)
        user = self.users.get(name)
        expected = user.password.encode("utf-8") if user is not None and user.password is not None else None
        # compare even for an unknown user so timing does not reveal which names exist
        ok = hmac.compare_digest(password.encode("utf-8"), expected if expected is not None else _DUMMY)
        if expected is None or not ok:
            raise AuthError("Authentication failed: Invalid username or password", shown=True)
        if authzid and authzid != name:  # checked after the password, as Kafka's PlainSaslServer
            raise AuthError("Authentication failed: Client requested an authorization id that is different from username",
                            shown=True)
        self.user = user
        self.complete = True
        return b""


def _attrs(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise AuthError(f"Authentication failed: invalid SCRAM {what}")
        out.append((part[0], part[2:]))
    return out


def _saslname(value: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is invalid."""
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "=":
            esc = value[i : i + 3]
            if esc == "=2C":
                out.append(",")
            elif esc == "=3D":
                out.append("=")
            else:
                raise AuthError("Authentication failed: invalid SCRAM username encoding")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_EXTENSION = re.compile(r"[A-Za-z]+=[\x01-\x2b\x2d-\x7f]*")  # key=value, no comma


def _valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


class ScramExchange(Exchange):
    """RFC 5802 server: client-first → server-first → client-final → server-final."""

    def __init__(self, users: Users, mechanism: str, server_nonce: str | None = None) -> None:
        super().__init__(users)
        self.server_nonce = server_nonce or secrets.token_urlsafe(24)  # a fixed one only in tests
        self.mechanism = mechanism
        self.hash = _SCRAM_HASH[mechanism]
        self.state = "client-first"
        self.gs2_header = ""
        self.client_first_bare = ""
        self.server_first = ""
        self.nonce = ""
        self.credential: ScramCredential | None = None

    def _fail(self, message: str, shown: bool = False) -> AuthError:
        self.state = "failed"
        return AuthError(message, shown)

    def step(self, token: bytes) -> bytes:
        try:
            message = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("Authentication failed: SCRAM message is not UTF-8") from None
        try:
            if self.state == "client-first":
                return self._client_first(message)
            if self.state == "client-final":
                return self._client_final(message)
        except AuthError as exc:
            raise self._fail(str(exc), exc.shown) from None
        raise self._fail(f"Authentication failed: unexpected SCRAM message in state {self.state}")

    def _client_first(self, message: str) -> bytes:
        # gs2-header: cbind-flag "," [authzid] ","; then client-first-message-bare
        flag, sep, rest = message.partition(",")
        if not sep or flag not in ("n", "y"):
            raise AuthError("Authentication failed: SCRAM channel binding is not supported")
        authz, sep, bare = rest.partition(",")
        if not sep:
            raise AuthError("Authentication failed: invalid SCRAM client-first message")
        authzid = None
        if authz:
            if not authz.startswith("a="):
                raise AuthError("Authentication failed: invalid SCRAM client-first message")
            authzid = _saslname(authz[2:])
        parts = bare.split(",")
        attrs = _attrs(",".join(parts[:2]), "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise AuthError("Authentication failed: invalid SCRAM client-first message")
        name = _saslname(attrs[0][1])
        client_nonce = attrs[1][1]
        if not _valid_nonce(client_nonce):
            raise AuthError("Authentication failed: invalid SCRAM client nonce")
        if any(not _EXTENSION.fullmatch(p) for p in parts[2:]):  # Kafka's ClientFirstMessage pattern
            raise AuthError("Authentication failed: invalid SCRAM client-first message")
        extensions = dict(p.partition("=")[::2] for p in parts[2:])
        if extensions.get("tokenauth", "").lower() == "true":  # Boolean.parseBoolean
            raise AuthError("Authentication failed: delegation tokens are not supported")
        if authzid is not None and authzid != name:
            raise AuthError("Authentication failed: Client requested an authorization id that is different from username",
                            shown=True)
        user = self.users.get(name)
        credential = user.scram.get(self.mechanism) if user is not None else None
        if user is None or credential is None:
            raise AuthError("Authentication failed: Invalid user credentials")
        self.user, self.credential = user, credential
        self.gs2_header = message[: len(message) - len(bare)]
        self.client_first_bare = bare
        self.nonce = client_nonce + self.server_nonce
        self.server_first = (f"r={self.nonce},s={base64.b64encode(credential.salt).decode()},"
                             f"i={credential.iterations}")
        self.state = "client-final"
        return self.server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        if not sep:
            raise AuthError("Authentication failed: SCRAM client-final message has no proof")
        attrs = _attrs(without_proof, "client-final message")
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise AuthError("Authentication failed: invalid SCRAM client-final message")
        try:
            binding = base64.b64decode(attrs[0][1], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise AuthError("Authentication failed: invalid base64 in SCRAM client-final message") from None
        if binding != self.gs2_header.encode():
            raise AuthError("Authentication failed: SCRAM channel binding mismatch")
        if attrs[1][1] != self.nonce:
            raise AuthError("Authentication failed: Invalid client nonce in the final client message")
        cred = self.credential
        assert cred is not None and self.user is not None
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        client_signature = hmac.digest(cred.stored_key, auth_message, self.hash)
        if len(proof) != len(client_signature):
            raise AuthError("Authentication failed: Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), cred.stored_key):
            raise AuthError("Authentication failed: Invalid client credentials")
        server_signature = hmac.digest(cred.server_key, auth_message, self.hash)
        self.state = "done"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


# --------------------------------------------------------------------------
# per-connection state


class ConnectionAuth:
    """What a connection knows about its SASL identity."""

    __slots__ = ("auth_count", "authenticated", "exchange", "expires", "mechanism", "org", "principal", "raw")

    def __init__(self, required: bool) -> None:
        self.authenticated = not required
        self.principal: str | None = None
        self.org: str | None = None
        self.mechanism: str | None = None
        self.exchange: Exchange | None = None  # an exchange in progress
        self.raw = False  # SaslHandshake v0: the next frames are raw SASL tokens
        self.auth_count = 0
        self.expires: float | None = None  # time.monotonic() when the session expires (KIP-368)

    def succeed(self, user: User, mechanism: str, lifetime_ms: int = 0) -> None:
        self.expires = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        self.authenticated = True
        self.principal, self.org, self.mechanism = user.name, user.org, mechanism
        self.exchange = None
        self.raw = False
        self.auth_count += 1
