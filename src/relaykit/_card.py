"""The Agent Card and everything in it: interfaces, capabilities, skills, security schemes and signatures.

``SecurityScheme`` and ``OAuthFlows`` are proto oneofs: the JSON key names the variant
(``{"httpAuthSecurityScheme": {...}}``) and exactly one is set. The deprecated ``implicit`` and ``password`` flows
are accepted on input; relaykit never builds them itself.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_serializer, model_validator

from relaykit._model import A2AModel, Struct

__all__ = [
    "APIKeySecurityScheme",
    "AgentCapabilities",
    "AgentCard",
    "AgentCardSignature",
    "AgentExtension",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "AuthorizationCodeOAuthFlow",
    "ClientCredentialsOAuthFlow",
    "DeviceCodeOAuthFlow",
    "HTTPAuthSecurityScheme",
    "ImplicitOAuthFlow",
    "MutualTlsSecurityScheme",
    "OAuth2SecurityScheme",
    "OAuthFlows",
    "OpenIdConnectSecurityScheme",
    "PasswordOAuthFlow",
    "SecurityRequirement",
    "SecurityScheme",
    "StringList",
]

JSONRPC = "JSONRPC"
HTTP_JSON = "HTTP+JSON"
GRPC = "GRPC"
PROTOCOL_VERSION = "1.0"


def _exactly_one(model: A2AModel, names: tuple[str, ...], what: str) -> None:
    count = sum(getattr(model, n) is not None for n in names)
    if count != 1:
        keys = ", ".join(model.__class__.model_fields[n].alias or n for n in names)
        raise ValueError(f"{what} must carry exactly one of {keys} (it has {count})")


class AgentInterface(A2AModel):
    """One way to reach the agent: URL, binding (``JSONRPC``, ``HTTP+JSON``, ``GRPC``), version and tenant."""

    url: str
    protocol_binding: str
    tenant: str = ""
    protocol_version: str = PROTOCOL_VERSION

    @model_serializer(mode="wrap")
    def _required_always(self, handler: Any) -> dict[str, Any]:
        # protocolVersion is REQUIRED; the convenient "1.0" default must not make it vanish from the wire.
        out: dict[str, Any] = handler(self)
        out["protocolVersion"] = self.protocol_version
        return out


class AgentProvider(A2AModel):
    """The organisation behind the agent."""

    url: str
    organization: str


class AgentExtension(A2AModel):
    """A protocol extension the agent supports; ``required`` ones must be activated by the client."""

    uri: str = ""
    description: str = ""
    required: bool = False
    params: Struct | None = None


class AgentCapabilities(A2AModel):
    """Optional features; an absent capability counts as false."""

    streaming: bool | None = None
    push_notifications: bool | None = None
    extensions: list[AgentExtension] = Field(default_factory=list)
    extended_agent_card: bool | None = None


class StringList(A2AModel):
    """A list of strings (OAuth scopes in a security requirement)."""

    # The proto field is named ``list``, which would shadow the builtin inside the class body.
    items: list[str] = Field(default_factory=list, alias="list")


class SecurityRequirement(A2AModel):
    """Schemes needed together, by name, each with its scopes. Entries of a list of these are alternatives."""

    schemes: dict[str, StringList] = Field(default_factory=dict)


class AgentSkill(A2AModel):
    """Something the agent can do."""

    id: str
    name: str
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    examples: list[str] = Field(default_factory=list)
    input_modes: list[str] = Field(default_factory=list)
    output_modes: list[str] = Field(default_factory=list)
    security_requirements: list[SecurityRequirement] = Field(default_factory=list)


class AgentCardSignature(A2AModel):
    """A detached JWS over the canonical card (RFC 7515 + RFC 8785)."""

    protected: str
    signature: str
    header: Struct | None = None


# --- security schemes --------------------------------------------------------------------------------------


class APIKeySecurityScheme(A2AModel):
    """An API key in a query parameter, header or cookie."""

    description: str = ""
    location: str
    name: str


class HTTPAuthSecurityScheme(A2AModel):
    """HTTP authentication (RFC 7235), e.g. ``Bearer``."""

    description: str = ""
    scheme: str
    bearer_format: str = ""


class AuthorizationCodeOAuthFlow(A2AModel):
    """OAuth 2.0 authorization code flow."""

    authorization_url: str
    token_url: str
    refresh_url: str = ""
    scopes: dict[str, str] = Field(default_factory=dict)
    pkce_required: bool = False


class ClientCredentialsOAuthFlow(A2AModel):
    """OAuth 2.0 client credentials flow."""

    token_url: str
    refresh_url: str = ""
    scopes: dict[str, str] = Field(default_factory=dict)


class ImplicitOAuthFlow(A2AModel):
    """Deprecated OAuth 2.0 implicit flow (accepted, never emitted by relaykit itself)."""

    authorization_url: str = ""
    refresh_url: str = ""
    scopes: dict[str, str] = Field(default_factory=dict)


class PasswordOAuthFlow(A2AModel):
    """Deprecated OAuth 2.0 password flow (accepted, never emitted by relaykit itself)."""

    token_url: str = ""
    refresh_url: str = ""
    scopes: dict[str, str] = Field(default_factory=dict)


class DeviceCodeOAuthFlow(A2AModel):
    """OAuth 2.0 device authorization flow (RFC 8628)."""

    device_authorization_url: str
    token_url: str
    refresh_url: str = ""
    scopes: dict[str, str] = Field(default_factory=dict)


_FLOWS = ("authorization_code", "client_credentials", "implicit", "password", "device_code")


class OAuthFlows(A2AModel):
    """Exactly one OAuth flow."""

    authorization_code: AuthorizationCodeOAuthFlow | None = None
    client_credentials: ClientCredentialsOAuthFlow | None = None
    implicit: ImplicitOAuthFlow | None = None
    password: PasswordOAuthFlow | None = None
    device_code: DeviceCodeOAuthFlow | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        _exactly_one(self, _FLOWS, "OAuthFlows")
        return self


class OAuth2SecurityScheme(A2AModel):
    """OAuth 2.0 with its flow and optional RFC 8414 metadata URL."""

    description: str = ""
    flows: OAuthFlows
    oauth2_metadata_url: str = ""


class OpenIdConnectSecurityScheme(A2AModel):
    """OpenID Connect discovery."""

    description: str = ""
    open_id_connect_url: str


class MutualTlsSecurityScheme(A2AModel):
    """Mutual TLS."""

    description: str = ""


_SCHEMES = (
    "api_key_security_scheme",
    "http_auth_security_scheme",
    "oauth2_security_scheme",
    "open_id_connect_security_scheme",
    "mtls_security_scheme",
)


class SecurityScheme(A2AModel):
    """Exactly one security scheme, wrapped in a key naming its type.

    >>> SecurityScheme.bearer("JWT").to_json()
    b'{"httpAuthSecurityScheme":{"scheme":"Bearer","bearerFormat":"JWT"}}'
    """

    api_key_security_scheme: APIKeySecurityScheme | None = None
    http_auth_security_scheme: HTTPAuthSecurityScheme | None = None
    oauth2_security_scheme: OAuth2SecurityScheme | None = None
    open_id_connect_security_scheme: OpenIdConnectSecurityScheme | None = None
    mtls_security_scheme: MutualTlsSecurityScheme | None = None

    @model_validator(mode="after")
    def _one(self) -> Self:
        _exactly_one(self, _SCHEMES, "SecurityScheme")
        return self

    @classmethod
    def bearer(cls, bearer_format: str = "", description: str = "") -> SecurityScheme:
        """HTTP Bearer authentication."""
        return cls(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer", bearer_format=bearer_format, description=description
            )
        )

    @classmethod
    def api_key(cls, name: str, location: str = "header", description: str = "") -> SecurityScheme:
        """An API key in a header, query parameter or cookie."""
        return cls(api_key_security_scheme=APIKeySecurityScheme(name=name, location=location, description=description))


class AgentCard(A2AModel):
    """The agent's self-description, served at ``/.well-known/agent-card.json``.

    >>> card = AgentCard(name="Echo", description="Echoes text", version="1.0.0",
    ...                  skills=[AgentSkill(id="echo", name="Echo", description="Repeats", tags=["util"])])
    >>> card.capabilities.streaming is None
    True
    """

    name: str
    description: str = ""
    supported_interfaces: list[AgentInterface] = Field(default_factory=list)
    provider: AgentProvider | None = None
    version: str = ""
    documentation_url: str | None = None
    capabilities: AgentCapabilities = Field(default_factory=AgentCapabilities)
    security_schemes: dict[str, SecurityScheme] = Field(default_factory=dict)
    security_requirements: list[SecurityRequirement] = Field(default_factory=list)
    default_input_modes: list[str] = Field(default_factory=lambda: ["text/plain"])
    default_output_modes: list[str] = Field(default_factory=lambda: ["text/plain"])
    skills: list[AgentSkill] = Field(default_factory=list)
    signatures: list[AgentCardSignature] = Field(default_factory=list)
    icon_url: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_modes_read(cls, data: Any) -> Any:
        # A card's JSON always carries ``defaultInputModes`` (REQUIRED on the wire), and every card relaykit serves
        # says ``["text/plain"]`` when its author declared nothing: that exact value read in the wire's spelling (a
        # card's JSON, a copy of a served card) is the default, not a declaration, and is left unset (same value,
        # same output) so ``model_fields_set`` tells it apart from ``default_input_modes=[...]`` given in code. The
        # server's media-type check (``server._modes``) is on only for a declaration. One lookup per card read.
        if isinstance(data, dict) and data.get("defaultInputModes") == ["text/plain"]:
            data = {key: value for key, value in data.items() if key != "defaultInputModes"}
        return data

    @model_serializer(mode="wrap")
    def _required_always(self, handler: Any) -> dict[str, Any]:
        # REQUIRED card fields are emitted even when empty (the spec's canonical form for signing keeps them, and
        # clients index them without guards). The card is encoded once per change, so this costs nothing hot.
        out: dict[str, Any] = handler(self)
        out.setdefault("description", self.description)
        out.setdefault("supportedInterfaces", [])
        out.setdefault("version", self.version)
        out.setdefault("capabilities", {})
        out.setdefault("defaultInputModes", list(self.default_input_modes))
        out.setdefault("defaultOutputModes", list(self.default_output_modes))
        out.setdefault("skills", [])
        return out
