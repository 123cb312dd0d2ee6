"""docs/openapi.yaml is valid OpenAPI 3.1 and describes what the API really answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rafka.admin.rest import AdminApi
from tests.admin.test_rest import FakeShards, member

SPEC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


def spec() -> dict[str, Any]:
    return yaml.safe_load(SPEC_PATH.read_text())  # type: ignore[no-any-return]


def validator(schema_name: str) -> Any:
    """A JSON Schema 2020-12 validator for one of the spec's component schemas."""
    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    from referencing.jsonschema import DRAFT202012

    registry = referencing.Registry().with_resource(
        "urn:rafka-openapi", referencing.Resource.from_contents(spec(), default_specification=DRAFT202012))
    return jsonschema.Draft202012Validator({"$ref": f"urn:rafka-openapi#/components/schemas/{schema_name}"},
                                           registry=registry)


def test_spec_is_valid_openapi_3_1() -> None:
    validate = pytest.importorskip("openapi_spec_validator").validate
    doc = spec()
    validate(doc)
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {"/v1/orgs/{org}/consumer-groups", "/v1/orgs/{org}/consumer-groups/{group}"}


def test_examples_match_their_schemas() -> None:
    doc = spec()
    for path, schema in (("/v1/orgs/{org}/consumer-groups", "ConsumerGroupList"),
                         ("/v1/orgs/{org}/consumer-groups/{group}", "ConsumerGroup")):
        example = doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["example"]
        validator(schema).validate(example)


def test_real_answers_match_the_schemas() -> None:
    shards = FakeShards()
    shards.add_group("acme", "orders", "cgp_01ktb7wm5jvkbfgpzvfnk3kqqb", members=[member("m1", {"orders": [0]})])
    shards.add_group("acme", "idle", "cgp_01ktb7wm5jvkbfgpzvfnk3kqqc", state="Empty")
    shards.offsets[("acme", "orders")] = {"orders": {0: 3}}
    api = AdminApi(shards)
    for path, schema in (("/v1/orgs/acme/consumer-groups", "ConsumerGroupList"),
                         ("/v1/orgs/acme/consumer-groups/orders", "ConsumerGroup"),
                         ("/v1/orgs/acme/consumer-groups/idle", "ConsumerGroup"),
                         ("/v1/orgs/acme/consumer-groups/nope", "Error"),
                         ("/v1/orgs/acme/nope", "Error")):
        resp = api.handle("GET", path, {})
        assert resp is not None
        validator(schema).validate(json.loads(resp.encode()))
