"""SASL identities as organisations, TLS and mTLS, against a real `rafka serve`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import Rafka
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

PROBE = ("probe", "probe-pw")  # the readiness check's user, in an organisation of its own
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, -1)


def scram_entry(hash_name: str, password: str, iterations: int = 4096) -> str:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    b64 = lambda b: base64.b64encode(b).decode()
    return (f'{{salt = "{b64(salt)}", iterations = {iterations}, '
            f'stored_key = "{b64(hashlib.new(hash_name, client_key).digest())}", '
            f'server_key = "{b64(hmac.new(salted, b"Server Key", hash_name).digest())}"}}')


USERS = f"""
[[users]]
name = "{PROBE[0]}"
password = "{PROBE[1]}"
org = "probe"

[[users]]
name = "alice"
password = "alice-pw"
org = "acme"

# globex's SCRAM user has only salted credentials (no password in the file)
[[users]]
name = "bob"
org = "globex"
scram_sha_256 = {scram_entry("sha256", "bob-pw")}
scram_sha_512 = {scram_entry("sha512", "bob-pw")}

[[users]]
name = "bob-admin"
password = "bob-admin-pw"
org = "globex"
"""


class SecureRafka(Rafka):
    """`rafka serve --auth-users FILE` (optionally with TLS); ready once a SASL/PLAIN probe gets answers."""

    def __init__(self, data_dir: Path, users: str, tls: dict[str, str] | None = None, extra: list[str] | None = None) -> None:
        self.users_path = data_dir.parent / f"{data_dir.name}-users.toml"
        self.users_path.write_text(users)
        self.tls = tls or {}
        flags = ["--auth-users", str(self.users_path)]
        for key in ("cert", "key", "client_ca"):
            if key in self.tls:
                flags += [f"--tls-{key.replace('_', '-')}", self.tls[key]]
        super().__init__(data_dir, extra=[*flags, *(extra or [])])

    def raw_client(self, timeout: float = 2.0) -> RawClient:
        c = RawClient("127.0.0.1", self.port, timeout=timeout)
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls["cert"])
            if "client_cert" in self.tls:
                ctx.load_cert_chain(self.tls["client_cert"], self.tls["client_key"])
            c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
        return c

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"rafka exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                with self.raw_client() as c:
                    c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
                    assert c.request(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
                    auth = c.request(36, 2, {"auth_bytes": f"\0{PROBE[0]}\0{PROBE[1]}".encode()})
                    assert auth["error_code"] == 0, auth
                    md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
                    if c.request(16, 4, {"states_filter": []})["error_code"] == 0 and md["brokers"]:
                        return
            except (OSError, ConnectionError) as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"rafka not ready after {timeout}s ({last}):\n{self.logs()}")

    def gateway_pid(self) -> int:
        return self.children()["rafka-gateway"]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRafka]:
    broker = SecureRafka(tmp_path_factory.mktemp("secure") / "data", USERS).start()
    yield broker
    broker.stop()


def conf(broker: Rafka, user: str, password: str, mechanism: str, **extra: Any) -> dict[str, Any]:
    protocol = "SASL_SSL" if getattr(broker, "tls", None) else "SASL_PLAINTEXT"
    out = {"bootstrap.servers": broker.bootstrap, "security.protocol": protocol, "sasl.mechanisms": mechanism,
           "sasl.username": user, "sasl.password": password}
    if protocol == "SASL_SSL":
        out["ssl.ca.location"] = broker.tls["cert"]  # type: ignore[attr-defined]
    out.update(extra)
    return out


def consume(config: dict[str, Any], topic: str, expected: int, timeout: float = 20) -> tuple[Consumer, list[str]]:
    c = Consumer({**config, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert not m.error(), m.error()
        got.append(m.value().decode())
    end = time.monotonic() + 0.5  # nothing else arrives
    while time.monotonic() < end:
        m = c.poll(0.1)
        assert m is None or m.error(), m.value()
    return c, got


def group_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in fut.result(timeout=10).topic_partitions}


def test_organisations_are_isolated(secure: SecureRafka) -> None:
    """Two organisations each own a topic `orders` and a group `orders`; each sees only its own."""
    orgs = {
        "acme": {"admin": ("alice", "alice-pw"), "user": ("alice", "alice-pw"), "records": 5},
        "globex": {"admin": ("bob-admin", "bob-admin-pw"), "user": ("bob", "bob-pw"), "records": 3},
    }
    admins = {org: AdminClient(conf(secure, *o["admin"], "PLAIN")) for org, o in orgs.items()}  # type: ignore[misc]
    for org, admin in admins.items():
        topics = ["orders"] + (["acme-only"] if org == "acme" else [])
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            fut.result(timeout=15)  # `orders` is created twice: once per organisation
    for org, admin in admins.items():
        names = {t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")}
        assert names == ({"orders", "acme-only"} if org == "acme" else {"orders"}), (org, names)

    for org, o in orgs.items():
        p = Producer(conf(secure, *o["user"], "SCRAM-SHA-256"))  # type: ignore[misc]
        for i in range(o["records"]):  # type: ignore[call-overload]
            p.produce("orders", f"{org}-{i}".encode())
        assert p.flush(15) == 0

    consumers = {}
    for org, o in orgs.items():
        c, got = consume(conf(secure, *o["user"], "SCRAM-SHA-512", **{"group.id": "orders",  # type: ignore[misc]
                                                                     "client.id": f"{org}-consumer"}),
                         "orders", o["records"])  # type: ignore[arg-type]
        assert got == [f"{org}-{i}" for i in range(o["records"])], (org, got)  # type: ignore[call-overload]
        c.commit(asynchronous=False)
        consumers[org] = c
    # an acme-only group with a committed offset
    only = Consumer(conf(secure, "alice", "alice-pw", "SCRAM-SHA-256", **{"group.id": "acme-only-group"}))
    only.commit(offsets=[TopicPartition("orders", 0, 2)], asynchronous=False)
    only.close()

    for org, admin in admins.items():
        desc = admin.describe_consumer_groups(["orders"])["orders"].result(timeout=10)
        assert [m.client_id for m in desc.members] == [f"{org}-consumer"], (org, desc)
    for c in consumers.values():
        c.close()

    for org, admin in admins.items():
        listed = {g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid}
        assert listed == ({"orders", "acme-only-group"} if org == "acme" else {"orders"}), (org, listed)
        assert group_offsets(admin, "orders") == {("orders", 0): orgs[org]["records"]}
    assert group_offsets(admins["acme"], "acme-only-group") == {("orders", 0): 2}

    with pytest.raises(KafkaException) as exc:
        admins["globex"].delete_consumer_groups(["acme-only-group"])["acme-only-group"].result(timeout=10)
    assert exc.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    assert "acme-only-group" in {g.group_id for g in admins["acme"].list_consumer_groups().result(timeout=10).valid}
    admins["acme"].delete_consumer_groups(["acme-only-group"])["acme-only-group"].result(timeout=10)


def test_topic_configs_are_altered_only_within_the_organisation(secure: SecureRafka) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    acme = AdminClient(conf(secure, "alice", "alice-pw", "PLAIN"))
    globex = AdminClient(conf(secure, "bob-admin", "bob-admin-pw", "PLAIN"))
    topic = f"globex-{uuid.uuid4().hex[:8]}"
    globex.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000"})])[topic].result(timeout=15)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        acme.incremental_alter_configs([res])[res].result(timeout=10)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, "another organisation's topic does not exist"
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "1000"})
    with pytest.raises(KafkaException):
        acme.alter_configs([legacy])[legacy].result(timeout=10)
    described = ConfigResource(ResourceType.TOPIC, topic)
    assert globex.describe_configs([described])[described].result(timeout=10)["retention.ms"].value == "60000"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_fails_authentication(secure: SecureRafka, mechanism: str) -> None:
    errors: list[KafkaError] = []
    p = Producer(conf(secure, "alice", "not-the-password", mechanism, error_cb=errors.append))
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        p.poll(0.1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert "Authentication failed" in " ".join(str(e) for e in errors)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_failures_do_not_tell_which_users_exist(secure: SecureRafka, mechanism: str) -> None:
    """Kafka answers every SCRAM credential failure with one generic message; rafka used to say
    "Invalid user credentials" for an unknown name and "Invalid client credentials" otherwise."""
    seen = []
    for user in ("alice", "nobody-at-all"):
        errors: list[KafkaError] = []
        p = Producer(conf(secure, user, "not-the-password", mechanism, error_cb=errors.append))
        deadline = time.monotonic() + 10
        while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
            p.poll(0.1)
        seen.append(next((str(e) for e in errors if e.code() == KafkaError._AUTHENTICATION), ""))
    generic = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
    assert all(generic in text for text in seen), seen


def test_request_without_authentication_is_closed(secure: SecureRafka) -> None:
    with RawClient("127.0.0.1", secure.port, timeout=5) as c:
        c.send_raw(c.encode(3, 12, {"topics": None, "allow_auto_topic_creation": True}))
        assert c.sock.recv(4096) == b""  # closed, with nothing written back
    with RawClient("127.0.0.1", secure.port, timeout=5) as c:  # ApiVersions is allowed, then the same
        versions = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert {17, 36} <= {k["api_key"] for k in versions["api_keys"]}
        c.send_raw(c.encode(16, 4, {"states_filter": []}))
        assert c.sock.recv(4096) == b""
    assert "before SASL authentication" in secure.logs()


def _can_login(broker: Rafka, user: str, password: str) -> bool:
    errors: list[KafkaError] = []
    admin = AdminClient(conf(broker, user, password, "SCRAM-SHA-512", error_cb=errors.append))
    try:
        admin.list_topics(timeout=3)
        return True
    except KafkaException:
        return False


def test_sighup_reloads_the_users_file(secure: SecureRafka) -> None:
    assert not _can_login(secure, "dave", "dave-pw")
    try:
        secure.users_path.write_text(USERS + '\n[[users]]\nname = "dave"\npassword = "dave-pw"\norg = "initech"\n')
        assert secure.proc is not None
        gateway = secure.gateway_pid()
        os.kill(secure.proc.pid, signal.SIGHUP)  # what systemctl kill --kill-whom=main --signal=HUP sends
        deadline = time.monotonic() + 10
        while "SIGHUP: reloaded 5 users" not in secure.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _can_login(secure, "dave", "dave-pw")
        assert secure.gateway_pid() == gateway and secure.proc.poll() is None  # reloaded, not restarted
        secure.users_path.write_text("[[users]\nnot toml")
        os.kill(secure.gateway_pid(), signal.SIGHUP)
        while "SIGHUP: keeping the 5 current users" not in secure.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "SIGHUP: keeping the 5 current users" in secure.logs()
        assert _can_login(secure, "dave", "dave-pw")  # the bad file changed nothing
    finally:
        secure.users_path.write_text(USERS)
        os.kill(secure.gateway_pid(), signal.SIGHUP)


# --------------------------------------------------------------------------
# TLS


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def self_signed(directory: Path, name: str, cn: str) -> tuple[str, str]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
             "-subj", f"/CN={cn}", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    return str(cert), str(key)


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


@needs_openssl
def test_sasl_ssl(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "server", "localhost")
    broker = SecureRafka(tmp_path / "data", USERS, tls={"cert": cert, "key": key}).start()
    try:
        topic = f"tls-{uuid.uuid4().hex[:6]}"
        p = Producer(conf(broker, "alice", "alice-pw", "SCRAM-SHA-256"))
        p.produce(topic, b"over-tls")
        assert p.flush(15) == 0
        c, got = consume(conf(broker, "alice", "alice-pw", "PLAIN", **{"group.id": "tls"}), topic, 1)
        c.close()
        assert got == ["over-tls"]
        # a plaintext client gets nothing from the TLS listener
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            s.sendall(API_VERSIONS_V0)
            s.settimeout(5)
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            assert not data.startswith(b"\0\0")  # no Kafka frame; a TLS alert or a close
        assert "SASL_SSL" in broker.logs()
    finally:
        broker.stop()


@needs_openssl
def test_mutual_tls_requires_a_client_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "server", "localhost")
    client_cert, client_key = self_signed(tmp_path, "client", "rafka-test-client")
    tls = {"cert": cert, "key": key, "client_ca": client_cert, "client_cert": client_cert, "client_key": client_key}
    broker = SecureRafka(tmp_path / "data", USERS, tls=tls).start()
    try:
        ok = AdminClient(conf(broker, "alice", "alice-pw", "PLAIN", **{"ssl.certificate.location": client_cert,
                                                                      "ssl.key.location": client_key}))
        assert ok.list_topics(timeout=10).brokers
        errors: list[KafkaError] = []
        bad = AdminClient(conf(broker, "alice", "alice-pw", "PLAIN", error_cb=errors.append))
        with pytest.raises(KafkaException):
            bad.list_topics(timeout=3)
        ctx = ssl.create_default_context(cafile=cert)
        with (pytest.raises((ssl.SSLError, OSError)),
              socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s,
              ctx.wrap_socket(s, server_hostname="localhost") as t):  # no client certificate
            t.sendall(API_VERSIONS_V0)
            if not t.recv(4):
                raise OSError("closed")
    finally:
        broker.stop()


def test_sessions_expire_and_librdkafka_re_authenticates(tmp_path: Path) -> None:
    """--connections-max-reauth-ms (Kafka's connections.max.reauth.ms, KIP-368): SaslAuthenticate
    tells the client its session lifetime, librdkafka re-authenticates before it runs out and
    keeps producing, and a connection that does not is closed at its first request after it."""
    import urllib.request

    broker = SecureRafka(tmp_path / "data", USERS, extra=["--connections-max-reauth-ms", "1500"]).start()

    def counted(prefix: str, label: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(prefix + "{") and label in line)

    def successes() -> float:
        return counted("rafka_gateway_sasl_authentications_total", 'result="success"')

    def expired() -> float:
        return counted("rafka_gateway_bad_input_total", 'reason="session_expired"')

    try:
        with RawClient("127.0.0.1", broker.port, timeout=5) as c:
            assert c.request(17, 1, {"mechanism": "PLAIN"})["error_code"] == 0
            auth = c.request(36, 2, {"auth_bytes": b"\0alice\0alice-pw"})
            assert (auth["error_code"], auth["session_lifetime"]) == (0, 1500)
            time.sleep(1.7)
            with pytest.raises((ConnectionError, OSError)):  # expired: closed, not answered
                c.request(16, 4, {"states_filter": []})
        assert expired() == 1
        before = successes()
        delivered: list[Any] = []
        p = Producer(conf(broker, "alice", "alice-pw", "PLAIN", **{"linger.ms": 0}))
        topic = f"reauth-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(conf(broker, "alice", "alice-pw", "PLAIN"))
        admin.create_topics([NewTopic(topic, 1)])[topic].result(10)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            p.produce(topic, b"v", on_delivery=lambda err, _m: delivered.append(err))
            p.poll(0.2)
        assert p.flush(10) == 0
        assert len(delivered) > 10 and not any(delivered), delivered
        assert successes() - before >= 4 and expired() == 1, \
            "the client re-authenticated on its connections as sessions ran out, and none was cut off"
    finally:
        broker.stop()
