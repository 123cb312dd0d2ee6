"""The users file the REST API authenticates against: plain and SCRAM passwords, reloads."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

import pytest

from rafka.admin.users import UsersFile, UsersFileError, basic_credentials, check_password
from rafka.gateway.auth import ScramCredential, User, parse_users


def scram(password: str, salt: bytes = b"pepper", iterations: int = 4096, name: str = "sha256") -> dict[str, Any]:
    """A ``scram_sha_*`` table of the users file for ``password``."""
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    server_key = hmac.new(salted, b"Server Key", name).digest()
    return {"salt": base64.b64encode(salt).decode(), "iterations": iterations,
            "stored_key": base64.b64encode(hashlib.new(name, client_key).digest()).decode(),
            "server_key": base64.b64encode(server_key).decode()}


def toml(users: list[dict[str, Any]]) -> str:
    out = []
    for u in users:
        out.append("[[users]]")
        out += [f"{k} = {json.dumps(v)}" for k, v in u.items() if not isinstance(v, dict)]
        for k, v in u.items():
            if isinstance(v, dict):
                out.append(f"[users.{k}]")
                out += [f"{kk} = {json.dumps(vv)}" for kk, vv in v.items()]
    return "\n".join(out) + "\n"


def test_plain_password_and_org() -> None:
    users = parse_users(toml([{"name": "alice", "password": "s3cret", "org": "acme"}]))
    alice = users.get("alice")
    assert alice is not None and alice.org == "acme"
    assert check_password(alice, "s3cret") and not check_password(alice, "nope")


def test_a_user_without_an_org_is_refused_as_by_the_kafka_listener(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    path.write_text(toml([{"name": "bob", "password": "x"}]))
    with pytest.raises(UsersFileError, match="org"):
        UsersFile(str(path)).authenticate("bob", "x")


@pytest.mark.parametrize(("key", "digest"), [("scram_sha_256", "sha256"), ("scram_sha_512", "sha512")])
def test_scram_only_users_check_the_password_against_the_stored_key(key: str, digest: str) -> None:
    user = parse_users(toml([{"name": "svc", "org": "acme", key: scram("pw", name=digest)}])).get("svc")
    assert user is not None and user.password is None
    assert check_password(user, "pw") and not check_password(user, "pw2")


def test_scram_tables_from_a_toml_file(tmp_path: Path) -> None:
    c = scram("pw")
    path = tmp_path / "users.toml"
    path.write_text('[[users]]\nname = "svc"\norg = "acme"\n[users.scram_sha_256]\n'
                    + "".join(f"{k} = {json.dumps(v)}\n" for k, v in c.items()))
    user = UsersFile(str(path)).authenticate("svc", "pw")
    assert user is not None and user.org == "acme"


def test_unknown_mechanism_never_matches() -> None:
    c = scram("pw")
    cred = ScramCredential(base64.b64decode(c["salt"]), c["iterations"], base64.b64decode(c["stored_key"]), b"")
    assert not check_password(User("svc", "acme", None, {"SCRAM-MD5": cred}), "pw")


def test_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    path.write_text('[[users]]\nname = "alice"\npassword = "one"\norg = "acme"\n')
    users = UsersFile(str(path))
    assert users.authenticate("alice", "one") is not None
    path.write_text('[[users]]\nname = "alice"\npassword = "two"\norg = "acme"\n')
    os.utime(path, (1, 1))  # a different mtime even within the clock's resolution
    assert users.authenticate("alice", "one") is None
    assert users.authenticate("alice", "two") is not None
    assert users.authenticate("mallory", "two") is None


def test_basic_credentials() -> None:
    token = base64.b64encode(b"alice:pa:ss").decode()
    assert basic_credentials(f"Basic {token}") == ("alice", "pa:ss")
    assert basic_credentials(f"basic  {token}") == ("alice", "pa:ss")
    for bad in (None, "", "Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode()):
        assert basic_credentials(bad) is None
