"""``APIKeyAuthenticator``: an API key in a header (``X-API-Key``), checked against a table of owners.

Invariants:

* Only SHA-256 digests of keys are kept in memory: plain keys from a file or a mapping are hashed on load, and
  ``sha256:HEX`` entries are taken as they are (so the file need not hold a key at all).
* A presented key is hashed and its digest compared with every stored digest by ``hmac.compare_digest``, without
  stopping at a match: the time taken does not depend on how much of any stored secret a guess got right.
* The principal is ``api-key:<owner>``, the owner named in the file; two keys of one owner are one principal.

File format (``--api-keys FILE``): one entry a line, ``PRINCIPAL KEY`` or ``PRINCIPAL sha256:HEX``; blank lines and
``#`` comments (a line starting with ``#``, or a third field starting with ``#``) are ignored. The ``sha256:`` prefix
is matched in any case (``SHA256:`` too), so a file meant to hold digests never holds a working key by a typo; a
UTF-8 byte order mark is dropped. One key given to two owners is refused: whoever holds it would act as the last.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from pathlib import Path

from relaykit._card import SecurityScheme
from relaykit._errors import AuthenticationRequiredError
from relaykit._principal import Principal
from relaykit.auth._gate import AuthRequest

__all__ = ["APIKeyAuthenticator", "load_api_keys"]

_HEX = re.compile(r"[0-9a-fA-F]{64}")


def load_api_keys(path: str | Path) -> dict[bytes, str]:
    """The digest → owner table of an API key file (see the module docstring); ``ValueError`` names a bad line."""
    table: dict[bytes, str] = {}
    try:
        # utf-8-sig: an editor's byte order mark would otherwise become part of the first owner's name.
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) > 2 and parts[2].startswith("#"):
            parts = parts[:2]
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected 'PRINCIPAL KEY' or 'PRINCIPAL sha256:HEX'")
        owner, key = parts
        _add(table, _digest_entry(key, f"{path}:{number}"), owner, f"{path}:{number}")
    if not table:
        raise ValueError(f"{path} holds no API key")
    return table


def _add(table: dict[bytes, str], digest: bytes, owner: str, where: str) -> None:
    known = table.get(digest)
    if known is not None and known != owner:
        raise ValueError(f"{where}: this key is already given to {known!r}; one key must name one owner")
    table[digest] = owner


def _digest_entry(key: str, where: str) -> bytes:
    if key[:7].lower() == "sha256:":
        hexed = key[len("sha256:") :]
        if not _HEX.fullmatch(hexed):
            raise ValueError(f"{where}: sha256: must be followed by 64 hex digits")
        return bytes.fromhex(hexed)
    return hashlib.sha256(key.encode()).digest()


class APIKeyAuthenticator:
    """API keys in a header, from a file (``load_api_keys``) or a ``{owner: key}`` mapping.

    >>> auth = APIKeyAuthenticator({"alice": "s3cret", "bob": "sha256:" + "0" * 64})
    >>> auth.security_scheme.to_json()
    b'{"apiKeySecurityScheme":{"location":"header","name":"X-API-Key"}}'
    """

    hint = "send an X-API-Key header"

    def __init__(
        self,
        keys: Mapping[str, str] | str | Path,
        *,
        header: str = "X-API-Key",
        scheme_name: str = "apiKey",
    ) -> None:
        if isinstance(keys, str | Path):
            self._table = load_api_keys(keys)
        else:
            self._table = {}
            for owner, key in keys.items():
                where = f"key of {owner!r}"
                _add(self._table, _digest_entry(key, where), owner, where)
        self.header = header
        self._lookup = header.lower()
        self.scheme_name = scheme_name
        self.hint = f"send an {header} header"

    @property
    def security_scheme(self) -> SecurityScheme:
        """``apiKeySecurityScheme`` in the header."""
        return SecurityScheme.api_key(self.header, "header")

    @property
    def challenge(self) -> str:
        """Not an RFC 7235 scheme, but tells a client what to send."""
        return f'APIKey realm="a2a", header="{self.header}"'

    async def authenticate(self, request: AuthRequest) -> Principal | None:
        """``api-key:<owner>`` for a known key; None without the header."""
        key = request.headers.get(self._lookup)
        if key is None:
            return None
        digest = hashlib.sha256(key.strip().encode()).digest()
        owner: str | None = None
        for stored, name in self._table.items():
            if hmac.compare_digest(stored, digest):
                owner = name
        if owner is None:
            raise AuthenticationRequiredError("invalid API key")
        return Principal("api-key", owner)

    async def start(self) -> None:
        """Nothing to fetch."""

    async def close(self) -> None:
        """Nothing to close."""
