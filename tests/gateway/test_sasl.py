"""SaslHandshake/SaslAuthenticate on a real KafkaConnection (fake transport, fake shards)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rafka.gateway import auth, handlers  # noqa: F401  (handlers fills the registry)
from rafka.gateway.api import REGISTRY
from tests.gateway.harness import Driver, decode_response, encode_request, make_gateway
from tests.gateway.test_auth import ScramClient

USERS = """
[[users]]
name = "alice"
password = "alice-secret"
org = "acme"

[[users]]
name = "alice2"
password = "other"
org = "acme"

[[users]]
name = "bob"
password = "bob-secret"
org = "globex"
"""


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.toml"
    path.write_text(USERS)
    return path


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro_fn())


async def plain_login(d: Driver, user: str, password: str, version: int = 2) -> dict[str, Any] | None:
    hs = await d.request(17, 1, {"mechanism": "PLAIN"})
    assert hs is not None and hs["error_code"] == 0 and "PLAIN" in hs["mechanisms"]
    return await d.request(36, version, {"auth_bytes": f"\0{user}\0{password}".encode()})


async def list_groups(d: Driver) -> dict[str, Any] | None:
    return await d.request(16, 4, {"states_filter": []})


def test_registry_advertises_sasl() -> None:
    assert (REGISTRY[17].min_version, REGISTRY[17].max_version) == (0, 1)
    assert (REGISTRY[36].min_version, REGISTRY[36].max_version) == (0, 2)


def test_plain_sets_the_org(users_file: Path) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        d = Driver(gw)
        av = await d.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert av is not None and {17, 36} <= {k["api_key"] for k in av["api_keys"]}
        resp = await plain_login(d, "alice", "alice-secret")
        assert resp is not None and resp["error_code"] == 0 and resp["session_lifetime"] == 0
        assert d.conn.org_id == "acme" and d.conn.principal == "alice"
        lg = await list_groups(d)
        assert lg is not None and not d.closed
        assert gw.router.calls and {org for _, _, org in gw.router.calls} == {"acme"}  # type: ignore[attr-defined]

    run(main)


def test_request_before_authentication_closes(users_file: Path) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        d = Driver(gw)
        assert await d.request(3, 12, {"topics": None, "allow_auto_topic_creation": False}) is None
        assert d.closed and not gw.router.calls  # type: ignore[attr-defined]
        # after a handshake but before SaslAuthenticate: the same
        d = Driver(gw)
        assert (await d.request(17, 1, {"mechanism": "PLAIN"}))["error_code"] == 0  # type: ignore[index]
        assert await list_groups(d) is None and d.closed

    run(main)


def test_wrong_password_answers_58_then_closes(users_file: Path) -> None:
    async def main() -> None:
        d = Driver(make_gateway(auth_users=str(users_file)))
        resp = await plain_login(d, "alice", "wrong")
        assert resp is not None and resp["error_code"] == 58
        assert "Invalid username or password" in resp["error_message"]
        assert d.closed and d.conn.org_id == "default" and d.transport.writes_after_close == 0

    run(main)


def test_unsupported_mechanism_and_out_of_order_requests(users_file: Path) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        d = Driver(gw)
        resp = await d.request(17, 1, {"mechanism": "GSSAPI"})
        assert resp is not None and resp["error_code"] == 33
        assert resp["mechanisms"] == list(auth.MECHANISMS) and d.closed
        d = Driver(gw)
        resp = await d.request(36, 2, {"auth_bytes": b"\0alice\0alice-secret"})
        assert resp is not None and resp["error_code"] == 34 and d.closed
        d = Driver(gw)
        await d.request(17, 1, {"mechanism": "PLAIN"})
        resp = await d.request(17, 1, {"mechanism": "PLAIN"})
        assert resp is not None and resp["error_code"] == 34 and d.closed

    run(main)


def test_only_the_enabled_mechanisms_are_offered(users_file: Path) -> None:
    """As Kafka's sasl.enabled.mechanisms: a listener can refuse PLAIN, which sends the password
    itself, and serve SCRAM only."""
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file), sasl_enabled_mechanisms="SCRAM-SHA-512")
        d = Driver(gw)
        resp = await d.request(17, 1, {"mechanism": "PLAIN"})
        assert resp is not None and (resp["error_code"], resp["mechanisms"]) == (33, ["SCRAM-SHA-512"]) and d.closed
        d = Driver(gw)
        resp = await d.request(17, 1, {"mechanism": "SCRAM-SHA-512"})
        assert resp is not None and (resp["error_code"], resp["mechanisms"]) == (0, ["SCRAM-SHA-512"])

    run(main)
    from rafka.config import Config, problems

    assert problems(Config(sasl_enabled_mechanisms="SCRAM-SHA-512,GSSAPI")) == [
        "--sasl-enabled-mechanisms must list some of PLAIN,SCRAM-SHA-256,SCRAM-SHA-512, not 'SCRAM-SHA-512,GSSAPI'"]
    assert problems(Config(sasl_enabled_mechanisms=" , ")) != []


def test_sasl_without_auth_configured_is_an_illegal_state() -> None:
    async def main() -> None:
        d = Driver(make_gateway())
        resp = await d.request(17, 1, {"mechanism": "PLAIN"})
        assert resp is not None and resp["error_code"] == 34 and resp["mechanisms"] == []
        resp = await d.request(36, 2, {"auth_bytes": b"\0a\0b"})
        assert resp is not None and resp["error_code"] == 34 and not d.closed
        assert (await list_groups(d)) is not None and d.conn.org_id == "default"

    run(main)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_over_saslauthenticate(users_file: Path, mechanism: str) -> None:
    async def main() -> None:
        d = Driver(make_gateway(auth_users=str(users_file)))
        client = ScramClient(mechanism.replace("SCRAM-SHA-", "sha"), "bob", "bob-secret")
        assert (await d.request(17, 1, {"mechanism": mechanism}))["error_code"] == 0  # type: ignore[index]
        first = await d.request(36, 1, {"auth_bytes": client.first()})
        assert first is not None and first["error_code"] == 0 and d.conn.org_id == "default"
        final = await d.request(36, 1, {"auth_bytes": client.final(first["auth_bytes"])})
        assert final is not None and final["error_code"] == 0 and client.verify(final["auth_bytes"])
        assert d.conn.org_id == "globex"

    run(main)


def test_pipelined_handshake_authenticate_and_request_are_handled_in_order(users_file: Path) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        d = Driver(gw)
        data = (encode_request(17, 1, {"mechanism": "PLAIN"}, 1)
                + encode_request(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}, 2)
                + encode_request(16, 4, {"states_filter": []}, 3))
        await d.feed(data)
        frames = d.new_frames()
        assert [decode_response(f, k, v)["_correlation_id"] for f, (k, v) in zip(frames, [(17, 1), (36, 2), (16, 4)])] == [1, 2, 3]
        assert not d.closed and {org for _, _, org in gw.router.calls} == {"acme"}  # type: ignore[attr-defined]
        # a pipelined request behind a failing authentication is never handled
        d = Driver(gw)
        gw.router.calls.clear()  # type: ignore[attr-defined]
        await d.feed(encode_request(17, 1, {"mechanism": "PLAIN"}, 1)
                     + encode_request(36, 2, {"auth_bytes": b"\0alice\0nope"}, 2)
                     + encode_request(16, 4, {"states_filter": []}, 3))
        assert len(d.new_frames()) == 2 and d.closed and not gw.router.calls  # type: ignore[attr-defined]

    run(main)


def test_reauthentication_is_off_by_default_as_in_kafka(users_file: Path) -> None:
    async def main() -> None:
        d = Driver(make_gateway(auth_users=str(users_file)))
        first = await plain_login(d, "alice", "alice-secret")
        assert first is not None and first["session_lifetime"] == 0
        hs = await d.request(17, 1, {"mechanism": "PLAIN"})  # connections.max.reauth.ms 0: no re-authentication
        assert hs is not None and (hs["error_code"], hs["mechanisms"]) == (34, []) and not d.closed
        assert await list_groups(d) is not None and not d.closed, "the connection goes on"

    run(main)


def test_an_expired_session_closes_the_connection_unless_re_authenticated(users_file: Path) -> None:
    import time

    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file), connections_max_reauth_ms=60_000)
        d = Driver(gw)
        first = await plain_login(d, "alice", "alice-secret")
        assert first is not None and first["session_lifetime"] == 60_000
        state = d.conn.auth
        assert state.expires is not None and 59 < state.expires - time.monotonic() <= 60
        state.expires = time.monotonic() + 0.5  # nearly expired: the client re-authenticates in time
        again = await plain_login(d, "alice", "alice-secret")
        assert again is not None and again["session_lifetime"] == 60_000 and state.auth_count == 2
        assert state.expires - time.monotonic() > 59, "a new session"
        assert await list_groups(d) is not None and not d.closed
        state.expires = time.monotonic() - 0.001  # the session has expired
        assert await list_groups(d) is None and d.closed, "closed at the first request after expiry"

    run(main)


def test_an_unfinished_re_authentication_does_not_outlive_the_session(users_file: Path) -> None:
    """A SaslHandshake begun on an authenticated connection and never finished left the session's
    expiry unchecked for good (a removed user kept its connection); as Kafka, any other request
    while re-authenticating closes the connection."""
    async def main() -> None:
        d = Driver(make_gateway(auth_users=str(users_file), connections_max_reauth_ms=60_000))
        await plain_login(d, "alice", "alice-secret")
        hs = await d.request(17, 1, {"mechanism": "PLAIN"})
        assert hs is not None and hs["error_code"] == 0
        assert await list_groups(d) is None and d.closed

    run(main)


def test_frames_before_authentication_are_held_to_512_kib(users_file: Path) -> None:
    """Kafka's sasl.server.max.receive.size: an unauthenticated client cannot make the gateway
    buffer a frame up to max_request_bytes (100 MiB); once authenticated, it can."""
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        d = Driver(gw)
        d.conn.data_received(struct.pack(">i", 512 * 1024 + 1))
        assert d.closed
        d = Driver(gw)
        await plain_login(d, "alice", "alice-secret")
        d.conn.data_received(struct.pack(">i", 2 * 1024 * 1024) + b"x" * 1000)  # a large produce, begun
        assert not d.closed and d.conn.decoder.buffered == 1004

    run(main)


def test_reauthentication_keeps_the_principal(users_file: Path) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file), connections_max_reauth_ms=60_000)
        d = Driver(gw)
        await plain_login(d, "alice", "alice-secret")
        again = await plain_login(d, "alice", "alice-secret")  # KIP-368 re-authentication
        assert again is not None and again["error_code"] == 0 and not d.closed and d.conn.auth.auth_count == 2
        other = await plain_login(d, "alice2", "other")  # same org, another principal: refused like Kafka
        assert other is not None and other["error_code"] == 58 and "Cannot change principals" in other["error_message"]
        assert d.closed
        d = Driver(gw)
        await plain_login(d, "alice", "alice-secret")
        resp = await d.request(17, 1, {"mechanism": "SCRAM-SHA-256"})  # mechanism change refused
        assert resp is not None and resp["error_code"] == 33 and d.closed
        d = Driver(gw)
        await plain_login(d, "alice", "alice-secret")
        resp = await d.request(36, 2, {"auth_bytes": b"x"})  # no handshake: answered, kept open
        assert resp is not None and resp["error_code"] == 34 and not d.closed

    run(main)


def test_handshake_v0_raw_tokens(users_file: Path) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        d = Driver(gw)
        assert (await d.request(17, 0, {"mechanism": "PLAIN"}))["error_code"] == 0  # type: ignore[index]
        token = b"\0alice\0alice-secret"
        await d.feed(struct.pack(">i", len(token)) + token)
        assert d.new_frames() == [b""] and d.conn.org_id == "acme"
        assert (await list_groups(d)) is not None
        # SCRAM raw, pipelined straight behind the handshake
        d = Driver(gw)
        client = ScramClient("sha256", "bob", "bob-secret")
        first = client.first()
        await d.feed(encode_request(17, 0, {"mechanism": "SCRAM-SHA-256"}) + struct.pack(">i", len(first)) + first)
        _handshake, server_first = d.new_frames()
        final = client.final(server_first)
        await d.feed(struct.pack(">i", len(final)) + final)
        (server_final,) = d.new_frames()
        assert client.verify(server_final) and d.conn.org_id == "globex"
        # a wrong raw token closes without an answer
        d = Driver(gw)
        await d.request(17, 0, {"mechanism": "PLAIN"})
        await d.feed(struct.pack(">i", 9) + b"\0alice\0no")
        assert d.new_frames() == [] and d.closed

    run(main)


def test_reload_keeps_old_users_on_a_bad_file(users_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        gw = make_gateway(auth_users=str(users_file))
        users_file.write_text(USERS + '\n[[users]]\nname = "dave"\npassword = "d"\norg = "initech"\n')
        gw.reload_users()
        assert gw.users is not None and gw.users.get("dave") is not None
        d = Driver(gw)
        assert (await plain_login(d, "dave", "d"))["error_code"] == 0  # type: ignore[index]
        users_file.write_text("[[users]\nbroken")
        gw.reload_users()
        assert gw.users.get("dave") is not None
        assert any("keeping the 4 current users" in r.getMessage() for r in caplog.records)
        assert not d.closed  # existing sessions are untouched by a reload

    run(main)
