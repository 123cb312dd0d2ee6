"""The users file, SASL/PLAIN and SCRAM-SHA-256/512 against an independent client."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

import pytest

from rafka.gateway import auth

# --------------------------------------------------------------------------
# an independent SCRAM client (RFC 5802), written from the RFC, not from auth.py


class ScramClient:
    def __init__(self, hash_name: str, user: str, password: str, nonce: str | None = None,
                 authzid: str = "") -> None:
        self.h = hash_name
        self.user, self.password = user, password
        self.nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode().replace(",", "")
        self.gs2 = f"n,{'a=' + authzid if authzid else ''},"
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.first_bare = f"n={name},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2 + self.first_bare).encode()

    def final(self, server_first: bytes, tamper: bool = False) -> bytes:
        sf = server_first.decode()
        fields = dict(part.split("=", 1) for part in sf.split(","))
        assert fields["r"].startswith(self.nonce) and len(fields["r"]) > len(self.nonce)
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = hashlib.pbkdf2_hmac(self.h, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.h).digest()
        stored_key = hashlib.new(self.h, client_key).digest()
        without_proof = f"c={base64.b64encode(self.gs2.encode()).decode()},r={fields['r']}"
        auth_message = f"{self.first_bare},{sf},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, self.h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        if tamper:
            proof = bytes([proof[0] ^ 1]) + proof[1:]
        server_key = hmac.new(salted, b"Server Key", self.h).digest()
        self.server_signature = hmac.new(server_key, auth_message, self.h).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self.server_signature)


def salted_entry(hash_name: str, password: str, salt: bytes, iterations: int = 4096) -> str:
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    server = hmac.new(salted, b"Server Key", hash_name).digest()
    b64 = lambda b: base64.b64encode(b).decode()
    return (f'{{salt = "{b64(salt)}", iterations = {iterations}, stored_key = "{b64(stored)}", '
            f'server_key = "{b64(server)}"}}')


USERS = f"""
[[users]]
name = "alice"
password = "alice-secret"
org = "acme"

[[users]]
name = "user"
org = "rfc"
scram_sha_256 = {salted_entry("sha256", "pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))}

[[users]]
name = "bob,=x"
password = "pw"
org = "globex"
"""


@pytest.fixture
def users() -> auth.Users:
    return auth.parse_users(USERS, "users.toml")


def run_scram(users: auth.Users, mechanism: str, user: str, password: str, **kw: object) -> auth.ScramExchange:
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    client = ScramClient(h, user, password, **kw)  # type: ignore[arg-type]
    ex = auth.new_exchange(mechanism, users)
    server_first = ex.step(client.first())
    assert not ex.complete
    server_final = ex.step(client.final(server_first))
    assert ex.complete and client.verify(server_final)
    return ex  # type: ignore[return-value]


# --------------------------------------------------------------------------
# users file


def test_users_file_loads_and_derives_scram_from_passwords(users: auth.Users, tmp_path: Path) -> None:
    assert len(users) == 3
    alice = users.get("alice")
    assert alice is not None and alice.org == "acme" and alice.password == "alice-secret"
    assert set(alice.scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert alice.scram["SCRAM-SHA-256"].iterations >= 4096
    rfc = users.get("user")
    assert rfc is not None and rfc.password is None and set(rfc.scram) == {"SCRAM-SHA-256"}
    path = tmp_path / "users.toml"
    path.write_text(USERS)
    assert set(auth.load_users(str(path)).by_name) == {"alice", "user", "bob,=x"}


SCRAM_ENTRY = ("[[users]]\nname = 'a'\norg = 'o'\nscram_sha_256 = {{salt = '{salt}', iterations = {iterations}, "
               "stored_key = 'AAAA', server_key = 'AAAA'}}\n")


@pytest.mark.parametrize(("text", "message"), [
    ("[[users]]\nname = 'a'\norg = 'o'\n", "neither password nor SCRAM"),
    ("[[users]]\nname = 'a'\npassword = 'p'\n", ".org"),
    ("[[users]]\norg = 'o'\npassword = 'p'\n", ".name"),
    ("[[users]]\nname = 'a'\norg = 'o'\npassword = 'p'\n[[users]]\nname = 'a'\norg = 'o'\npassword = 'q'\n",
     "duplicate"),
    ("[[users]]\nname = 'a'\norg = 'o'\npassword = 'p'\npasword = 'x'\n", "unknown keys"),
    ("[[user]]\nname = 'a'\n", "unknown top-level"),
    ("[[users]\n", "not valid TOML"),
    (SCRAM_ENTRY.format(salt="AAAA", iterations=100), "iterations"),
    (SCRAM_ENTRY.format(salt="AAAA", iterations=4096), "expected 32 bytes"),
    (SCRAM_ENTRY.format(salt="!!", iterations=4096), "base64"),
    # 250 bytes, but 280 once percent-encoded: the directory its topics live under could not be made
    # (the shard's first write failed with "File name too long" and it restarted again and again)
    (f"[[users]]\nname = 'a'\norg = '{'a' * 235}{' ' * 15}'\npassword = 'p'\n", "280 bytes once percent-encoded"),
])
def test_bad_users_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(auth.UsersFileError, match=message):
        auth.parse_users(text, "u.toml")


def test_an_organisation_name_that_fits_its_directory_is_accepted() -> None:
    text = f"[[users]]\nname = 'a'\norg = '{'a' * 225}{' ' * 10}'\npassword = 'p'\n"  # 255 bytes encoded
    assert auth.parse_users(text, "u.toml").by_name["a"].org == "a" * 225 + " " * 10


def test_unreadable_users_file(tmp_path: Path) -> None:
    with pytest.raises(auth.UsersFileError, match="cannot read"):
        auth.load_users(str(tmp_path / "missing.toml"))


# --------------------------------------------------------------------------
# PLAIN


def test_plain_accepts_the_right_password(users: auth.Users) -> None:
    ex = auth.new_exchange("PLAIN", users)
    assert ex.step(b"\0alice\0alice-secret") == b"" and ex.complete
    assert ex.user is not None and ex.user.org == "acme"
    ex = auth.new_exchange("PLAIN", users)
    ex.step(b"alice\0alice\0alice-secret")  # authzid equal to the user is allowed
    assert ex.complete


@pytest.mark.parametrize(("token", "message", "shown"), [
    (b"\0alice\0wrong", "Invalid username or password", True),
    (b"\0nobody\0alice-secret", "Invalid username or password", True),
    (b"\0user\0pencil", "Invalid username or password", True),  # SCRAM-only user has no PLAIN password
    (b"bob\0alice\0alice-secret", "authorization id", True),
    (b"bob\0alice\0wrong", "Invalid username or password", True),  # the password is checked first
    (b"\0alice\0", "password not specified", True),
    (b"\0\0x", "username not specified", True),
    (b"alice\0alice-secret", "expected 3 tokens", False),  # Kafka: a SaslException, not shown
    (b"\0alice\0\xff", "UTF-8", False),
])
def test_plain_rejects(users: auth.Users, token: bytes, message: str, shown: bool) -> None:
    ex = auth.new_exchange("PLAIN", users)
    with pytest.raises(auth.AuthError, match=message) as raised:
        ex.step(token)
    assert raised.value.shown is shown
    assert not ex.complete and ex.user is None


# --------------------------------------------------------------------------
# SCRAM


def test_rfc7677_sha256_test_vector(users: auth.Users) -> None:
    """RFC 7677 §3: user "user", password "pencil", the exact messages of the RFC."""
    ex = auth.ScramExchange(users, "SCRAM-SHA-256", server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = ex.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    server_final = ex.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                           b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert ex.complete and ex.user is not None and ex.user.org == "rfc"
    # and the independent client agrees with the vector
    client = ScramClient("sha256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(server_first).endswith(b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.verify(server_final)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_with_derived_credentials(users: auth.Users, mechanism: str) -> None:
    ex = run_scram(users, mechanism, "alice", "alice-secret")
    assert ex.user is not None and ex.user.name == "alice" and ex.user.org == "acme"
    ex = run_scram(users, mechanism, "bob,=x", "pw", authzid="bob=2C=3Dx")  # saslname escaping
    assert ex.user is not None and ex.user.org == "globex"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_or_tampered_proof_fails(users: auth.Users, mechanism: str) -> None:
    h = mechanism.replace("SCRAM-SHA-", "sha")
    for password, tamper in (("wrong", False), ("alice-secret", True)):
        client = ScramClient(h, "alice", password)
        ex = auth.new_exchange(mechanism, users)
        server_first = ex.step(client.first())
        with pytest.raises(auth.AuthError, match="Invalid client credentials"):
            ex.step(client.final(server_first, tamper=tamper))
        assert not ex.complete
        with pytest.raises(auth.AuthError):  # a failed exchange stays failed
            ex.step(client.final(server_first))


def test_scram_rejections(users: auth.Users) -> None:
    def first(msg: bytes, mechanism: str = "SCRAM-SHA-256") -> None:
        auth.new_exchange(mechanism, users).step(msg)

    with pytest.raises(auth.AuthError, match="Invalid user credentials") as raised:
        first(b"n,,n=nobody,r=abc")
    assert not raised.value.shown, "the client must not learn which user names exist"
    with pytest.raises(auth.AuthError, match="Invalid user credentials"):
        first(b"n,,n=user,r=abc", "SCRAM-SHA-512")  # the RFC user only has SHA-256 credentials
    with pytest.raises(auth.AuthError, match="channel binding"):
        first(b"p=tls-unique,,n=alice,r=abc")
    with pytest.raises(auth.AuthError, match="delegation tokens"):
        first(b"n,,n=alice,r=abc,tokenauth=TRUE")
    with pytest.raises(auth.AuthError, match="authorization id") as raised:
        first(b"n,a=bob,n=alice,r=abc")
    assert raised.value.shown  # Kafka's SaslAuthenticationException
    with pytest.raises(auth.AuthError):
        first(b"garbage")
    with pytest.raises(auth.AuthError):
        first(b"n,,n=al=ice,r=abc")
    # a final message with the wrong nonce, or the wrong channel binding
    client = ScramClient("sha256", "alice", "alice-secret")
    ex = auth.new_exchange("SCRAM-SHA-256", users)
    sf = ex.step(client.first())
    final = client.final(sf).decode()
    with pytest.raises(auth.AuthError, match="nonce"):
        ex.step(final.replace(",r=", ",r=X").encode())
    ex = auth.new_exchange("SCRAM-SHA-256", users)
    sf = ex.step(client.first())
    with pytest.raises(auth.AuthError, match="channel binding"):
        ex.step(client.final(sf).replace(b"c=biws", b"c=eSws"))


def test_scram_extensions_are_ignored_as_kafka_ignores_unsupported_ones(users: auth.Users) -> None:
    for bad in (b"n,,n=alice,r=abc,x", b"n,,n=alice,r=abc,", b"n,,n=alice,r=abc,1=2"):
        with pytest.raises(auth.AuthError, match="client-first") as raised:
            auth.new_exchange("SCRAM-SHA-256", users).step(bad)
        assert not raised.value.shown
    for extensions in (",traceid=abc", ",tokenauth=false", ",tokenauth=false,x=1"):
        client = ScramClient("sha256", "alice", "alice-secret")
        ex = auth.new_exchange("SCRAM-SHA-256", users)
        first = client.first() + extensions.encode()
        sf = ex.step(first)
        client.first_bare = first.decode()[3:]  # the client signs what it sent
        assert client.verify(ex.step(client.final(sf)))
        assert ex.complete and ex.user is not None and ex.user.name == "alice"


def test_unknown_mechanism() -> None:
    with pytest.raises(ValueError):
        auth.new_exchange("GSSAPI", auth.Users("x", {}))
