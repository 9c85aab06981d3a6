"""``GET /openapi.json``: an OpenAPI 3.1 description generated from the operation table and the models. It validates
(openapi-spec-validator), names every operation of the table, and a live server answers schemathesis's generated
requests with no 5xx and with responses that match the description (bounded: few examples per operation)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from support.servers import ServerProcess, start_serve

from relaykit._errors import _SERVER_ERRORS
from relaykit._methods import OPERATIONS
from relaykit._openapi import openapi_document

SCHEMATHESIS_BUDGET = 45.0  # seconds for the whole schemathesis run
EXAMPLES_PER_OPERATION = 6


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_serve("examples/echo.py", tmp_path_factory.mktemp("openapi-server"), name="echo-openapi")
    try:
        yield server
    finally:
        server.stop()


def test_the_generated_document_is_valid_openapi_3_1() -> None:
    from openapi_spec_validator import validate

    doc = openapi_document(server_url="http://localhost:8000")
    assert doc["openapi"] == "3.1.0"
    validate(doc)


def test_every_route_of_the_table_is_described_with_the_error_table() -> None:
    doc = openapi_document()
    statuses = {str(e.http_status) for e in _SERVER_ERRORS}
    for op in OPERATIONS:
        for route in op.routes:
            described = doc["paths"][route.path][route.method.lower()]
            assert described["x-a2a-method"] == op.name
            assert statuses <= set(described["responses"]), (op.name, route.path)
            # The bindings' own refusals: a body over the limit (CONTRACT: 413) and a non-JSON Content-Type.
            assert {"413", "415"} <= set(described["responses"]), (op.name, route.path)
            assert ("requestBody" in described) == route.body
            media = "text/event-stream" if op.streaming else "application/a2a+json"
            assert media in described["responses"]["200"]["content"]
    subscribe = doc["paths"]["/tasks/{id}:subscribe"]["post"]["parameters"]
    resume = {(p["name"], p["in"]) for p in subscribe}
    assert {("Last-Event-ID", "header"), ("lastEventId", "query")} <= resume  # both are served
    ids = [o["operationId"] for item in doc["paths"].values() for o in item.values()]
    assert len(ids) == len(set(ids))


def test_served_on_every_serve_and_valid(echo: ServerProcess) -> None:
    from openapi_spec_validator import validate

    response = httpx.get(echo.url + "/openapi.json", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    doc = response.json()
    validate(doc)
    assert doc["info"]["title"] == "echo"
    assert doc["servers"] == [{"url": echo.url}]


def test_schemathesis_finds_no_server_error_and_no_mismatch(echo: ServerProcess) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    schema = schemathesis.openapi.from_dict(httpx.get(echo.url + "/openapi.json", timeout=10).json())
    deadline = time.monotonic() + SCHEMATHESIS_BUDGET
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        assert time.monotonic() < deadline, f"schemathesis ran over {SCHEMATHESIS_BUDGET:g} s"

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case: object) -> None:
            case.call_and_validate(base_url=echo.url, checks=checks, timeout=10)  # type: ignore[attr-defined]

        run()
        tested.append(operation.label)
    assert len(tested) == sum(len(op.routes) for op in OPERATIONS) + 1  # + the card


def test_security_schemes_of_every_kind_are_valid_openapi() -> None:
    from openapi_spec_validator import validate

    from relaykit._card import (
        ClientCredentialsOAuthFlow,
        DeviceCodeOAuthFlow,
        MutualTlsSecurityScheme,
        OAuth2SecurityScheme,
        OAuthFlows,
        OpenIdConnectSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
    )

    schemes = {
        "bearer": SecurityScheme.bearer("JWT"),
        "apiKey": SecurityScheme.api_key("X-API-Key", description="issued by ops"),
        "oidc": SecurityScheme(
            open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                open_id_connect_url="https://idp.example/.well-known/openid-configuration"
            )
        ),
        "mtls": SecurityScheme(mtls_security_scheme=MutualTlsSecurityScheme()),
        "oauth": SecurityScheme(
            oauth2_security_scheme=OAuth2SecurityScheme(
                flows=OAuthFlows(
                    client_credentials=ClientCredentialsOAuthFlow(
                        token_url="https://idp.example/token", scopes={"tasks": "use the agent"}
                    )
                )
            )
        ),
        "device": SecurityScheme(
            oauth2_security_scheme=OAuth2SecurityScheme(
                flows=OAuthFlows(
                    device_code=DeviceCodeOAuthFlow(
                        device_authorization_url="https://idp.example/device", token_url="https://idp.example/token"
                    )
                )
            )
        ),
    }
    requirements = [
        SecurityRequirement(schemes={"bearer": StringList()}),
        SecurityRequirement(schemes={"oauth": StringList(list=["tasks"]), "mtls": StringList()}),
    ]
    doc = openapi_document(security_schemes=schemes, security_requirements=requirements)
    validate(doc)
    described = doc["components"]["securitySchemes"]
    assert described["bearer"] == {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    assert described["apiKey"] == {
        "type": "apiKey",
        "name": "X-API-Key",
        "in": "header",
        "description": "issued by ops",
    }
    assert described["oidc"]["type"] == "openIdConnect"
    assert described["mtls"] == {"type": "mutualTLS"}
    assert described["oauth"]["flows"]["clientCredentials"] == {
        "tokenUrl": "https://idp.example/token",
        "scopes": {"tasks": "use the agent"},
    }
    assert doc["security"] == [{"bearer": []}, {"oauth": ["tasks"], "mtls": []}]
    assert doc["paths"]["/.well-known/agent-card.json"]["get"]["security"] == []
    # No auth configured: no security members at all (anonymous, as the card says).
    plain = openapi_document()
    assert "security" not in plain
    assert "securitySchemes" not in plain["components"]
