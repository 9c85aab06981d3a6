"""``Principal``: who is calling, as one stable id that owner isolation keys on.

Invariants:

* ``Principal.id`` is the owner key of every task, context, push config and subscription. It is built from what
  identifies the caller for its kind (issuer + subject for a JWT, the key's owner for an API key, the certificate
  subject for mutual TLS), never from a display name.
* The anonymous principal's id is ``"anonymous"`` (what tasks created without auth have always recorded). Every other
  id is ``KIND:…`` with a non-empty kind of ``[a-z0-9.-]``, so no authenticated principal can collide with anonymous,
  and principals of different kinds never collide with each other.
* Within a kind, ids are unambiguous: an issuer, when there is one, is escaped (``%`` and ``#``) and ends at the one
  ``#``; without an issuer the subject is escaped the same way, so ``(iss="a", sub="b")`` and ``(sub="a#b")`` differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ANONYMOUS", "ANONYMOUS_PRINCIPAL", "Principal"]

ANONYMOUS = "anonymous"
_KIND = re.compile(r"[a-z0-9][a-z0-9.-]*")


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("#", "%23")


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller (or the anonymous one): ``kind``, ``subject`` and, for tokens, ``issuer``.

    >>> Principal("jwt", "alice", issuer="https://idp.example").id
    'jwt:https://idp.example#alice'
    >>> Principal("api-key", "anonymous").id
    'api-key:anonymous'
    >>> ANONYMOUS_PRINCIPAL.id
    'anonymous'
    """

    kind: str
    subject: str
    issuer: str = ""
    # What the credential said (JWT claims, certificate fields); not part of the identity.
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.kind != ANONYMOUS and not _KIND.fullmatch(self.kind):
            raise ValueError(f"principal kind {self.kind!r} must match [a-z0-9][a-z0-9.-]*")
        if self.kind != ANONYMOUS and not self.subject:
            raise ValueError("an authenticated principal needs a non-empty subject")

    @property
    def authenticated(self) -> bool:
        """False only for the anonymous principal."""
        return self.kind != ANONYMOUS

    @property
    def id(self) -> str:
        """The stable owner key (see the module docstring)."""
        if self.kind == ANONYMOUS:
            return ANONYMOUS
        if self.issuer:
            return f"{self.kind}:{_escape(self.issuer)}#{self.subject}"
        return f"{self.kind}:{_escape(self.subject)}"


ANONYMOUS_PRINCIPAL = Principal(ANONYMOUS, "")
