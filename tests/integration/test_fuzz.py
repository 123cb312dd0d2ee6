"""Fuzzing the gateway's input path.

In-process (no sockets): hypothesis builds valid kio requests for every registered
API and version, mutates them (bit flips, truncation, splices, bad sizes, versions
and API keys, concatenation) and feeds them, split at random points, into a real
``KafkaConnection`` over a fake transport with fake shards. Nothing may raise out
of ``data_received``; every connection ends answered (responses in request order),
closed, or waiting for the rest of a frame; no handler may crash; and with SASL on,
nothing reaches the shards before authentication. Live: raw-socket abuse of an
auth-enabled broker while an authenticated consumer commits synchronously.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from rafka.gateway import handlers  # noqa: F401  (fills the registry)
from rafka.gateway.api import REGISTRY
from rafka.gateway.handlers import sasl
from rafka.gateway.router import ShardUnavailable
from rafka.gateway.server import Gateway
from rafka.protocol import codec
from tests.gateway.harness import Driver, encode_request, make_gateway
from tests.gateway.test_auth import ScramClient
from tests.integration.test_security import SecureRafka, conf

MAX_REQUEST = 1 << 20
API_KEYS = sorted(REGISTRY)
SCALE = float(os.environ.get("RAFKA_FUZZ_SCALE", "1"))  # e.g. 0.05 while developing, 10 for a long run
TOTAL_INPUTS = int(20_000 * SCALE)
AUTH_INPUTS = int(2_500 * SCALE)
RANDOM_INPUTS = int(1_500 * SCALE)
PER_API = (TOTAL_INPUTS - AUTH_INPUTS - RANDOM_INPUTS) // len(API_KEYS) + 1
# no shrinking: a failure reports its (unshrunk) input and seed; shrinking could take minutes
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate])
st.register_type_strategy(Records, st.binary(max_size=128).map(Records))  # the gateway passes records through
COUNTS: dict[str, int] = {}

USERS = """
[[users]]
name = "alice"
password = "alice-pw"
org = "acme"
"""


class _Crashes(logging.Handler):
    """Collects handler crashes (the server logs them with log.exception and closes the connection).

    A handler that lets a shard's ShardUnavailable escape is a known gap outside the
    gateway's input path (the fake shards are always down); those are counted and
    reported, any other crash fails the test.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.shard_down: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, ShardUnavailable):
            name = record.getMessage().split(" ")[0]
            self.shard_down[name] = self.shard_down.get(name, 0) + 1
        else:
            self.records.append(record)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    users = tmp_path_factory.mktemp("fuzz") / "users.toml"
    users.write_text(USERS)
    loop = asyncio.new_event_loop()
    crashes = _Crashes()
    gw_log = logging.getLogger("rafka.gateway")
    gw_log.addHandler(crashes)
    quiet = gw_log.level
    gw_log.setLevel(logging.ERROR)  # bad input is logged at WARNING once per connection: too chatty here

    async def gateways() -> tuple[Gateway, Gateway]:
        return (make_gateway(max_request_bytes=MAX_REQUEST),
                make_gateway(max_request_bytes=MAX_REQUEST, auth_users=str(users)))

    plain, secured = loop.run_until_complete(gateways())
    delay, sasl.FAILED_AUTHENTICATION_DELAY = sasl.FAILED_AUTHENTICATION_DELAY, 0.0  # no 100 ms per failed login
    start = time.monotonic()
    yield {"loop": loop, "plain": plain, "auth": secured, "crashes": crashes}
    sasl.FAILED_AUTHENTICATION_DELAY = delay
    gw_log.removeHandler(crashes)
    gw_log.setLevel(quiet)
    loop.close()
    total = sum(v for k, v in COUNTS.items() if k != "sasl-authenticated")
    line = (f"fuzz: {total} inputs through KafkaConnection in {time.monotonic() - start:.1f}s "
            f"({', '.join(f'{k}={v}' for k, v in sorted(COUNTS.items()))})")
    if crashes.shard_down:
        line += ("; handlers that closed the connection on a down shard instead of answering an error: "
                 + ", ".join(f"{k} x{v}" for k, v in sorted(crashes.shard_down.items())))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    else:
        print(line)


# --------------------------------------------------------------------------
# strategies


@st.composite
def valid_frame(draw: st.DrawFn, api_key: int) -> bytes:
    spec = REGISTRY[api_key]
    version = draw(st.integers(spec.min_version, spec.max_version))
    cls = codec.request_class(api_key, version)
    entity = draw(st.from_type(cls))  # type: ignore[arg-type]
    return encode_request(api_key, version, entity, draw(st.integers(-(2**31), 2**31 - 1)))


def _resize(b: bytearray) -> bytearray:
    struct.pack_into(">i", b, 0, len(b) - 4)
    return b


MUTATIONS = ("none", "flip", "truncate", "cut", "extend", "insert", "version", "api_key", "size", "concat", "header")


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """One random mutation of a size-prefixed request (plain ``random``: hypothesis draws cost ~0.2 ms each)."""
    b = bytearray(frame)
    kind = rng.choice(MUTATIONS) if len(b) > 5 else "extend"
    if (kind in ("version", "api_key") and len(b) < 8) or (kind == "header" and len(b) < 14):
        kind = "flip"
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(4, len(b))] ^= rng.randint(1, 255)
    elif kind == "truncate":  # a complete frame whose body ends early
        b = _resize(b[: rng.randrange(4, len(b))])
    elif kind == "cut":  # an incomplete frame: the size says more is coming
        b = b[: rng.randrange(1, len(b))]
    elif kind == "extend":
        b = _resize(b + rng.randbytes(rng.randint(1, 64)))
    elif kind == "insert":
        pos = rng.randint(4, len(b))
        b[pos:pos] = rng.randbytes(rng.randint(1, 16))
        b = _resize(b)
    elif kind == "version":
        struct.pack_into(">h", b, 6, rng.randint(-(2**15), 2**15 - 1))
    elif kind == "api_key":
        struct.pack_into(">h", b, 4, rng.randint(-(2**15), 2**15 - 1))
    elif kind == "size":
        size = rng.choice([-1, 0, 1, 7, 2**31 - 1, MAX_REQUEST + 1, rng.randint(-(2**31), 2**31 - 1)])
        struct.pack_into(">i", b, 0, size)
    elif kind == "concat":
        b += rng.choice([frame, encode_request(18, 0, {}, 99), b"\0\0\0\x02\xff\xff"])
    elif kind == "header":  # client id length garbage
        struct.pack_into(">h", b, 12, rng.randint(-(2**15), 2**15 - 1))
    return bytes(b)


def split(rng: random.Random, data: bytes) -> list[bytes]:
    """``data`` cut at up to four random points: how it arrives over TCP."""
    cuts = sorted({rng.randint(0, len(data)) for _ in range(rng.randint(0, 4))})
    out, prev = [], 0
    for c in cuts + [len(data)]:
        out.append(data[prev:c])
        prev = c
    return [c for c in out if c]


# --------------------------------------------------------------------------
# the oracle


def expected_correlations(data: bytes) -> tuple[list[tuple[int, int]], bool]:
    """(api key, correlation id) of every complete, acceptable frame; and whether framing broke."""
    out, pos = [], 0
    while len(data) - pos >= 4:
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or size > MAX_REQUEST:
            return out, True
        if len(data) - pos - 4 < size:
            break
        frame = data[pos + 4 : pos + 4 + size]
        out.append(struct.unpack_from(">hhi", frame)[::2] if len(frame) >= 8 else (-1, -1))  # type: ignore[arg-type]
        pos += 4 + size
    return out, False


async def drive(gw: Gateway, parts: list[bytes]) -> Driver:
    d = Driver(gw)
    for part in parts:
        d.conn.data_received(part)  # must never raise
        await asyncio.sleep(0)
    await d.settle(5.0)
    return d


def check(env: dict[str, Any], d: Driver, data: bytes, strict: bool) -> bool:
    """Check the outcome; True if the connection should still answer a follow-up request."""
    crashes = env["crashes"].records
    assert not crashes, (crashes[0].getMessage(), crashes[0].exc_info)
    assert d.transport.writes_after_close == 0
    if strict:
        expected, broken = expected_correlations(data)
        got = [struct.unpack_from(">i", f)[0] for f in d.frames()]
        # responses come in request order: a subsequence of the requests' correlation ids
        it = iter(c for _, c in expected)
        assert all(any(c == e for e in it) for c in got), (got, expected)
        if not d.closed:
            assert not broken
            silent = sum(1 for k, _ in expected if k == 0)  # Produce acks=0 has no response
            assert len(got) >= len(expected) - silent, (got, expected)
    state = d.conn.auth
    # closed, waiting for the rest of a frame, or expecting a raw SASL token: no follow-up
    return not (d.closed or d.conn.decoder.buffered or (state.raw and not state.authenticated))


async def finish(d: Driver, probe: bool) -> None:
    """If the connection is still usable, an ApiVersions gets its answer; then drop the connection."""
    if probe:
        await d.feed(encode_request(18, 0, {}, 4242), 5.0)
        assert not d.closed and struct.unpack_from(">i", d.frames()[-1])[0] == 4242
    d.conn.connection_lost(None)


def run_one(env: dict[str, Any], gw: Gateway, parts: list[bytes], counter: str, strict: bool = True) -> Driver:
    loop: asyncio.AbstractEventLoop = env["loop"]
    d = loop.run_until_complete(drive(gw, parts))
    probed = check(env, d, b"".join(parts), strict)
    loop.run_until_complete(finish(d, probed))
    COUNTS[counter] = COUNTS.get(counter, 0) + 1
    return d


# --------------------------------------------------------------------------
# in-process fuzzing


_POOLS: dict[int, list[bytes]] = {}


def seed_frames(api_key: int, generated: int = 12) -> list[bytes]:
    """Valid requests to mutate: every version's all-defaults request, and some generated by hypothesis.

    Generating kio entities is slow (tens of ms for a Fetch), so each fuzz input
    mutates one of these instead of generating its own.
    """
    if api_key not in _POOLS:
        spec = REGISTRY[api_key]
        pool = [encode_request(api_key, v, {}, v) for v in range(spec.min_version, spec.max_version + 1)]

        @settings(FUZZ, max_examples=generated)
        @given(data=st.data())
        def collect(data: st.DataObject) -> None:
            pool.append(data.draw(valid_frame(api_key)))

        collect()
        _POOLS[api_key] = pool
    return _POOLS[api_key]


SEEDS = st.integers(0, 2**64 - 1)


@pytest.mark.parametrize("api_key", API_KEYS)
def test_fuzz_every_api(env: dict[str, Any], api_key: int) -> None:
    pool = seed_frames(api_key)

    @settings(FUZZ, max_examples=PER_API)
    @given(seed=SEEDS)
    def inner(seed: int) -> None:
        rng = random.Random(seed)
        run_one(env, env["plain"], split(rng, mutate(rng, rng.choice(pool))), f"api{api_key}")

    inner()


@settings(FUZZ, max_examples=RANDOM_INPUTS)
@given(seed=SEEDS)
def test_fuzz_random_bytes(env: dict[str, Any], seed: int) -> None:
    rng = random.Random(seed)
    body = rng.randbytes(rng.randint(0, 200))
    raw = rng.choice([body, struct.pack(">i", rng.randint(-(2**31), 2**31 - 1)) + body[:64],
                      struct.pack(">i", len(body)) + body])
    run_one(env, env["plain"], split(rng, raw), "random")


_SCRAM_FIRST = ScramClient("sha256", "alice", "alice-pw", nonce="fixednonce").first()
_TOKENS = [b"\0alice\0alice-pw", b"\0alice\0wrong", b"alice\0alice\0alice-pw", _SCRAM_FIRST,
           b"n,,n=alice,r=x,tokenauth=true", b"c=biws,r=x,p=AAAA", b"n,a=bob,n=alice,r=x", b"\0\0\0", b"",
           "n,,n=\u00e9l\u00e8ve,r=\u2603".encode()]


def sasl_token(rng: random.Random) -> bytes:
    token = rng.choice(_TOKENS)
    return rng.choice([token, rng.randbytes(rng.randint(0, 80)), mutate(rng, b"\0\0\0\0" + token)[4:] or token])


def sasl_session(rng: random.Random) -> bytes:
    """A sequence of SASL and other frames against an auth-enabled gateway, some mutated."""
    frames = []
    for i in range(rng.randint(1, 5)):
        kind = rng.choice(["handshake", "authenticate", "other", "login"])
        if kind == "handshake":
            mech = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "", rng.randbytes(8).hex()])
            frame = encode_request(17, rng.randint(0, 1), {"mechanism": mech}, i)
        elif kind == "authenticate":
            frame = encode_request(36, rng.randint(0, 2), {"auth_bytes": sasl_token(rng)}, i)
        elif kind == "login":
            frame = (encode_request(17, 1, {"mechanism": "PLAIN"}, i)
                     + encode_request(36, 2, {"auth_bytes": b"\0alice\0alice-pw"}, i))
        else:
            frame = rng.choice(seed_frames(rng.choice(API_KEYS)))
        if rng.random() < 0.4:
            frame = mutate(rng, frame)
        elif rng.random() < 0.15:  # a raw token (the SaslHandshake v0 flow)
            token = sasl_token(rng)
            frame = struct.pack(">i", len(token)) + token
        frames.append(frame)
    return b"".join(frames)


@settings(FUZZ, max_examples=AUTH_INPUTS)
@given(seed=SEEDS)
def test_fuzz_sasl_path(env: dict[str, Any], seed: int) -> None:
    gw: Gateway = env["auth"]
    router = gw.router
    before = len(router.calls)  # type: ignore[attr-defined]
    rng = random.Random(seed)
    d = run_one(env, gw, split(rng, sasl_session(rng)), "sasl", strict=False)
    if d.conn.auth.auth_count:
        COUNTS["sasl-authenticated"] = COUNTS.get("sasl-authenticated", 0) + 1
    calls = router.calls[before:]  # type: ignore[attr-defined]
    # nothing reaches a shard without an identity, and never as the default organisation
    assert all(org == "acme" for _, _, org in calls), calls
    if calls:
        assert d.conn.auth.auth_count >= 1


def test_fuzz_total(env: dict[str, Any]) -> None:
    """The acceptance number: at least TOTAL_INPUTS inputs went through a connection."""
    if not {f"api{k}" for k in API_KEYS} | {"random", "sasl"} <= set(COUNTS):
        pytest.skip("run with the other fuzz tests to count")
    assert sum(v for k, v in COUNTS.items() if k != "sasl-authenticated") >= TOTAL_INPUTS, COUNTS


# --------------------------------------------------------------------------
# live: abuse an auth-enabled broker while an authenticated consumer commits

LIVE_USERS = USERS + """
[[users]]
name = "probe"
password = "probe-pw"
org = "probe"

# sees the default organisation, where unauthenticated requests would land if they ever got through
[[users]]
name = "auditor"
password = "auditor-pw"
org = "default"
"""


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRafka]:
    broker = SecureRafka(tmp_path_factory.mktemp("fuzzlive") / "data", LIVE_USERS).start()
    yield broker
    broker.stop()


def _abuse_payloads() -> list[list[bytes]]:
    """Each item: the chunks one abusive connection sends."""
    handshake = encode_request(17, 1, {"mechanism": "PLAIN"})
    return [
        [b"\xff" * 64],
        [struct.pack(">i", 2**31 - 1)],  # a 2 GiB size prefix
        [struct.pack(">i", 2**31 - 1) + b"x" * 1000],
        [struct.pack(">i", 8) + struct.pack(">hhi", 777, 0, 1)],  # unknown API key
        [struct.pack(">i", 30) + b"\x00\x0b\x00\x05" + b"\x01" * 10],  # truncated
        [encode_request(3, 12, {"topics": None, "allow_auto_topic_creation": True})],  # no auth
        [encode_request(8, 8, {"group_id": "victim"})],  # an offset commit without auth
        [encode_request(17, 1, {"mechanism": "GSSAPI"})],
        [encode_request(36, 2, {"auth_bytes": b"\0alice\0alice-pw"})],  # authenticate before handshake
        [handshake, encode_request(36, 2, {"auth_bytes": b"\0alice\0wrong"})],
        [handshake, encode_request(36, 2, {"auth_bytes": b"\xff" * 300})],
        [encode_request(17, 1, {"mechanism": "SCRAM-SHA-512"}), encode_request(36, 2, {"auth_bytes": b"n,,n=x"})],
        [encode_request(17, 0, {"mechanism": "PLAIN"}), struct.pack(">i", 2**31 - 1)],  # v0 raw, huge token
        [encode_request(17, 0, {"mechanism": "SCRAM-SHA-256"}), struct.pack(">i", 3) + b"n,,"],
        [handshake[:7]],  # half a frame, then close
    ]


@pytest.mark.integration
def test_abuse_while_authenticated_consumer_commits(secure_broker: SecureRafka) -> None:
    port = secure_broker.port
    user = conf(secure_broker, "alice", "alice-pw", "SCRAM-SHA-512")
    admin = AdminClient(user)
    admin.create_topics([NewTopic("victim-topic", 1, 1)])["victim-topic"].result(timeout=15)
    c = Consumer({**user, "group.id": "victim", "enable.auto.commit": False})
    c.assign([TopicPartition("victim-topic", 0, 0)])
    stop = threading.Event()
    sent = [0]

    def abuse() -> None:
        payloads = _abuse_payloads()
        while not stop.is_set():
            for chunks_ in payloads:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                        for chunk in chunks_:
                            s.sendall(chunk)
                        s.settimeout(0.3)
                        try:
                            while s.recv(4096):
                                pass
                        except OSError:
                            pass
                    sent[0] += 1
                except OSError:
                    pass

    threads = [threading.Thread(target=abuse, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    rounds = 3 * len(_abuse_payloads())  # every abusive connection, three times over
    committed = 0
    try:
        deadline = time.monotonic() + 20
        while (committed < 200 or sent[0] < rounds) and time.monotonic() < deadline:
            committed += 1
            c.commit(offsets=[TopicPartition("victim-topic", 0, committed)], asynchronous=False)
        assert c.committed([TopicPartition("victim-topic", 0)], timeout=10)[0].offset == committed >= 200
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        c.close()
    assert sent[0] >= rounds, sent
    logs = secure_broker.logs()
    assert "Traceback" not in logs and "failed; closing the connection" not in logs
    # acme sees its group; the default organisation got nothing from the unauthenticated requests
    assert {g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid} == {"victim"}
    auditor = AdminClient(conf(secure_broker, "auditor", "auditor-pw", "PLAIN"))
    assert auditor.list_consumer_groups().result(timeout=10).valid == []
    assert not [t for t in auditor.list_topics(timeout=10).topics if not t.startswith("__")]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{secure_broker.metrics_port}/metrics", timeout=5).read().decode()
    assert 'rafka_gateway_limit_hits_total{limit="max_request_bytes"}' in metrics
