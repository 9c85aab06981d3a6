"""Model ⇄ protobuf conversion: a round trip for every message type of ``lf.a2a.v1``, both implementations agreeing.

For each type one richly filled sample (every field set, oneofs, optional fields at 0/false, Struct and Value with
nested data, bytes, timestamps, maps) and, where the type has them, samples of its other oneof members:

* ``from_proto(to_proto(m)) == m`` (the compiled path, used by the binding);
* ``to_proto(m) == to_proto_json(m)`` and ``from_proto(p) == from_proto_json(p)`` (the ProtoJSON reference);
* a2a-sdk's message class parses the bytes, and its ProtoJSON equals relaykit's JSON of the same model;
* the samples cover every message in the schema (a new type without a sample fails the test).

Validation is the same as for JSON input: a REQUIRED field at its default (e.g. an empty ``messageId``) fails in both
paths with the same field named.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format
from pydantic import ValidationError

from relaykit import _card as c
from relaykit import types as t
from relaykit._grpc_gen import a2a_pb2 as pb
from relaykit._model import A2AModel
from relaykit._proto import (
    decoder,
    encode_event,
    encoder,
    from_proto,
    from_proto_json,
    model_class,
    to_proto,
    to_proto_json,
)

TS = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
META = {"k": "v", "n": 42, "f": 1.5, "b": True, "z": None, "list": [1, "two", {"three": [3.25]}], "obj": {"a": {}}}


def _message(**extra: Any) -> t.Message:
    return t.Message(
        message_id="m-1",
        context_id="ctx",
        task_id="task",
        role=t.Role.AGENT,
        parts=[
            t.Part(text="hello", metadata={"lang": "en"}, media_type="text/plain"),
            t.Part(raw=b"\x00\x01\xfe\xff", filename="a.bin", media_type="application/octet-stream"),
            t.Part(url="https://example.com/f.pdf", filename="f.pdf", media_type="application/pdf"),
            t.Part(data={"key": "value", "count": 42, "nested": [True, None, {"x": 1.5}]}),
            t.Part(data=[1, 2, "three"]),
            t.Part(data="scalar"),
            t.Part(data=None),
            t.Part(text=""),
        ],
        metadata=META,
        extensions=["urn:ext:1"],
        reference_task_ids=["t0", "t1"],
        **extra,
    )


def _artifact() -> t.Artifact:
    return t.Artifact(
        artifact_id="a-1",
        name="result",
        description="the result",
        parts=[t.Part(text="chunk"), t.Part(data={"x": 1})],
        metadata={"m": [1, 2]},
        extensions=["urn:ext:2"],
    )


def _status(state: t.TaskState = t.TaskState.INPUT_REQUIRED) -> t.TaskStatus:
    return t.TaskStatus(state=state, message=_message(), timestamp=TS)


def _task() -> t.Task:
    return t.Task(
        id="task",
        context_id="ctx",
        status=_status(),
        artifacts=[_artifact(), t.Artifact.text("second", artifact_id="a-2")],
        history=[t.Message.user("question", message_id="u-1"), _message()],
        metadata={"owner": "x", "n": 7},
    )


def _push() -> t.TaskPushNotificationConfig:
    return t.TaskPushNotificationConfig(
        tenant="acme",
        id="p-1",
        task_id="task",
        url="https://hooks.example/a2a",
        token="tok",
        authentication=t.AuthenticationInfo(scheme="Bearer", credentials="secret"),
    )


def _requirement() -> c.SecurityRequirement:
    return c.SecurityRequirement(schemes={"oauth": c.StringList(items=["read", "write"]), "key": c.StringList()})


def _card() -> c.AgentCard:
    return c.AgentCard(
        name="agent",
        description="does things",
        supported_interfaces=[
            c.AgentInterface(url="http://localhost:8000/", protocol_binding="JSONRPC"),
            c.AgentInterface(url="localhost:50051", protocol_binding="GRPC", tenant="acme", protocol_version="1.0"),
        ],
        provider=c.AgentProvider(url="https://acme.example", organization="Acme"),
        version="1.2.3",
        documentation_url="https://docs.example",
        capabilities=c.AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extended_agent_card=True,
            extensions=[c.AgentExtension(uri="urn:ext:1", description="e", required=True, params={"p": [1]})],
        ),
        security_schemes={
            "key": c.SecurityScheme.api_key("X-API-Key"),
            "bearer": c.SecurityScheme.bearer("JWT", description="jwt"),
            "oauth": c.SecurityScheme(
                oauth2_security_scheme=c.OAuth2SecurityScheme(
                    description="o",
                    flows=c.OAuthFlows(
                        authorization_code=c.AuthorizationCodeOAuthFlow(
                            authorization_url="https://a/auth",
                            token_url="https://a/token",
                            refresh_url="https://a/refresh",
                            scopes={"read": "Read", "write": "Write"},
                            pkce_required=True,
                        )
                    ),
                    oauth2_metadata_url="https://a/.well-known/oauth-authorization-server",
                )
            ),
            "oidc": c.SecurityScheme(
                open_id_connect_security_scheme=c.OpenIdConnectSecurityScheme(
                    open_id_connect_url="https://a/.well-known/openid-configuration"
                )
            ),
            "mtls": c.SecurityScheme(mtls_security_scheme=c.MutualTlsSecurityScheme(description="mutual")),
        },
        security_requirements=[_requirement()],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            c.AgentSkill(
                id="s",
                name="skill",
                description="d",
                tags=["t"],
                examples=["e"],
                input_modes=["text/plain"],
                output_modes=["application/json"],
                security_requirements=[_requirement()],
            )
        ],
        signatures=[c.AgentCardSignature(protected="eyJhbGciOiJFUzI1NiJ9", signature="sig", header={"kid": "k1"})],
        icon_url="https://icon.example/i.png",
    )


def _flows(kind: str) -> c.OAuthFlows:
    flows: dict[str, Any] = {
        "client_credentials": c.ClientCredentialsOAuthFlow(token_url="https://a/t", refresh_url="r", scopes={"w": "W"}),
        "device_code": c.DeviceCodeOAuthFlow(
            device_authorization_url="https://a/d", token_url="https://a/t", refresh_url="r", scopes={"x": "X"}
        ),
        "implicit": c.ImplicitOAuthFlow(authorization_url="https://a/auth", refresh_url="r", scopes={"r": "R"}),
        "password": c.PasswordOAuthFlow(token_url="https://a/t", refresh_url="r", scopes={"r": "R"}),
    }
    return c.OAuthFlows(**{kind: flows[kind]})


def _samples() -> list[A2AModel]:
    status_event = t.TaskStatusUpdateEvent(task_id="task", context_id="ctx", status=_status(), metadata={"e": 1})
    artifact_event = t.TaskArtifactUpdateEvent(
        task_id="task", context_id="ctx", artifact=_artifact(), append=True, last_chunk=True, metadata={"e": 2}
    )
    config = t.SendMessageConfiguration(
        accepted_output_modes=["text/plain"],
        task_push_notification_config=_push(),
        history_length=0,
        return_immediately=True,
    )
    card = _card()
    kinds = ("client_credentials", "device_code", "implicit", "password")
    flows = [_flows(kind) for kind in kinds]
    return [
        _message(),
        *_message().parts,
        _artifact(),
        _status(),
        t.TaskStatus(state=t.TaskState.SUBMITTED),
        _task(),
        status_event,
        artifact_event,
        t.TaskArtifactUpdateEvent(task_id="task", context_id="ctx", artifact=_artifact()),
        t.StreamResponse(task=_task()),
        t.StreamResponse(message=_message()),
        t.StreamResponse(status_update=status_event),
        t.StreamResponse(artifact_update=artifact_event),
        t.SendMessageResponse(task=_task()),
        t.SendMessageResponse(message=_message()),
        t.AuthenticationInfo(scheme="Bearer", credentials="c"),
        _push(),
        t.TaskPushNotificationConfig(url="https://h"),
        config,
        t.SendMessageConfiguration(history_length=5),
        t.SendMessageRequest(tenant="acme", message=_message(), configuration=config, metadata={"r": [None]}),
        t.SendMessageRequest(message=t.Message.user("hi")),
        t.GetTaskRequest(tenant="acme", id="task", history_length=0),
        t.GetTaskRequest(id="task"),
        t.ListTasksRequest(
            tenant="acme",
            context_id="ctx",
            status=t.TaskState.WORKING,
            page_size=10,
            page_token="tok",
            history_length=0,
            status_timestamp_after=TS,
            include_artifacts=False,
        ),
        t.ListTasksRequest(),
        t.ListTasksResponse(tasks=[_task()], next_page_token="next", page_size=10, total_size=11),
        t.ListTasksResponse(),
        t.CancelTaskRequest(tenant="acme", id="task", metadata={"why": "x"}),
        t.SubscribeToTaskRequest(tenant="acme", id="task"),
        t.GetTaskPushNotificationConfigRequest(tenant="acme", task_id="task", id="p-1"),
        t.DeleteTaskPushNotificationConfigRequest(tenant="acme", task_id="task", id="p-1"),
        t.ListTaskPushNotificationConfigsRequest(tenant="acme", task_id="task", page_size=3, page_token="p"),
        t.ListTaskPushNotificationConfigsResponse(configs=[_push(), t.TaskPushNotificationConfig(url="u")]),
        t.ListTaskPushNotificationConfigsResponse(next_page_token="n"),
        t.GetExtendedAgentCardRequest(tenant="acme"),
        t.GetExtendedAgentCardRequest(),
        card,
        c.AgentCard(name="minimal"),
        *card.supported_interfaces,
        card.provider,  # type: ignore[list-item]
        card.capabilities,
        c.AgentCapabilities(),
        *card.capabilities.extensions,
        *card.skills,
        *card.signatures,
        *card.security_schemes.values(),
        _requirement(),
        c.StringList(items=["a"]),
        c.APIKeySecurityScheme(description="d", location="query", name="key"),
        c.HTTPAuthSecurityScheme(scheme="Basic"),
        c.OAuth2SecurityScheme(flows=flows[0]),
        c.OpenIdConnectSecurityScheme(open_id_connect_url="https://x"),
        c.MutualTlsSecurityScheme(),
        *flows,
        *(getattr(f, kind) for f, kind in zip(flows, kinds, strict=True)),
        card.security_schemes["oauth"].oauth2_security_scheme.flows,  # type: ignore[union-attr]
        card.security_schemes["oauth"].oauth2_security_scheme.flows.authorization_code,  # type: ignore[union-attr]
    ]


SAMPLES = _samples()


def _id(model: A2AModel) -> str:
    return type(model).__name__


def test_samples_cover_every_message_of_the_schema() -> None:
    covered = {type(sample).__name__ for sample in SAMPLES}
    assert covered == set(pb.DESCRIPTOR.message_types_by_name)


@pytest.mark.parametrize("model", SAMPLES, ids=_id)
def test_round_trip(model: A2AModel) -> None:
    message = to_proto(model)
    assert message.DESCRIPTOR.full_name == f"lf.a2a.v1.{type(model).__name__}"
    assert model_class(message) is type(model)
    assert from_proto(message, type(model)) == model
    # Through the wire format too, with the binding's bytes-level helpers.
    data = encoder(type(model))(model)
    assert decoder(type(model))(data) == model


@pytest.mark.parametrize("model", SAMPLES, ids=_id)
def test_compiled_path_equals_protojson(model: A2AModel) -> None:
    message = to_proto(model)
    assert message == to_proto_json(model)
    assert from_proto(message, type(model)) == from_proto_json(message, type(model))


@pytest.mark.parametrize("model", SAMPLES, ids=_id)
def test_a2a_sdk_reads_the_same_message(model: A2AModel) -> None:
    from a2a.types import a2a_pb2 as sdk

    sdk_class = getattr(sdk, type(model).__name__)
    theirs = sdk_class.FromString(to_proto(model).SerializeToString())
    # The SDK's own ProtoJSON parse of relaykit's JSON is the very message relaykit put on the gRPC wire ...
    assert json_format.Parse(model.to_json(), sdk_class()) == theirs
    # ... the SDK's ProtoJSON of it is relaykit's model again ...
    assert type(model).model_validate(json_format.MessageToDict(theirs)) == model
    # ... and so are the SDK's bytes.
    assert from_proto(type(to_proto(model)).FromString(theirs.SerializeToString()), type(model)) == model


def test_stream_events_encode_as_stream_responses() -> None:
    status_event = next(s for s in SAMPLES if isinstance(s, t.TaskStatusUpdateEvent))
    artifact_event = next(s for s in SAMPLES if isinstance(s, t.TaskArtifactUpdateEvent))
    events: list[Any] = [_task(), _message(), status_event, artifact_event]
    for event in events:
        data = encode_event(event)
        assert data == to_proto(t.StreamResponse.of(event)).SerializeToString()
        assert decoder(t.StreamResponse)(data).payload == event


def test_struct_numbers_come_back_as_json_readers_see_them() -> None:
    part = from_proto(to_proto(t.Part(data={"int": 42, "float": 2.5, "big": 2**60, "neg": -3})), t.Part)
    assert part.data == {"int": 42, "float": 2.5, "big": float(2**60), "neg": -3}
    assert isinstance(part.data["int"], int)
    assert isinstance(part.data["big"], float)


def test_timestamps_carry_milliseconds_like_the_json_bindings() -> None:
    status = t.TaskStatus(state=t.TaskState.WORKING, timestamp=datetime(2026, 1, 2, 3, 4, 5, 678999, tzinfo=UTC))
    message = to_proto(status)
    assert message == to_proto_json(status)
    assert message.timestamp.nanos == 678_000_000  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: pb.SendMessageRequest(message=pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text="x")])), "messageId"),
        (lambda: pb.SendMessageRequest(message=pb.Message(message_id="m", parts=[pb.Part(text="x")])), "role"),
        (lambda: pb.SendMessageRequest(message=pb.Message(message_id="m", role=pb.ROLE_USER)), "parts"),
        (lambda: pb.SendMessageRequest(), "message"),
        (lambda: pb.GetTaskRequest(id="t", history_length=-1), "history_length"),
    ],
)
def test_missing_required_fields_fail_alike(build: Any, field: str) -> None:
    message = build()
    with pytest.raises(ValidationError) as compiled:
        from_proto(message, model_class(message))
    with pytest.raises(ValidationError) as reference:
        from_proto_json(message, model_class(message))
    located = {".".join(str(p) for p in e["loc"]) for e in compiled.value.errors()}
    assert any(field in loc or field.replace("Id", "_id") in loc for loc in located), located
    assert len(compiled.value.errors()) == len(reference.value.errors())
