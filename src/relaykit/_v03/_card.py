"""The agent card across versions: the served card carries the 0.3 fields next to the 1.0 ones, and a 0.3 card
read by the client becomes its 1.0 equivalent.

Serving (``card_json``): when the card lists an interface with a 0.x ``protocolVersion``, the 1.0 JSON is merged
with the card's 0.3 rendering: ``protocolVersion``, ``url`` + ``preferredTransport`` (the first 0.3 interface),
``additionalInterfaces`` (every 0.3 interface, the main one included, as 0.3 §5.6.2 asks), ``security``,
``supportsAuthenticatedExtendedCard``, skill ``tags``/``description``/``security``, and each security scheme's 0.3
members (``type``, ``in``, …) beside its 1.0 wrapper key. The merge never replaces a 1.0 member, so a 1.0 reader
sees exactly the 1.0 card (plus members it ignores) and a 0.3 reader finds every member it needs. A card without a
0.3 interface is served as plain 1.0 JSON.

Errors (``error_out``): asked for the extended card, an agent that has none answers 1.0's UnsupportedOperation;
0.3 named that case AuthenticatedExtendedCardNotConfiguredError (-32007, spec v0.3.0 §8.2; REST 404), which 0.3
clients get instead.

Reading (``card_in``): a card without ``supportedInterfaces`` but with a top-level ``url`` is 0.3: its interfaces,
security requirements, schemes and extended-card flag are rewritten into the 1.0 members.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from relaykit._card import AgentCard
from relaykit._errors import A2AError, ExtendedAgentCardNotConfiguredError, UnsupportedOperationError

__all__ = ["CARD_VERSION", "card_in", "card_json", "card_merged", "card_out", "error_out", "is_v03"]

CARD_VERSION = "0.3.0"  # the protocolVersion a 0.3 card states (0.3 cards carry the patch number)

_SCHEME_OUT = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}
_SCHEME_IN = {v: k for k, v in _SCHEME_OUT.items()}


def is_v03(version: str) -> bool:
    """Whether an interface's ``protocolVersion`` is 0.x (0.3 and its patch releases; earlier 0.x read alike)."""
    return version.split(".", 1)[0] == "0"


def _scheme_out(scheme: dict[str, Any]) -> dict[str, Any]:
    for key, kind in _SCHEME_OUT.items():
        body = scheme.get(key)
        if isinstance(body, dict):
            out = {"type": kind, **body}
            if kind == "apiKey":
                out["in"] = out.pop("location", "header")
            if kind == "oauth2":
                flows = dict(out.get("flows") or {})
                flows.pop("deviceCode", None)  # no 0.3 equivalent
                # 0.3 requires every flow's scopes (a map, possibly empty); 1.0's ProtoJSON leaves an empty one out.
                out["flows"] = {
                    name: {**flow, "scopes": flow.get("scopes") or {}} if isinstance(flow, dict) else flow
                    for name, flow in flows.items()
                }
            return out
    return {}


def _requirements_out(requirements: list[dict[str, Any]]) -> list[dict[str, list[str]]]:
    return [
        {name: list((scopes or {}).get("list", [])) for name, scopes in (req.get("schemes") or {}).items()}
        for req in requirements
    ]


def card_out(card: dict[str, Any]) -> dict[str, Any] | None:
    """The 0.3 members of a 1.0 card dict (``None`` when it has no 0.3 interface)."""
    interfaces = [i for i in card.get("supportedInterfaces", ()) if is_v03(str(i.get("protocolVersion", "")))]
    if not interfaces:
        return None
    main = interfaces[0]
    out: dict[str, Any] = {
        "protocolVersion": CARD_VERSION,
        "url": main["url"],
        "preferredTransport": main["protocolBinding"],
        "additionalInterfaces": [{"url": i["url"], "transport": i["protocolBinding"]} for i in interfaces],
        "description": card.get("description", ""),
        "version": card.get("version", ""),
        "capabilities": {},
        "defaultInputModes": card.get("defaultInputModes", []),
        "defaultOutputModes": card.get("defaultOutputModes", []),
    }
    if (card.get("capabilities") or {}).get("extendedAgentCard"):
        out["supportsAuthenticatedExtendedCard"] = True
    schemes = card.get("securitySchemes")
    if schemes:
        out["securitySchemes"] = {name: _scheme_out(s) for name, s in schemes.items()}
    if card.get("securityRequirements"):
        out["security"] = _requirements_out(card["securityRequirements"])
    skills = []
    for skill in card.get("skills", ()):
        extra: dict[str, Any] = {"description": skill.get("description", ""), "tags": skill.get("tags", [])}
        if skill.get("securityRequirements"):
            extra["security"] = _requirements_out(skill["securityRequirements"])
        skills.append(extra)
    out["skills"] = skills
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Add ``extra``'s members to ``base`` where it has none; dicts (and lists of dicts, by position) recursively."""
    for key, value in extra.items():
        mine = base.get(key)
        if key not in base:
            base[key] = value
        elif isinstance(mine, dict) and isinstance(value, dict):
            _merge(mine, value)
        elif isinstance(mine, list) and isinstance(value, list):
            for a, b in zip(mine, value, strict=False):
                if isinstance(a, dict) and isinstance(b, dict):
                    _merge(a, b)
    return base


def card_merged(card: AgentCard) -> dict[str, Any] | None:
    """The 1.0 card dict with the 0.3 members merged in (``None`` when it lists no 0.3 interface)."""
    data = card.to_dict()
    extra = card_out(data)
    return None if extra is None else _merge(data, extra)


def card_json(card: AgentCard) -> bytes:
    """The served JSON of ``card``: 1.0, with the 0.3 members merged in when it lists a 0.3 interface."""
    merged = card_merged(card)
    return card.to_json() if merged is None else pydantic_core.to_json(merged)


def _requirements_in(security: Any) -> list[dict[str, Any]]:
    if not isinstance(security, list):
        return []
    return [
        {"schemes": {name: {"list": list(scopes or [])} for name, scopes in req.items()}}
        for req in security
        if isinstance(req, dict)
    ]


def _scheme_in(scheme: Any) -> Any:
    if not isinstance(scheme, dict) or "type" not in scheme:
        return scheme  # already 1.0 (or hybrid: the 1.0 wrapper key is read, the rest ignored)
    body = {k: v for k, v in scheme.items() if k != "type"}
    kind = _SCHEME_IN.get(str(scheme["type"]))
    if kind is None:
        return scheme
    if kind == "apiKeySecurityScheme" and "in" in body:
        body["location"] = body.pop("in")
    if kind == "oauth2SecurityScheme" and isinstance(body.get("flows"), dict):
        # 0.3 allowed several flows at once; the 1.0 oneof holds one: keep the first.
        first = next(iter(body["flows"].items()), None)
        body["flows"] = dict([first]) if first else {}
    return {kind: body}


def card_in(raw: dict[str, Any]) -> dict[str, Any]:
    """A 0.3 card dict rewritten into the 1.0 members (a 1.0 or hybrid card is returned unchanged)."""
    if raw.get("supportedInterfaces") or not raw.get("url"):
        return raw
    version = str(raw.get("protocolVersion") or CARD_VERSION)
    main = {
        "url": raw["url"],
        "protocolBinding": raw.get("preferredTransport") or "JSONRPC",
        "protocolVersion": version,
    }
    interfaces = [main]
    for extra in raw.get("additionalInterfaces") or []:
        if not isinstance(extra, dict) or not extra.get("url"):
            continue
        entry = {
            "url": extra["url"],
            "protocolBinding": extra.get("transport") or "JSONRPC",
            "protocolVersion": version,
        }
        if (entry["url"], entry["protocolBinding"]) != (main["url"], main["protocolBinding"]):
            interfaces.append(entry)
    out = dict(raw)
    out["supportedInterfaces"] = interfaces
    capabilities = dict(raw.get("capabilities") or {})
    if raw.get("supportsAuthenticatedExtendedCard"):
        capabilities["extendedAgentCard"] = True
    out["capabilities"] = capabilities
    if "security" in raw:
        out["securityRequirements"] = _requirements_in(raw["security"])
    if isinstance(raw.get("securitySchemes"), dict):
        out["securitySchemes"] = {name: _scheme_in(s) for name, s in raw["securitySchemes"].items()}
    skills = []
    for skill in raw.get("skills") or []:
        if isinstance(skill, dict) and "security" in skill:
            skill = {**skill, "securityRequirements": _requirements_in(skill["security"])}
        skills.append(skill)
    out["skills"] = skills
    return out


def error_out(op: str, exc: A2AError) -> A2AError:
    """The error a 0.3 client gets for a handler error of operation ``op`` (see the module docstring)."""
    if op == "GetExtendedAgentCard" and isinstance(exc, UnsupportedOperationError):
        return ExtendedAgentCardNotConfiguredError(
            "this agent has no authenticated extended card (supportsAuthenticatedExtendedCard is false)"
        )
    return exc
