"""URLs as the client shows them and as it sends them: credentials a URL carries never reach a message.

Rules:

* ``redact_url`` is how every URL appears in an exception message, a CLI line or a repr: its userinfo (user name
  too: ``https://TOKEN@host`` is a common way to pass a token) becomes ``***``, every query value ``***`` (an API key
  may travel as ``?api_key=…``, which a card's ``apiKeySecurityScheme`` with location ``query`` asks for), and a
  fragment ``***``. Scheme, host, port, path and query names stay: they are what one needs to see which agent failed.
* ``scrub`` applies that to text the client did not write (an httpx or grpc error message quoting the URL or the
  gRPC target) and removes the userinfo of the URLs the call used (raw and percent-decoded, followed by ``@``) from
  the rest of it, e.g. grpc's "errors resolving user:pw@host:port".
* ``sendable`` splits ``https://user:pw@host/`` into the URL without userinfo and ``httpx.BasicAuth(user, pw)``:
  what httpx puts on the wire for the URL as given (the request line never carries userinfo; httpx turns it into
  that Basic ``Authorization`` header), while httpx's ``HTTP Request: POST <url>`` log line and the ``repr`` of the
  request an exception carries no longer show the password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

__all__ = ["redact_url", "scrub", "sendable"]

_MASK = "***"
# A URL inside free text: a scheme, then everything up to white space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """``url`` without what may be a credential: userinfo, query values and fragment masked.

    >>> redact_url("https://user:secret@agent.example:8443/a2a?api_key=k1&tenant=t#frag")
    'https://***@agent.example:8443/a2a?api_key=***&tenant=***#***'
    >>> redact_url("user:secret@agent.example:50051")
    '***@agent.example:50051'
    """
    if "://" not in url:
        # gRPC's bare ``host:port`` (a userinfo there is not a URL's, but it is shown the same way).
        _, at, rest = url.rpartition("@")
        return f"{_MASK}@{rest}" if at else url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_MASK}@{netloc.rpartition('@')[2]}"
    query = "&".join(_mask_value(pair) for pair in parts.query.split("&")) if parts.query else ""
    fragment = _MASK if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _mask_value(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    return f"{name}={_MASK}" if eq else name


def scrub(text: str, *urls: str) -> str:
    """``text`` with every URL in it redacted, and the userinfo of ``urls`` (raw and decoded) removed anywhere.

    >>> scrub("errors resolving u:pw@host:1: lookup failed for u:pw@host:1", "u:pw@host:1")
    'errors resolving ***@host:1: lookup failed for ***@host:1'
    """
    text = _URL_IN_TEXT.sub(lambda found: redact_url(found.group(0)), text)
    for url in urls:
        userinfo = _userinfo(url)
        if userinfo:
            # Only as ``userinfo@``: a short user name alone could be any word of the message.
            for secret in {userinfo, unquote(userinfo)}:
                text = text.replace(secret + "@", _MASK + "@")
    return text


def _userinfo(url: str) -> str:
    authority = url.partition("://")[2] if "://" in url else url
    authority = authority.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return authority.rpartition("@")[0]


def sendable(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """``url`` without its userinfo, and the Basic auth httpx would have made of it (``None``: no userinfo).

    >>> sendable("http://127.0.0.1:8000/")
    ('http://127.0.0.1:8000/', None)
    """
    if "@" not in url:
        return url, None
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None  # httpx refuses it with its own error; that error is scrubbed where it is reported
    if "@" not in parts.netloc:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    # httpx reads the userinfo percent-decoded (``httpx.URL.username`` / ``.password``): the same header results.
    auth = httpx.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
    return urlunsplit(parts._replace(netloc=host)), auth
