"""State machine table, error codes and record helpers of the classic group coordinator."""

from __future__ import annotations

import ast
import pathlib

import pytest
from kio.schema.errors import ErrorCode

from rafka.protocol.consumer_protocol import encode_subscription
from rafka.shard.groups.classic import ClassicGroup
from rafka.shard.groups.errors import Errors
from rafka.shard.groups.record_helpers import (
    group_rrl,
    group_slug,
    parse_subscription_topics,
)
from rafka.shard.groups.state import (
    VALID_PREVIOUS,
    ClassicGroupState,
    IllegalStateTransition,
    check_transition,
    state_from_name,
)

S = ClassicGroupState
KAFKA_TABLE = {
    S.EMPTY: {S.PREPARING_REBALANCE},
    S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
    S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
    S.STABLE: {S.COMPLETING_REBALANCE},
    S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
}


def test_valid_previous_states_are_kafkas() -> None:
    assert {k: set(v) for k, v in VALID_PREVIOUS.items()} == KAFKA_TABLE


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("target", list(S))
def test_transition_to_allows_exactly_the_table(current: S, target: S) -> None:
    group = ClassicGroup("o", "g", "cgp_x", state=current, state_ts=1)
    if current in KAFKA_TABLE[target]:
        group.transition_to(target, 99)
        assert group.state is target and group.previous_state is current and group.state_ts == 99
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 99)
        assert group.state is current and group.state_ts == 1


def test_invalid_transition_message_names_the_group_and_states() -> None:
    with pytest.raises(IllegalStateTransition, match="'orders'.*Stable.*Empty"):
        check_transition("orders", S.EMPTY, S.STABLE)


def test_state_names_are_kafkas_display_names() -> None:
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert state_from_name("preparingrebalance") is S.PREPARING_REBALANCE
    assert state_from_name("STABLE") is S.STABLE
    assert state_from_name("Assigning") is None


def test_every_state_documents_action_and_transition() -> None:
    for state in S:
        doc = state.__doc__ or ""
        assert "action:" in doc and "transition:" in doc, state


def test_error_codes_match_kafka_numbers_in_kio() -> None:
    names = [n for n in vars(Errors) if n.isupper()]
    assert len(names) >= 20
    for name in names:
        assert getattr(Errors, name) == ErrorCode[name.lower()].value, name
    assert Errors.name_of(27) == "REBALANCE_IN_PROGRESS"


def test_group_rrl_slugs_the_group_id() -> None:
    assert group_slug("Order.Processor_v2") == "order-processor-v2"
    assert group_slug("a-b-9") == "a-b-9"
    assert group_rrl("acme", "My Group") == "acme/consumer-groups/my-group"


def test_consumer_subscription_topics_parse_with_the_v0_prefix() -> None:
    for version in (0, 1, 3):
        assert parse_subscription_topics(encode_subscription(["a", "b"], version=version)) == {"a", "b"}
    assert parse_subscription_topics(encode_subscription([])) == set()
    assert parse_subscription_topics(b"\x00") is None
    assert parse_subscription_topics(b"\x00\x00\x00\x00\x00\x02\x00\x05ab") is None


def test_pure_package_imports_no_io_or_telemetry_and_reads_no_clock() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "rafka" / "shard" / "groups"
    banned = {"asyncio", "zmq", "prometheus_client", "opentelemetry", "threading", "time"}
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not banned & set(mods), (path.name, mods)
        assert len(path.read_text().splitlines()) < 500, path.name
