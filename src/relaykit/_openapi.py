"""The OpenAPI 3.1 description of the HTTP+JSON binding, generated from the operation table and the models.

Nothing here is written per operation: paths, verbs, parameters and bodies come from ``_methods.OPERATIONS``,
schemas from the pydantic models (validation mode: what the server accepts, which every answer also satisfies), and
error responses from the error table in ``_errors``. Invariants:

* every route of the table is one OpenAPI operation; a path variable is removed from the body schema (the path
  wins, as in the binding) and GET/DELETE fields become camelCase query parameters;
* ``operationId`` is the A2A method name (``x-a2a-method`` too, so a JSON-RPC console can build its envelopes); a
  second route of one operation gets ``<Name>_<verb>``;
* every operation lists each HTTP status of the error table with the google.rpc.Status body (``A2AError``);
* streaming operations answer ``text/event-stream``: each ``data:`` is a ``StreamResponse`` and ``id:`` its event id;
* security comes from the card's ``securitySchemes`` / ``securityRequirements`` (the served card says what the server
  enforces, ``relaykit.auth``): ``components.securitySchemes`` and a top-level ``security`` that every operation
  inherits, except the public card's (``security: []``); no schemes, no security members.

Core-level: imports only core modules, so any binding (or a tool) can serve or print it.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic.json_schema import models_json_schema

from relaykit._card import AgentCard, OAuthFlows, SecurityRequirement, SecurityScheme, StringList
from relaykit._errors import _SERVER_ERRORS, DOMAIN, ERROR_INFO_TYPE, GRPC_CODES
from relaykit._methods import OPERATIONS, Operation, Route
from relaykit._model import A2AModel

__all__ = ["OPENAPI_PATH", "openapi_document", "openapi_json", "security_scheme_object"]

OPENAPI_PATH = "/openapi.json"
CARD_PATH = "/.well-known/agent-card.json"
_REF = "#/components/schemas/{model}"
_A2A_JSON = "application/a2a+json"
# One path segment: ":cancel" / ":subscribe" follow it, and the router does not take control characters (a
# percent-encoded newline never reaches the binding).
_PATH_PARAM = {"type": "string", "pattern": "^[^/:\\u0000-\\u001f]+$"}


@functools.cache
def _schemas() -> dict[str, Any]:
    """Every model the table names (and the card), as JSON Schema components, tidied for readers."""
    models: set[type[A2AModel]] = {AgentCard}
    for op in OPERATIONS:
        models.add(op.request)
        if op.response is not None:
            models.add(op.response)
    ordered = sorted(models, key=lambda m: m.__name__)
    _, top = models_json_schema([(m, "validation") for m in ordered], ref_template=_REF, by_alias=True)
    defs: dict[str, Any] = top.get("$defs", {})
    return {name: _tidy(schema) for name, schema in sorted(defs.items())}


def _tidy(node: Any) -> Any:
    """Drop pydantic's titles, keep a description's first paragraph (not its doctests), and describe bytes as
    base64 text (what the wire carries) rather than pydantic's ``format: base64url``."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "description" and isinstance(value, str):
            out[key] = value.split("\n\n", 1)[0].strip()
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _tidy(sub) for name, sub in value.items()}  # property names are never keywords
            continue
        out[key] = _tidy(value)
    if out.get("format") == "base64url":
        del out["format"]
        out["contentEncoding"] = "base64"
    return out


def _error_schema() -> dict[str, Any]:
    """google.rpc.Status as the binding sends it (``A2AError.to_status``)."""
    return {
        "description": "An A2A error: google.rpc.Status with an ErrorInfo detail whose reason names the error.",
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "status", "message"],
                "properties": {
                    "code": {"type": "integer", "description": "The HTTP status."},
                    "status": {"type": "string", "enum": sorted(GRPC_CODES, key=GRPC_CODES.__getitem__)},
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["@type"],
                            "properties": {
                                "@type": {"type": "string", "examples": [ERROR_INFO_TYPE]},
                                "reason": {"type": "string", "enum": sorted({e.reason for e in _SERVER_ERRORS})},
                                "domain": {"type": "string", "examples": [DOMAIN]},
                                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                            },
                        },
                    },
                },
            }
        },
    }


def _error_responses() -> dict[str, Any]:
    """One response per HTTP status of the error table, naming the errors that use it."""
    by_status: dict[int, list[str]] = {}
    for error in _SERVER_ERRORS:
        by_status.setdefault(error.http_status, []).append(f"{error.__name__} ({error.reason})")
    # The bindings' own refusal of a non-JSON Content-Type (http._asgi.UnsupportedMediaTypeError) is not in the core
    # table but is an A2A error body too.
    by_status.setdefault(415, []).append("unsupported Content-Type (INVALID_REQUEST)")
    # So is the refusal of a body over the size limit (CONTRACT: 413).
    by_status.setdefault(413, []).append("request body over the size limit (INVALID_REQUEST)")
    content = {_A2A_JSON: {"schema": {"$ref": _REF.format(model="A2AError")}}}
    out: dict[str, Any] = {
        str(status): {"description": "; ".join(names), "content": content}
        for status, names in sorted(by_status.items())
    }
    out["401"]["headers"] = {
        "WWW-Authenticate": {
            "description": "One challenge per security scheme the server accepts (RFC 9110 §11.6.1).",
            "schema": {"type": "string"},
        }
    }
    return out


def _flows(flows: OAuthFlows) -> dict[str, Any]:
    """An A2A OAuthFlows as OpenAPI's (the device flow, which OpenAPI 3.1 lacks, as ``x-deviceCode``)."""
    names = {
        "authorization_code": "authorizationCode",
        "client_credentials": "clientCredentials",
        "implicit": "implicit",
        "password": "password",
        "device_code": "x-deviceCode",
    }
    out: dict[str, Any] = {}
    for field, name in names.items():
        flow = getattr(flows, field)
        if flow is not None:
            # The A2A field names are OpenAPI's (authorizationUrl, tokenUrl, refreshUrl, scopes); scopes is required.
            out[name] = {"scopes": {}, **{k: v for k, v in flow.to_dict().items() if v not in ("", False)}}
    return out


def security_scheme_object(scheme: SecurityScheme) -> dict[str, Any]:
    """A card's ``SecurityScheme`` as an OpenAPI 3.1 Security Scheme Object.

    >>> security_scheme_object(SecurityScheme.api_key("X-API-Key"))
    {'type': 'apiKey', 'name': 'X-API-Key', 'in': 'header'}
    """
    out: dict[str, Any]
    if (api_key := scheme.api_key_security_scheme) is not None:
        out, description = {"type": "apiKey", "name": api_key.name, "in": api_key.location}, api_key.description
    elif (http := scheme.http_auth_security_scheme) is not None:
        # OpenAPI's scheme is the RFC 7235 name, conventionally lower-case ("bearer"); matching is case-insensitive.
        out, description = {"type": "http", "scheme": http.scheme.lower()}, http.description
        if http.bearer_format:
            out["bearerFormat"] = http.bearer_format
    elif (oauth2 := scheme.oauth2_security_scheme) is not None:
        out, description = {"type": "oauth2", "flows": _flows(oauth2.flows)}, oauth2.description
        if oauth2.oauth2_metadata_url:
            out["x-oauth2MetadataUrl"] = oauth2.oauth2_metadata_url
    elif (oidc := scheme.open_id_connect_security_scheme) is not None:
        out = {"type": "openIdConnect", "openIdConnectUrl": oidc.open_id_connect_url}
        description = oidc.description
    else:
        mtls = scheme.mtls_security_scheme
        out, description = {"type": "mutualTLS"}, mtls.description if mtls is not None else ""
    if description:
        out["description"] = description
    return out


def _security_requirement(requirement: SecurityRequirement) -> dict[str, list[str]]:
    return {name: list(scopes.items) for name, scopes in requirement.schemes.items()}


def _path_names(route: Route) -> list[str]:
    names: list[str] = []
    for piece in route.path.split("{")[1:]:
        names.append(piece.split("}", 1)[0])
    return names


def _without(model: str, dropped: list[str]) -> dict[str, Any]:
    """The body schema of ``model`` with the path variables removed (they come from the path)."""
    schema: dict[str, Any] = copy.deepcopy(_schemas()[model])
    for name in dropped:
        schema.get("properties", {}).pop(name, None)
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in dropped]
        if not schema["required"]:
            del schema["required"]
    return schema


def _query_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A property schema as a query parameter's: no ``null`` branch (a query cannot carry null), no default."""
    schema = {k: v for k, v in schema.items() if k != "default"}
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        schema = {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}
    return schema


def _operation(op: Operation, route: Route, first: bool) -> dict[str, Any]:
    model = op.request.__name__
    path_names = _path_names(route)
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": dict(_PATH_PARAM)} for name in path_names
    ]
    parameters.append(
        {
            "name": "A2A-Version",
            "in": "header",
            "required": True,
            "description": "The A2A protocol version of the request (this description is of 1.0).",
            "schema": {"type": "string", "enum": ["1.0"]},
        }
    )
    if op.name == "SubscribeToTask":
        parameters.append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "description": "Resume after this event id (the SSE id of the last event received).",
                "schema": {"type": "string"},
            }
        )
        # The same as a query parameter, for clients that cannot set headers (a browser's EventSource on reconnect
        # sets the header itself; a first connection made by hand may not); the header wins when both are given.
        parameters.append(
            {
                "name": "lastEventId",
                "in": "query",
                "required": False,
                "description": "Resume after this event id, as Last-Event-ID (which wins when both are given).",
                "schema": {"type": "string"},
            }
        )
    out: dict[str, Any] = {
        "operationId": op.name if first else f"{op.name}_{route.method.lower()}",
        "summary": op.name,
        "description": (op.request.__doc__ or "").strip().split("\n\n", 1)[0],
        "x-a2a-method": op.name,
        "x-a2a-streaming": op.streaming,
        "tags": ["A2A"],
    }
    if route.body:
        body = _without(model, [*path_names, "tenant"])
        out["requestBody"] = {
            # An empty body is allowed where every field is optional (e.g. POST …:cancel).
            "required": bool(body.get("required")),
            "content": {_A2A_JSON: {"schema": body}, "application/json": {"schema": body}},
        }
    else:
        properties: dict[str, Any] = _schemas()[model].get("properties", {})
        required = set(_schemas()[model].get("required", []))
        for name, schema in properties.items():
            if name in path_names or name == "tenant":
                continue
            parameters.append(
                {
                    "name": name,  # generated by alias: already the wire (camelCase) name
                    "in": "query",
                    "required": name in required,
                    "schema": _query_schema(schema),
                }
            )
    out["parameters"] = parameters
    responses: dict[str, Any] = {}
    if op.streaming:
        responses["200"] = {
            "description": "A Server-Sent Events stream: each event's data is a StreamResponse (JSON), its id the "
            "event id to resume from; an error after the stream started is an 'error' event with an A2AError.",
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "x-a2a-event-schema": _REF.format(model="StreamResponse"),
                }
            },
        }
    elif op.response is None:
        responses["200"] = {
            "description": "Done (google.protobuf.Empty).",
            "content": {_A2A_JSON: {"schema": {"type": "object"}}},
        }
    else:
        responses["200"] = {
            "description": op.response.__name__,
            "content": {_A2A_JSON: {"schema": {"$ref": _REF.format(model=op.response.__name__)}}},
        }
    responses.update(_error_responses())
    out["responses"] = responses
    return out


def _card_operation() -> dict[str, Any]:
    return {
        "operationId": "GetAgentCard",
        "summary": "The public agent card",
        "description": "The agent's self-description (no A2A-Version needed, no credential).",
        "tags": ["A2A"],
        "security": [],  # public whatever the document's security says
        "responses": {
            "200": {
                "description": "AgentCard",
                "content": {"application/json": {"schema": {"$ref": _REF.format(model="AgentCard")}}},
            }
        },
    }


def openapi_document(
    *,
    server_url: str = "/",
    title: str = "A2A agent",
    description: str = "",
    security_schemes: Mapping[str, SecurityScheme] | None = None,
    security_requirements: Sequence[SecurityRequirement] = (),
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP+JSON binding served at ``server_url``; ``security_schemes`` /
    ``security_requirements`` are the served card's (what the server enforces).

    >>> doc = openapi_document(server_url="http://localhost:8000")
    >>> doc["paths"]["/message:send"]["post"]["operationId"]
    'SendMessage'
    >>> doc = openapi_document(
    ...     security_schemes={"bearer": SecurityScheme.bearer("JWT")},
    ...     security_requirements=[SecurityRequirement(schemes={"bearer": StringList()})],
    ... )
    >>> doc["components"]["securitySchemes"], doc["security"]
    ({'bearer': {'type': 'http', 'scheme': 'bearer', 'bearerFormat': 'JWT'}}, [{'bearer': []}])
    """
    paths: dict[str, dict[str, Any]] = {CARD_PATH: {"get": _card_operation()}}
    for op in OPERATIONS:
        for index, route in enumerate(op.routes):
            paths.setdefault(route.path, {})[route.method.lower()] = _operation(op, route, index == 0)
    text = description.strip() or "An A2A 1.0 agent."
    text += (
        "\n\nThe HTTP+JSON binding of A2A 1.0, generated from relaykit's operation table. Every route is also served"
        " under a tenant prefix (/{tenant}/…). JSON-RPC 2.0 is served at the same base URL with POST /; its method"
        " names are the operationIds (x-a2a-method)."
    )
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1.0", "description": text},
        "servers": [{"url": server_url}],
        "paths": paths,
        "components": {"schemas": {**copy.deepcopy(_schemas()), "A2AError": _error_schema()}},
    }
    if security_schemes:
        doc["components"]["securitySchemes"] = {
            name: security_scheme_object(scheme) for name, scheme in security_schemes.items()
        }
        # A card with schemes but no requirement: each scheme alone is enough (how A2A clients read such a card).
        requirements = list(security_requirements) or [
            SecurityRequirement(schemes={name: StringList()}) for name in security_schemes
        ]
        doc["security"] = [_security_requirement(r) for r in requirements]
    return doc


def openapi_json(
    *,
    server_url: str = "/",
    title: str = "A2A agent",
    description: str = "",
    security_schemes: Mapping[str, SecurityScheme] | None = None,
    security_requirements: Sequence[SecurityRequirement] = (),
) -> bytes:
    """``openapi_document`` as UTF-8 JSON bytes."""
    doc = openapi_document(
        server_url=server_url,
        title=title,
        description=description,
        security_schemes=security_schemes,
        security_requirements=security_requirements,
    )
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
