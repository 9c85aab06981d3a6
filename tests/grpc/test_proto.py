"""relaykit's protobuf schema: generated code is fresh, the schema is the spec's, and it coexists with a2a-sdk's.

* ``scripts/gen-proto --out TMP`` must reproduce the checked-in ``src/relaykit/_grpc_gen`` byte for byte (the
  generator is pinned to grpcio-tools 1.85.1; the test skips with the reason under any other version).
* The compiled ``proto/a2a.proto`` equals a2a-sdk 1.3.0's compiled copy of the spec's ``a2a.proto`` in every schema
  fact: package, imports, messages, fields (name, number, label, type, type name, oneof, presence, field options such
  as ``field_behavior``), enums, the service and its methods (types, streaming, http options). Only what each
  project's build tooling adds is ignored: explicit ``json_name`` (checked to be the default lowerCamel name
  instead) and language-specific file options (java/go/php/… packaging).
* Importing a2a-sdk's client and server modules and relaykit's gRPC binding in one process works (the SDK registers
  ``lf.a2a.v1`` in protobuf's default pool, relaykit uses a private pool), and messages of either parse the other's
  bytes.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATED = REPO_ROOT / "src" / "relaykit" / "_grpc_gen"
TOOLS_VERSION = "1.85.1"


def test_checked_in_code_is_what_gen_proto_makes(tmp_path: Path) -> None:
    installed = importlib.metadata.version("grpcio-tools")
    if installed != TOOLS_VERSION:
        pytest.skip(f"grpcio-tools {installed} installed; the generated code is pinned to {TOOLS_VERSION}")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "gen-proto"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ("a2a_pb2.py", "a2a_pb2.pyi", "a2a_v0_3_pb2.py", "a2a_v0_3_pb2.pyi"):
        fresh = (tmp_path / name).read_bytes()
        checked_in = (GENERATED / name).read_bytes()
        assert fresh == checked_in, f"src/relaykit/_grpc_gen/{name} is stale: run scripts/gen-proto"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _schema(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """The file without what build tooling adds: json_name (after checking it is the default) and file options."""
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(file)
    out.ClearField("options")

    def strip(message: descriptor_pb2.DescriptorProto) -> None:
        for field in message.field:
            if field.HasField("json_name"):
                assert field.json_name == _camel(field.name), (message.name, field.name, field.json_name)
                field.ClearField("json_name")
        for nested in message.nested_type:
            strip(nested)

    for message in out.message_type:
        strip(message)
    return out


def _file(module: object) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)  # type: ignore[attr-defined]


def test_schema_is_the_specs_as_compiled_by_a2a_sdk() -> None:
    from a2a.types import a2a_pb2 as sdk

    from relaykit._grpc_gen import a2a_pb2 as ours

    theirs_file, ours_file = _schema(_file(sdk)), _schema(_file(ours))
    assert ours_file.package == "lf.a2a.v1"
    assert [m.name for m in ours_file.message_type] == [m.name for m in theirs_file.message_type]
    for mine, spec in zip(ours_file.message_type, theirs_file.message_type, strict=True):
        assert mine == spec, f"message {mine.name} differs from the spec's"
    assert list(ours_file.enum_type) == list(theirs_file.enum_type)
    assert list(ours_file.service) == list(theirs_file.service)
    assert ours_file == theirs_file  # everything else too (imports, syntax, name)
    service = ours.DESCRIPTOR.services_by_name["A2AService"]
    assert service.full_name == "lf.a2a.v1.A2AService"
    assert len(service.methods) == 11


def test_relaykit_and_a2a_sdk_load_and_interoperate_in_one_process() -> None:
    code = """
import a2a.client, a2a.server.request_handlers, a2a.server.routes  # registers lf.a2a.v1 and a2a.v1 (default pool)
from a2a.types import a2a_pb2 as sdk
from google.protobuf import descriptor_pool
import relaykit.grpc, relaykit.client._grpc
from relaykit._grpc_gen import a2a_pb2 as ours
from relaykit._requests import SendMessageRequest
from relaykit._types import Message
from relaykit.grpc import from_proto, to_proto

assert descriptor_pool.Default().FindMessageTypeByName("lf.a2a.v1.Task") is sdk.Task.DESCRIPTOR
assert ours.POOL.FindMessageTypeByName("lf.a2a.v1.Task") is ours.Task.DESCRIPTOR
assert ours.Task.DESCRIPTOR is not sdk.Task.DESCRIPTOR
request = SendMessageRequest(message=Message.user("hi", context_id="c"), metadata={"k": [1, "x"]})
theirs = sdk.SendMessageRequest.FromString(to_proto(request).SerializeToString())
assert theirs.message.parts[0].text == "hi" and theirs.message.role == sdk.ROLE_USER
back = from_proto(ours.SendMessageRequest.FromString(theirs.SerializeToString()), SendMessageRequest)
assert back == request, back
print("ok")
"""
    # A fresh interpreter, with a2a-sdk imported first: the order that used to fail with "duplicate symbol".
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
