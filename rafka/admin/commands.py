"""`rafka group …` and `rafka topic …`: operator commands over the Kafka protocol.

How this works: each leaf sub-command stores its handler in the parsed namespace;
``run`` builds a ``Context`` (the cluster connection, opened on first use, and
the output streams) and calls it. Handlers fetch plain data through
``rafka.admin.kafka.Cluster``, then either print it as JSON (``--json``) or as
aligned tables. Failures are ``AdminError``s, reported on stderr with their exit
code: 1 Kafka error, 2 usage, 3 group or topic not found. ``group describe`` also
asks the REST admin API (``--admin-url``) for the group's ``cgp_`` id and RRL,
which the Kafka protocol cannot carry, and leaves them out when it cannot reach it.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import quote

from rafka.admin import output
from rafka.admin.errors import EXIT_OK, AdminError, KafkaFailure, NotFound, UsageError
from rafka.admin.kafka import EARLIEST, LATEST, Cluster, client_config, parse_state

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_ADMIN_URL = "http://127.0.0.1:9464"
RESET_CHUNK = 200  # partitions per OffsetCommit when resetting offsets

Partition = tuple[str, int]
RestFetcher = Callable[[argparse.Namespace, str], "dict[str, Any] | None"]


# -- parsers ----------------------------------------------------------------

def _common_options() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(add_help=False)
    conn = p.add_argument_group("connection")
    conn.add_argument("--bootstrap-server", default=env("RAFKA_BOOTSTRAP", DEFAULT_BOOTSTRAP), metavar="HOST:PORT",
                      help=f"a gateway to talk to (env RAFKA_BOOTSTRAP, default {DEFAULT_BOOTSTRAP})")
    conn.add_argument("--security-protocol", default=env("RAFKA_SECURITY_PROTOCOL"),
                      choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                      help="(env RAFKA_SECURITY_PROTOCOL; default from the options below, else PLAINTEXT)")
    conn.add_argument("--sasl-mechanism", default=env("RAFKA_SASL_MECHANISM"),
                      help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env RAFKA_SASL_MECHANISM, default PLAIN)")
    conn.add_argument("--sasl-username", default=env("RAFKA_SASL_USERNAME"), help="(env RAFKA_SASL_USERNAME)")
    conn.add_argument("--sasl-password", default=env("RAFKA_SASL_PASSWORD"),
                      help="(env RAFKA_SASL_PASSWORD, safer than the flag)")
    conn.add_argument("--ssl-ca", default=env("RAFKA_SSL_CA"), metavar="PEM",
                      help="CA certificate(s) to verify the gateway's TLS certificate (env RAFKA_SSL_CA)")
    conn.add_argument("--timeout", type=float, default=float(env("RAFKA_ADMIN_TIMEOUT", "15")), metavar="S",
                      help="seconds to wait for each broker answer (default 15)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
    return p


def _leaf(sub: Any, name: str, handler: Callable[[Context], int], help_text: str,
          common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
    p.set_defaults(admin_handler=handler)
    return p


def add_admin_parsers(sub: Any) -> None:
    """Add the ``group`` and ``topic`` command trees to the ``rafka`` sub-parsers."""
    common = _common_options()
    group = sub.add_parser("group", help="inspect and manage consumer groups",
                           description="Inspect and manage consumer groups (exit codes: 0 ok, 1 Kafka error, "
                                       "2 usage, 3 not found).")
    gsub = group.add_subparsers(dest="group_command", required=True, metavar="COMMAND")

    p = _leaf(gsub, "list", group_list, "list consumer groups", common)
    p.add_argument("--state", action="append", default=[], metavar="S",
                   help="only groups in state S (Stable, Empty, PreparingRebalance, CompletingRebalance, Dead); "
                        "repeat or comma-separate for several")

    p = _leaf(gsub, "describe", group_describe, "a group's state, protocol, members and assignments", common)
    p.add_argument("group")
    p.add_argument("--admin-url", default=os.environ.get("RAFKA_ADMIN_URL", DEFAULT_ADMIN_URL), metavar="URL",
                   help="the REST admin API, for the group's cgp_ id and RRL "
                        f"(env RAFKA_ADMIN_URL, default {DEFAULT_ADMIN_URL}; left out when unreachable)")
    p.add_argument("--org", default=os.environ.get("RAFKA_ORG", "default"),
                   help="your organisation, for the REST admin API (env RAFKA_ORG, default 'default')")

    p = _leaf(gsub, "lag", group_lag, "committed offset, log end offset and lag per partition", common)
    p.add_argument("group")
    p.add_argument("--watch", action="store_true", help="refresh until interrupted (JSON: one document a line)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S", help="seconds between refreshes (default 5)")
    p.add_argument("--count", type=int, default=None, metavar="N", help="with --watch: stop after N refreshes")

    p = _leaf(gsub, "reset-offsets", group_reset_offsets,
              "set a group's committed offsets (the group must have no members)", common)
    p.add_argument("group")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=[], metavar="T[:P,P...]",
                       help="a topic, optionally with some of its partitions; repeatable")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (kept within the log)")
    to.add_argument("--to-datetime", metavar="ISO",
                    help="the first record at or after this time, e.g. 2026-01-31T12:00:00Z (no zone: local time)")
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets (without it, as with "
                                                             "Kafka's kafka-consumer-groups, they are only shown)")
    run.add_argument("--dry-run", action="store_true", help="show the new offsets, change nothing (the default)")

    p = _leaf(gsub, "delete", group_delete, "delete a group with no members, and its offsets", common)
    p.add_argument("group")

    topic = sub.add_parser("topic", help="create, list, describe and delete topics",
                           description="Create, list, describe and delete topics (exit codes: 0 ok, 1 Kafka error, "
                                       "2 usage, 3 not found).")
    tsub = topic.add_subparsers(dest="topic_command", required=True, metavar="COMMAND")
    p = _leaf(tsub, "create", topic_create, "create a topic", common)
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, required=True, metavar="N")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config; repeatable")
    p = _leaf(tsub, "list", topic_list, "list topics", common)
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave out Kafka's internal topics (__consumer_offsets, __transaction_state)")
    p = _leaf(tsub, "describe", topic_describe, "a topic's partitions, offsets and configs", common)
    p.add_argument("topic")
    p = _leaf(tsub, "delete", topic_delete, "delete a topic and its data", common)
    p.add_argument("topic")


# -- running ----------------------------------------------------------------

class Context:
    """What a command needs: its arguments, the cluster (opened on first use), output streams."""

    def __init__(self, ns: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None,
                 cluster: Any = None, fetch_rest: RestFetcher | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.ns = ns
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self._cluster = cluster
        self.fetch_rest = fetch_rest or fetch_group_from_rest
        self.sleep = sleep

    @property
    def cluster(self) -> Any:
        if self._cluster is None:
            ns = self.ns
            conf = client_config(ns.bootstrap_server, security_protocol=ns.security_protocol,
                                 sasl_mechanism=ns.sasl_mechanism, sasl_username=ns.sasl_username,
                                 sasl_password=ns.sasl_password, ssl_ca=ns.ssl_ca)
            self._cluster = Cluster(conf, timeout=ns.timeout)
        return self._cluster

    def emit(self, data: Any, text: Callable[[Any], str]) -> None:
        """Print ``data`` as JSON with --json, else ``text(data)``."""
        self.out.write((output.to_json(data) if self.ns.json else text(data)) + "\n")
        self.out.flush()

    def note(self, message: str) -> None:
        """A remark for people (stderr, so it never mixes into JSON)."""
        self.err.write(message + "\n")
        self.err.flush()


def run(ns: argparse.Namespace, ctx: Context | None = None) -> int:
    """Run the parsed admin command; its exit code."""
    ctx = ctx or Context(ns)
    try:
        return int(ns.admin_handler(ctx))
    except AdminError as exc:
        ctx.err.write(f"rafka: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


# -- groups -----------------------------------------------------------------

def group_list(ctx: Context) -> int:
    try:
        states = [parse_state(s) for v in ctx.ns.state for s in v.split(",") if s.strip()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    groups = ctx.cluster.list_groups(states)
    ctx.emit(groups, lambda gs: output.table(["group", "state", "type", "simple"],
                                             [[g["group_id"], g["state"], g["type"], g["is_simple"]] for g in gs]))
    return EXIT_OK


def fetch_group_from_rest(ns: argparse.Namespace, group_id: str) -> dict[str, Any] | None:
    """The REST admin API's view of ``group_id``, or None when it cannot be had."""
    url = getattr(ns, "admin_url", None)
    if not url:
        return None
    target = f"{url.rstrip('/')}/v1/orgs/{quote(ns.org, safe='')}/consumer-groups/{quote(group_id, safe='')}"
    req = urllib.request.Request(target, headers={"Accept": "application/json"})
    if ns.sasl_username and ns.sasl_password is not None:
        token = base64.b64encode(f"{ns.sasl_username}:{ns.sasl_password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=min(ns.timeout, 3.0)) as resp:
            data = json.load(resp)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return data if isinstance(data, dict) and data.get("group_id") == group_id else None


def describe_text(d: dict[str, Any]) -> str:
    """A group description for people: a header block, then the members."""
    coord = d.get("coordinator")
    protocol = "/".join(x for x in (d.get("protocol_type"), d.get("protocol")) if x)
    pairs: list[tuple[str, Any]] = [("group", d["group_id"]), ("state", d["state"]), ("protocol", protocol),
                                    ("coordinator", f"{coord['host']}:{coord['port']} (node {coord['id']})"
                                     if coord else None), ("members", len(d["members"]))]
    if "group_uid" in d:
        pairs.append(("group uid", d["group_uid"]))
    if "rrl" in d:
        pairs.append(("rrl", d["rrl"]))
    text = output.fields(pairs)
    if d["members"]:
        rows = [[m["member_id"], m.get("group_instance_id"), m.get("client_id"), m.get("host"),
                 output.assignment_text(m.get("assignment"))] for m in d["members"]]
        text += "\n\n" + output.table(["member id", "instance id", "client id", "host", "assignment"], rows)
    return text


def group_describe(ctx: Context) -> int:
    group_id = ctx.ns.group
    d = ctx.cluster.describe_group(group_id)
    if d["state"] == "Dead" and not d["members"]:
        raise NotFound(f"consumer group {group_id} does not exist")
    rest = ctx.fetch_rest(ctx.ns, group_id)
    if rest is not None:
        d["protocol_type"] = rest.get("protocol_type", d["protocol_type"])
        d["group_uid"] = rest.get("group_uid")
        d["rrl"] = rest.get("rrl")
    ctx.emit(d, describe_text)
    return EXIT_OK


def group_lag_data(cluster: Any, group_id: str) -> dict[str, Any]:
    """Per partition the group owns or has committed: committed offset, log end offset, lag, owner."""
    d = cluster.describe_group(group_id)
    committed = cluster.committed_offsets(group_id)
    if d["state"] == "Dead" and not d["members"] and not committed:
        raise NotFound(f"consumer group {group_id} does not exist")
    owners = {(t, p): m for m in d["members"] for t, ps in (m.get("assignment") or {}).items() for p in ps}
    keys = sorted(set(committed) | set(owners))
    ends = cluster.list_offsets({k: LATEST for k in keys})
    rows = []
    for k in keys:
        end = ends.get(k)
        end = end if end is not None and end >= 0 else None
        offset = committed.get(k)
        m = owners.get(k, {})
        rows.append({"topic": k[0], "partition": k[1], "committed_offset": offset, "log_end_offset": end,
                     "lag": max(0, end - offset) if end is not None and offset is not None else None,
                     "member_id": m.get("member_id"), "client_id": m.get("client_id"), "host": m.get("host")})
    return {"group_id": group_id, "state": d["state"], "total_lag": sum(r["lag"] or 0 for r in rows),
            "partitions": rows}


def lag_text(data: dict[str, Any]) -> str:
    rows = [[r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"], r["member_id"],
             r["host"], r["client_id"]] for r in data["partitions"]]
    head = output.fields([("group", data["group_id"]), ("state", data["state"]), ("total lag", data["total_lag"])])
    return head + "\n\n" + output.table(["topic", "partition", "current-offset", "log-end-offset", "lag",
                                         "consumer-id", "host", "client-id"], rows)


def group_lag(ctx: Context) -> int:
    ns = ctx.ns
    if not ns.watch:
        ctx.emit(group_lag_data(ctx.cluster, ns.group), lag_text)
        return EXIT_OK
    if ns.interval <= 0:
        raise UsageError("--interval must be positive")
    clear = not ns.json and getattr(ctx.out, "isatty", lambda: False)()
    n = 0
    try:
        while ns.count is None or n < ns.count:
            if n:
                ctx.sleep(ns.interval)
            data = group_lag_data(ctx.cluster, ns.group)
            if ns.json:
                ctx.out.write(json.dumps(data) + "\n")
            else:
                stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
                ctx.out.write(("\x1b[H\x1b[2J" if clear else ("\n" if n else "")) + f"# {stamp}\n" + lag_text(data)
                              + "\n")
            ctx.out.flush()
            n += 1
    except KeyboardInterrupt:
        pass
    return EXIT_OK


# -- reset offsets ----------------------------------------------------------

def parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``"t"`` → ``("t", None)`` (every partition); ``"t:0,2"`` → ``("t", [0, 2])``."""
    name, sep, rest = spec.partition(":")
    if not name:
        raise UsageError(f"bad topic {spec!r}")
    if not sep:
        return name, None
    try:
        parts = sorted({int(x) for x in rest.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"bad partitions in {spec!r} (expected topic:0,1,2)") from None
    if not parts or parts[0] < 0:
        raise UsageError(f"bad partitions in {spec!r} (expected topic:0,1,2)")
    return name, parts


def parse_datetime_ms(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 time (no zone: local time, as Kafka's tool)."""
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"bad --to-datetime {text!r} (expected ISO 8601, e.g. 2026-01-31T12:00:00Z)") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def reset_mode(ns: argparse.Namespace) -> tuple[str, int | None]:
    """``(mode, argument)`` of the chosen --to-…/--shift-by option."""
    if ns.to_earliest:
        return "earliest", None
    if ns.to_latest:
        return "latest", None
    if ns.to_offset is not None:
        return "offset", ns.to_offset
    if ns.to_datetime is not None:
        return "datetime", parse_datetime_ms(ns.to_datetime)
    return "shift", ns.shift_by


def plan_offsets(mode: str, arg: int | None, keys: list[Partition], committed: dict[Partition, int],
                 earliest: dict[Partition, int], latest: dict[Partition, int],
                 by_time: dict[Partition, int] | None = None) -> dict[Partition, int]:
    """The new offset of each partition, kept within ``[earliest, latest]`` as Kafka's tool does."""
    out = {}
    for k in keys:
        lo, hi = earliest[k], latest[k]
        if mode == "earliest":
            target = lo
        elif mode == "latest":
            target = hi
        elif mode == "offset":
            target = int(arg)  # type: ignore[arg-type]
        elif mode == "datetime":
            found = (by_time or {}).get(k, -1)
            target = found if found >= 0 else hi
        elif mode == "shift":
            if k not in committed:
                raise AdminError(f"cannot shift the offset of {k[0]}[{k[1]}]: the group has no committed offset")
            target = committed[k] + int(arg)  # type: ignore[arg-type]
        else:
            raise ValueError(mode)
        out[k] = min(max(target, lo), hi)
    return out


def group_reset_offsets(ctx: Context) -> int:
    ns, cluster = ctx.ns, ctx.cluster
    group_id = ns.group
    mode, arg = reset_mode(ns)
    d = cluster.describe_group(group_id)
    if d["members"] or d["state"] not in ("Empty", "Dead"):
        raise KafkaFailure(f"cannot reset the offsets of group {group_id}: it is {d['state']} with "
                           f"{len(d['members'])} member(s); stop its consumers first")
    committed = cluster.committed_offsets(group_id)
    keys: list[Partition] = []
    if ns.all_topics:
        keys = sorted(committed)
        if not keys:
            raise NotFound(f"group {group_id} has no committed offsets")
    for spec in ns.topic:
        name, wanted = parse_topic_spec(spec)
        count = cluster.partition_count(name)
        bad = [p for p in wanted or [] if p >= count]
        if bad:
            raise UsageError(f"topic {name} has {count} partition(s); no partition {bad[0]}")
        keys += [(name, p) for p in (wanted if wanted is not None else range(count))]
    keys = sorted(set(keys))
    earliest = cluster.list_offsets({k: EARLIEST for k in keys})
    latest = cluster.list_offsets({k: LATEST for k in keys})
    by_time = cluster.list_offsets({k: int(arg) for k in keys}) if mode == "datetime" else None  # type: ignore[arg-type]
    plan = plan_offsets(mode, arg, keys, committed, earliest, latest, by_time)
    if ns.execute:
        items = list(plan.items())
        with output.Progress(len(items), f"resetting offsets of {group_id}", ctx.err) as progress:
            for i in range(0, len(items), RESET_CHUNK):
                chunk = dict(items[i:i + RESET_CHUNK])
                cluster.alter_offsets(group_id, chunk)
                progress.advance(len(chunk))
    rows = [{"topic": t, "partition": p, "previous_offset": committed.get((t, p)), "new_offset": o}
            for (t, p), o in plan.items()]
    data = {"group_id": group_id, "dry_run": not ns.execute, "partitions": rows}
    ctx.emit(data, lambda x: output.table(["topic", "partition", "previous-offset", "new-offset"],
                                          [[r["topic"], r["partition"], r["previous_offset"], r["new_offset"]]
                                           for r in x["partitions"]]))
    if ns.dry_run:
        ctx.note("dry run: no offsets were changed")
    elif not ns.execute:
        ctx.note("no offsets were changed: add --execute to commit them (--dry-run to only show them, "
                 "without this note)")
    return EXIT_OK


def group_delete(ctx: Context) -> int:
    ctx.cluster.delete_group(ctx.ns.group)
    ctx.emit({"group_id": ctx.ns.group, "deleted": True}, lambda d: f"deleted consumer group {d['group_id']}")
    return EXIT_OK


# -- topics -----------------------------------------------------------------

def parse_configs(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` → ``{k: v}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"bad --config {item!r} (expected KEY=VALUE)")
        out[key.strip()] = value
    return out


def topic_create(ctx: Context) -> int:
    ns = ctx.ns
    if ns.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    configs = parse_configs(ns.config)
    ctx.cluster.create_topic(ns.topic, ns.partitions, configs)
    ctx.emit({"topic": ns.topic, "partitions": ns.partitions, "configs": configs},
             lambda d: f"created topic {d['topic']} with {d['partitions']} partition(s)")
    return EXIT_OK


def topic_list(ctx: Context) -> int:
    topics = [{"topic": name, "partitions": n}
              for name, n in ctx.cluster.list_topics(ctx.ns.exclude_internal).items()]
    ctx.emit(topics, lambda ts: output.table(["topic", "partitions"], [[t["topic"], t["partitions"]] for t in ts]))
    return EXIT_OK


def topic_describe_text(d: dict[str, Any]) -> str:
    head = output.fields([("topic", d["topic"]), ("topic id", d["topic_id"]), ("partitions", len(d["partitions"]))])
    parts = output.table(["partition", "leader", "earliest-offset", "latest-offset", "records"],
                         [[p["partition"], p["leader"], p["earliest_offset"], p["latest_offset"],
                           None if p["earliest_offset"] is None or p["latest_offset"] is None
                           else p["latest_offset"] - p["earliest_offset"]] for p in d["partitions"]])
    configs = output.table(["config", "value", "source"],
                           [[c["name"], c["value"], "default" if c["is_default"] else "topic"] for c in d["configs"]])
    return f"{head}\n\n{parts}\n\n{configs}"


def topic_describe(ctx: Context) -> int:
    d = ctx.cluster.describe_topic(ctx.ns.topic)
    keys = [(d["topic"], p["partition"]) for p in d["partitions"]]
    earliest = ctx.cluster.list_offsets({k: EARLIEST for k in keys})
    latest = ctx.cluster.list_offsets({k: LATEST for k in keys})
    for p, k in zip(d["partitions"], keys, strict=True):
        p["earliest_offset"] = earliest.get(k) if earliest.get(k, -1) >= 0 else None
        p["latest_offset"] = latest.get(k) if latest.get(k, -1) >= 0 else None
    ctx.emit(d, topic_describe_text)
    return EXIT_OK


def topic_delete(ctx: Context) -> int:
    ctx.cluster.delete_topic(ctx.ns.topic)
    ctx.emit({"topic": ctx.ns.topic, "deleted": True}, lambda d: f"deleted topic {d['topic']}")
    return EXIT_OK
