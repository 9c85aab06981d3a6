"""A card's JSON as the A2A 0.3 ``AgentCard`` model reads it: what a 0.3 signer covers (``relaykit._jws``).

a2a-sdk 0.3 signs and verifies its pydantic model of the card (generated from the 0.3 JSON schema), not the JSON it
received: members the 0.3 schema does not name are gone (the 1.0 ones of relaykit's merged card among them), and
members that hold the schema's default are left out of its payload. ``model_view`` reproduces that model's reading:

* only the 0.3 members, recursively (``AgentCard``, ``AgentInterface``, ``AgentCapabilities``, ``AgentExtension``,
  ``AgentProvider``, ``AgentSkill``, each security scheme by its ``type``, OAuth flows); ``null`` is absent;
* ``defaults=False`` drops a member that holds its schema default (``protocolVersion`` ``"0.3.0"``,
  ``preferredTransport`` ``"JSONRPC"``, a scheme's ``type``), as the SDK's ``exclude_defaults`` dump does;
  ``defaults=True`` keeps them, for reading the view back as a card;
* a JSON object that is not a 0.3 card (no ``url``, a scheme of no known ``type``, a member of the wrong shape) has
  no view (``None``): there is nothing a 0.3 model would have read the same way.

Free-form members (``params``, ``scopes``, ``security``) are taken as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relaykit._v03._card import CARD_VERSION

__all__ = ["model_view"]


@dataclass(frozen=True)
class _Object:
    """A 0.3 object: its members (``None``: any JSON value, taken as is) and the ones with a schema default."""

    members: Mapping[str, Shape]
    defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _List:
    item: Shape


@dataclass(frozen=True)
class _Map:
    value: Shape


@dataclass(frozen=True)
class _ByType:
    """A oneOf told apart by its ``type`` member (the 0.3 ``SecurityScheme``)."""

    variants: Mapping[str, _Object]


Shape = _Object | _List | _Map | _ByType | None


def _scheme(kind: str, *members: str, **shaped: Shape) -> _Object:
    return _Object({"type": None, "description": None, **dict.fromkeys(members), **shaped}, {"type": kind})


def _flow(*members: str) -> _Object:
    return _Object(dict.fromkeys(("refreshUrl", "scopes", *members)))


_INTERFACE = _Object(dict.fromkeys(("url", "transport")))
_EXTENSION = _Object(dict.fromkeys(("uri", "description", "required", "params")))
_FLOWS = _Object(
    {
        "authorizationCode": _flow("authorizationUrl", "tokenUrl"),
        "clientCredentials": _flow("tokenUrl"),
        "implicit": _flow("authorizationUrl"),
        "password": _flow("tokenUrl"),
    }
)
_SCHEMES = _ByType(
    {
        "apiKey": _scheme("apiKey", "in", "name"),
        "http": _scheme("http", "scheme", "bearerFormat"),
        "oauth2": _scheme("oauth2", "oauth2MetadataUrl", flows=_FLOWS),
        "openIdConnect": _scheme("openIdConnect", "openIdConnectUrl"),
        "mutualTLS": _scheme("mutualTLS"),
    }
)
_SKILL = _Object(
    dict.fromkeys(("id", "name", "description", "tags", "examples", "inputModes", "outputModes", "security"))
)
# ``signatures`` is a 0.3 member too, but never part of what is signed: it is left out here.
_CARD = _Object(
    {
        **dict.fromkeys(
            (
                "name",
                "description",
                "url",
                "preferredTransport",
                "protocolVersion",
                "version",
                "documentationUrl",
                "iconUrl",
                "defaultInputModes",
                "defaultOutputModes",
                "security",
                "supportsAuthenticatedExtendedCard",
            )
        ),
        "additionalInterfaces": _List(_INTERFACE),
        "capabilities": _Object(
            {
                "streaming": None,
                "pushNotifications": None,
                "stateTransitionHistory": None,
                "extensions": _List(_EXTENSION),
            }
        ),
        "provider": _Object(dict.fromkeys(("organization", "url"))),
        "securitySchemes": _Map(_SCHEMES),
        "skills": _List(_SKILL),
    },
    {"preferredTransport": "JSONRPC", "protocolVersion": CARD_VERSION},
)


class _NotA03Card(ValueError):
    pass


def _view(value: Any, shape: Shape, defaults: bool) -> Any:
    if shape is None:
        return value
    if isinstance(shape, _List):
        if not isinstance(value, list):
            raise _NotA03Card
        return [_view(item, shape.item, defaults) for item in value]
    if not isinstance(value, dict):
        raise _NotA03Card
    if isinstance(shape, _Map):
        return {key: _view(item, shape.value, defaults) for key, item in value.items()}
    if isinstance(shape, _ByType):
        kind = value.get("type")
        variant = shape.variants.get(kind) if isinstance(kind, str) else None
        if variant is None:
            raise _NotA03Card
        shape = variant
    out: dict[str, Any] = {}
    # In the order received: where order means something (0.3 OAuth flows, of which the 1.0 reading keeps the
    # first), the view reads as the JSON does.
    for name, item in value.items():
        if name not in shape.members or item is None:
            continue
        if not defaults and name in shape.defaults and item == shape.defaults[name]:
            continue
        out[name] = _view(item, shape.members[name], defaults)
    return out


def model_view(data: Mapping[str, Any], *, defaults: bool) -> dict[str, Any] | None:
    """The members of card JSON ``data`` the 0.3 ``AgentCard`` model reads (``None``: ``data`` is no 0.3 card)."""
    if not isinstance(data.get("url"), str):
        return None
    try:
        out: dict[str, Any] = _view(dict(data), _CARD, defaults)
    except _NotA03Card:
        return None
    return out
