"""Group configs (a GROUP config resource): validation like Kafka's GroupConfig, and KIP-848
groups taking a group's own session timeout and heartbeat interval, with a hand-driven clock."""

from __future__ import annotations

from typing import Any

from rafka.shard.groups.config_manager import HEARTBEAT_INTERVAL, SESSION_TIMEOUT
from rafka.shard.records import Record, RecordType
from tests.shard.test_consumer_groups import Ctx
from tests.shard.test_groups_context import Response, roundtrip

SET, DELETE, APPEND = 0, 1, 2


def alter(ctx: Ctx, *changes: tuple[str, int, str | None], group: str = "g", validate_only: bool = False,
          incremental: bool = True) -> Response:
    response = Response()
    records = ctx.cg.configs.alter(ctx.org, {"group": group, "configs": [list(c) for c in changes],
                                             "incremental": incremental, "validate_only": validate_only},
                                   ctx.now, response)
    for r in records:
        ctx.cg.configs.replay(roundtrip(r))
    ctx.log += records
    return response


def describe(ctx: Ctx, group: str = "g", keys: list[str] | None = None) -> dict[str, Any]:
    response = Response()
    ctx.cg.configs.describe(ctx.org, {"group": group, "configuration_keys": keys}, ctx.now, response)
    return {c["name"]: (c["value"], c["config_source"]) for c in response["configs"]}


def test_describe_shows_defaults_then_the_groups_own_values() -> None:
    ctx = Ctx()
    assert describe(ctx) == {SESSION_TIMEOUT: ("45000", 5), HEARTBEAT_INTERVAL: ("5000", 5)}
    assert alter(ctx, (SESSION_TIMEOUT, SET, "50000")).error == 0
    assert describe(ctx) == {SESSION_TIMEOUT: ("50000", 8), HEARTBEAT_INTERVAL: ("5000", 5)}
    assert describe(ctx, keys=[HEARTBEAT_INTERVAL, "unknown"]) == {HEARTBEAT_INTERVAL: ("5000", 5)}
    assert describe(ctx, group="other") == {SESSION_TIMEOUT: ("45000", 5), HEARTBEAT_INTERVAL: ("5000", 5)}
    assert ctx.log == [Record(RecordType.GROUP_CONFIG, (ctx.org, "g"), {SESSION_TIMEOUT: "50000"})]
    assert alter(ctx, (SESSION_TIMEOUT, DELETE, None)).error == 0
    assert ctx.log[-1] == Record(RecordType.GROUP_CONFIG, (ctx.org, "g"), None)
    assert describe(ctx)[SESSION_TIMEOUT] == ("45000", 5)


def test_synonyms_are_the_groups_own_value_when_asked_for() -> None:
    ctx = Ctx()
    assert alter(ctx, (SESSION_TIMEOUT, SET, "50000")).error == 0
    for asked in (True, False):
        response = Response()
        ctx.cg.configs.describe(ctx.org, {"group": "g", "configuration_keys": None, "include_synonyms": asked},
                                ctx.now, response)
        synonyms = {c["name"]: c["synonyms"] for c in response["configs"]}
        assert synonyms == {SESSION_TIMEOUT: [{"name": SESSION_TIMEOUT, "value": "50000", "source": 8}] if asked else [],
                            HEARTBEAT_INTERVAL: []}


def test_refusals_match_kafkas_group_config() -> None:
    ctx = Ctx()
    cases = [
        ((SESSION_TIMEOUT, SET, "40000"),
         (40, "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")),
        ((SESSION_TIMEOUT, SET, "70000"),
         (40, "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms")),
        ((HEARTBEAT_INTERVAL, SET, "4000"),
         (40, "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms")),
        ((HEARTBEAT_INTERVAL, SET, "abc"),
         (40, "Invalid value abc for configuration consumer.heartbeat.interval.ms: Not a number of type INT")),
        ((HEARTBEAT_INTERVAL, SET, "5_000"),
         (40, "Invalid value 5_000 for configuration consumer.heartbeat.interval.ms: Not a number of type INT")),
        ((HEARTBEAT_INTERVAL, SET, "2147483648"),
         (40, "Invalid value 2147483648 for configuration consumer.heartbeat.interval.ms: Not a number of type INT")),
        ((HEARTBEAT_INTERVAL, SET, "0"),
         (40, "Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at least 1")),
        (("share.session.timeout.ms", SET, "45000"), (40, "Unknown group config name: share.session.timeout.ms")),
        ((SESSION_TIMEOUT, APPEND, "1"), (40, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")),
    ]
    for change, expected in cases:
        r = alter(ctx, change)
        assert (r.error, r["error_message"]) == expected, change
    r = alter(ctx, (SESSION_TIMEOUT, SET, "50000"), (SESSION_TIMEOUT, SET, "55000"))
    assert (r.error, r["error_message"]) == (42, "Error due to duplicate config keys")
    ctx2 = Ctx(consumer_min_session_timeout_ms=1000, consumer_min_heartbeat_interval_ms=1000)
    r = alter(ctx2, (SESSION_TIMEOUT, SET, "5000"))  # not above the default heartbeat interval of 5 s
    assert (r.error, r["error_message"]) == (40, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert alter(ctx, (SESSION_TIMEOUT, SET, "50000"), validate_only=True).error == 0
    assert ctx.log == [] and describe(ctx)[SESSION_TIMEOUT] == ("45000", 5), "refusals and validate_only write nothing"


def test_a_group_takes_its_own_session_timeout_and_heartbeat_interval() -> None:
    ctx = Ctx(consumer_min_session_timeout_ms=1000, consumer_min_heartbeat_interval_ms=500)
    assert alter(ctx, (SESSION_TIMEOUT, SET, "8000"), (HEARTBEAT_INTERVAL, SET, "2000")).error == 0
    first = ctx.hb("m1", 0, ["t"])
    assert first["heartbeat_interval"] == 2000
    ctx.hb("m2", 0, ["t"], group_id="other")  # the default 45 s for a group without configs
    ctx.sleep(9_000)
    assert ctx.cgroup() is None or "m1" not in ctx.cgroup().members, "fenced after the group's own 8 s"
    assert "m2" in ctx.cgroup("other").members
    assert ctx.hb("m3", 0, ["t"], group_id="other")["heartbeat_interval"] == 5000


def test_values_are_stored_as_parsed_and_alter_configs_replaces_every_override() -> None:
    ctx = Ctx()
    assert alter(ctx, (SESSION_TIMEOUT, SET, " +50000 "), (HEARTBEAT_INTERVAL, SET, "6000")).error == 0
    assert describe(ctx) == {SESSION_TIMEOUT: ("50000", 8), HEARTBEAT_INTERVAL: ("6000", 8)}
    assert alter(ctx, (HEARTBEAT_INTERVAL, SET, "7000"), incremental=False).error == 0  # AlterConfigs
    assert describe(ctx) == {SESSION_TIMEOUT: ("45000", 5), HEARTBEAT_INTERVAL: ("7000", 8)}


def test_unset_configs_are_validated_at_kafkas_defaults_not_the_brokers() -> None:
    ctx = Ctx(consumer_session_timeout_ms=6000, consumer_heartbeat_interval_ms=300)  # outside the bounds
    assert describe(ctx) == {SESSION_TIMEOUT: ("6000", 5), HEARTBEAT_INTERVAL: ("300", 5)}
    assert alter(ctx, (SESSION_TIMEOUT, SET, "50000")).error == 0
    assert alter(ctx, (SESSION_TIMEOUT, DELETE, None)).error == 0
