"""Card validation for the inspector's Card page: the card as fetched, and findings about it.

A finding is ``{"level": "error" | "warning" | "info" | "ok", "field": str, "message": str}``. Checks, in order:

* the fetch itself (status, content type, JSON object);
* the fields A2A 1.0 marks REQUIRED (card, interfaces, skills), and whatever else the model refuses;
* the protocol versions on offer (relaykit's client speaks 1.0 and 0.3; a 0.3 card is read as its 1.0 equivalent);
* every interface, 1.0 or 0.3, probed through ``Client`` pinned to it and to its version (GetTask of an id that
  cannot exist: any A2A answer means reachable), all at once, each bounded by ``PROBE_TIMEOUT``;
* signatures: verified against the JWKS their ``jku`` names (or reported as not verifiable), never silently passed.

Nothing here raises for a bad card: a bad card is what the page is for.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
from typing import Any

import httpx
from pydantic import ValidationError

from relaykit._card import GRPC, AgentCard, AgentInterface
from relaykit._errors import A2AClientError, A2AError, TaskNotFoundError
from relaykit._ids import new_id
from relaykit._jws import verify_sdk03_signature
from relaykit.client import Client, RetryPolicy, parse_card
from relaykit.client._card import DEFAULT_TRANSPORTS, card_url
from relaykit.inspector._session import CLIENT_VERSIONS, SPOKEN_MAJORS, Session, local_interfaces

__all__ = ["PROBE_TIMEOUT", "check_card"]

PROBE_TIMEOUT = 3.0
Finding = dict[str, str]

_REQUIRED_CARD = (
    "name",
    "description",
    "supportedInterfaces",
    "version",
    "capabilities",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
)
_REQUIRED_INTERFACE = ("url", "protocolBinding", "protocolVersion")
_REQUIRED_SKILL = ("id", "name", "description", "tags")


def _finding(level: str, where: str, message: str) -> Finding:
    return {"level": level, "field": where, "message": message}


def _required(raw: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    legacy = not raw.get("supportedInterfaces") and bool(raw.get("url"))
    for name in _REQUIRED_CARD:
        if name == "supportedInterfaces" and legacy:
            continue
        value = raw.get(name)
        if value is None or value == "" or (name == "supportedInterfaces" and value == []):
            out.append(_finding("error", name, f"required field {name} is missing or empty"))
    interfaces = raw.get("supportedInterfaces")
    for i, interface in enumerate(interfaces if isinstance(interfaces, list) else []):
        if not isinstance(interface, dict):
            out.append(_finding("error", f"supportedInterfaces[{i}]", "is not an object"))
            continue
        for name in _REQUIRED_INTERFACE:
            if not interface.get(name):
                out.append(_finding("error", f"supportedInterfaces[{i}].{name}", f"required field {name} is missing"))
    skills = raw.get("skills")
    for i, skill in enumerate(skills if isinstance(skills, list) else []):
        if not isinstance(skill, dict):
            out.append(_finding("error", f"skills[{i}]", "is not an object"))
            continue
        for name in _REQUIRED_SKILL:
            if name not in skill or skill[name] in ("", None):
                out.append(_finding("error", f"skills[{i}].{name}", f"required field {name} is missing"))
    return out


def _versions(card: AgentCard, legacy: bool) -> list[Finding]:
    out: list[Finding] = []
    versions = sorted({i.protocol_version for i in card.supported_interfaces})
    if legacy:
        legacy_card = "an A2A 0.3 card (url + preferredTransport): its interfaces are spoken to in 0.3"
        out.append(_finding("info", "protocolVersion", legacy_card))
    for version in versions:
        if version.split(".")[0] in SPOKEN_MAJORS:
            out.append(_finding("ok", "protocolVersion", f"A2A {version} offered"))
        else:
            out.append(
                _finding(
                    "warning",
                    "protocolVersion",
                    f"A2A {version} offered: relaykit's client speaks {' and '.join(CLIENT_VERSIONS)}, "
                    "so the inspector cannot use these interfaces",
                )
            )
    if card.supported_interfaces and not any(v.split(".")[0] in SPOKEN_MAJORS for v in versions):
        spoken = " or ".join(CLIENT_VERSIONS)
        out.append(_finding("error", "supportedInterfaces", f"no A2A {spoken} interface: the inspector cannot call it"))
    return out


async def _probe(card: AgentCard, index: int, interface: AgentInterface, session: Session) -> dict[str, Any]:
    binding = interface.protocol_binding.upper()
    row: dict[str, Any] = {
        "index": index,
        "binding": interface.protocol_binding,
        "url": interface.url,
        "version": interface.protocol_version,
        "tenant": interface.tenant,
    }
    if interface.protocol_version.split(".")[0] not in SPOKEN_MAJORS:
        spoken = " and ".join(CLIENT_VERSIONS)
        return {**row, "status": "skipped", "detail": f"not probed: relaykit's client speaks A2A {spoken}"}
    if binding not in DEFAULT_TRANSPORTS:
        why = "install relaykit[grpc] to probe it" if binding == GRPC else "a binding relaykit does not speak"
        return {**row, "status": "skipped", "detail": f"not probed: {why}"}
    alone = card.model_copy(update={"supported_interfaces": [interface]})
    if session.locked:
        alone = local_interfaces(alone, session.url)
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT) as http:
        client = Client(
            card=alone,
            http=http,
            headers=session.headers,
            transports=[binding],
            protocol_version=interface.protocol_version,
            timeout=PROBE_TIMEOUT,
            connect_timeout=PROBE_TIMEOUT,
            retry=RetryPolicy(attempts=1),
            allow_insecure_credentials=True,  # as open_client (inspector._session) says why
        )
        try:
            await client.connect()
            await asyncio.wait_for(client.get_task(f"relaykit-inspector-probe-{new_id()}"), PROBE_TIMEOUT)
            status, detail = "reachable", "answered GetTask of an unknown id with a task (unexpected, but alive)"
        except TaskNotFoundError:
            status, detail = "reachable", "answered (TaskNotFound for a probe id, as expected)"
        except A2AClientError as exc:
            status, detail = "unreachable", str(exc)
        except A2AError as exc:
            status, detail = "reachable", f"answered with {type(exc).__name__}: {exc}"
        except TimeoutError:
            status, detail = "unreachable", f"no answer within {PROBE_TIMEOUT:g} s"
        finally:
            await client.aclose()
    return {**row, "status": status, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}


async def _signatures(card: AgentCard, raw: dict[str, Any], http: httpx.AsyncClient) -> list[Finding]:
    if not card.signatures:
        return [_finding("info", "signatures", "the card is not signed")]
    try:
        import jwt
    except ImportError:
        return [_finding("warning", "signatures", "signed, but PyJWT is missing: pip install 'relaykit[signing]'")]
    from relaykit.client import verify_card

    out: list[Finding] = []
    for i, signature in enumerate(card.signatures):
        header = _protected(signature.protected)
        where = f"signatures[{i}]"
        jku, kid = header.get("jku"), header.get("kid")
        if not isinstance(jku, str) or not jku.startswith(("https://", "http://")):
            out.append(_finding("warning", where, "signed, but no jku names the key: not verified"))
            continue
        try:
            response = await http.get(jku)
            keys = jwt.PyJWKSet.from_dict(response.json()).keys
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
            out.append(_finding("error", where, f"cannot read the JWKS at {jku}: {exc}"))
            continue
        candidates = [k for k in keys if kid is None or k.key_id == kid]
        if not candidates:
            out.append(_finding("error", where, f"the JWKS at {jku} has no key {kid!r}"))
            continue
        one = card.model_copy(update={"signatures": [signature]})
        alg = [str(header.get("alg", "ES256"))]
        failure: A2AError | None = None
        for key in candidates:
            try:
                # Any form a signer may have used: the strict one, a2a-sdk's (relaykit adds one when it differs),
                # or the JSON exactly as received (the 1.0 card with the 0.3 members merged in).
                verify_card(one, key.key, algorithms=alg, sdk_form=True, received=raw)
                out.append(_finding("ok", where, f"signature verified with key {kid!r} from {jku}"))
                break
            except A2AError as exc:
                failure = exc
        else:
            out.append(_sdk03_finding(one, candidates, raw, alg, where, f"key {kid!r} from {jku}", failure))
    return out


def _sdk03_finding(
    one: AgentCard,
    keys: list[Any],
    raw: dict[str, Any],
    alg: list[str],
    where: str,
    named: str,
    failure: A2AError | None,
) -> Finding:
    """The finding for a signature no form of the whole card verifies: ok when it is over a2a-sdk 0.3's form of the
    JSON (relaykit signs that for 0.3 clients; it covers the 0.3 members only, so it is said), an error otherwise."""
    for key in keys:
        try:
            verify_sdk03_signature(one, key.key, raw, algorithms=alg)
        except A2AError:
            continue
        return _finding("ok", where, f"signature over a2a-sdk 0.3's form (the 0.3 members only) verified with {named}")
    return _finding("error", where, f"signature does not verify: {failure}")


def _protected(protected: str) -> dict[str, Any]:
    try:
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    except (ValueError, binascii.Error):
        return {}
    return header if isinstance(header, dict) else {}


async def check_card(session: Session, http: httpx.AsyncClient) -> tuple[dict[str, Any], AgentCard | None]:
    """Fetch the card of ``session`` and judge it; returns the page's report and the parsed card (None if unusable)."""
    url = card_url(session.url)
    report: dict[str, Any] = {"url": url, "raw": None, "card": None, "findings": [], "interfaces": []}
    findings: list[Finding] = report["findings"]
    started = time.perf_counter()
    try:
        response = await http.get(url, headers=session.headers)
    except httpx.HTTPError as exc:
        findings.append(_finding("error", "card", f"cannot fetch {url}: {exc or type(exc).__name__}"))
        return report, None
    report["status"] = response.status_code
    report["ms"] = round((time.perf_counter() - started) * 1000, 1)
    if response.status_code != 200:
        findings.append(_finding("error", "card", f"{url} answered HTTP {response.status_code}"))
        return report, None
    content_type = response.headers.get("content-type", "")
    if "json" not in content_type:
        findings.append(_finding("warning", "card", f"served as {content_type or 'no content type'}, not JSON"))
    try:
        raw = json.loads(response.content)
    except ValueError as exc:
        findings.append(_finding("error", "card", f"not JSON: {exc}"))
        return report, None
    report["raw"] = raw
    if not isinstance(raw, dict):
        findings.append(_finding("error", "card", "not a JSON object"))
        return report, None
    findings.extend(_required(raw))
    try:
        card = parse_card(response.content, url)
    except A2AError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ValidationError):
            for error in cause.errors():
                where = ".".join(str(p) for p in error["loc"])
                findings.append(_finding("error", where, error["msg"]))
        else:
            findings.append(_finding("error", "card", str(exc)))
        return report, None
    report["card"] = card.to_dict()
    report["name"] = card.name
    legacy = not raw.get("supportedInterfaces") and bool(raw.get("url"))
    findings.extend(_versions(card, legacy))
    probes = [_probe(card, i, interface, session) for i, interface in enumerate(card.supported_interfaces)]
    report["interfaces"] = list(await asyncio.gather(*probes))
    for row in report["interfaces"]:
        where = f"supportedInterfaces[{row['index']}]"
        if row["status"] == "reachable":
            findings.append(_finding("ok", where, f"{row['binding']} at {row['url']} is reachable ({row['detail']})"))
        elif row["status"] == "unreachable":
            findings.append(
                _finding("error", where, f"{row['binding']} at {row['url']} is unreachable: {row['detail']}")
            )
        else:
            findings.append(_finding("info", where, f"{row['binding']} at {row['url']}: {row['detail']}"))
    findings.extend(await _signatures(card, raw, http))
    caps = card.capabilities
    if not caps.streaming:
        findings.append(_finding("info", "capabilities.streaming", "no streaming: chat uses SendMessage"))
    if not findings or not any(f["level"] == "error" for f in findings):
        findings.insert(0, _finding("ok", "card", "every required field is present"))
    return report, card
