"""A2A 0.3 as a codec in front of the one handler: 0.3 wire shapes in, the 1.0 models to the handler, 0.3 out.

No binding, engine, store or handler exists twice. The bindings detect a 0.3 request (the ``A2A-Version`` service
parameter absent or ``0.3``, the 1.0 rule; the 0.3 REST routes under ``/v1/``; the 0.3 gRPC service
``a2a.v1.A2AService``) and hand its decoding and encoding to this package; the client does the same for an interface
whose card says ``protocolVersion`` 0.x. Modules:

* ``_json``: 0.3 JSON objects (``kind``-tagged, lower-case enums) ⇄ 1.0 ProtoJSON dicts;
* ``_rpc``: the 0.3 JSON-RPC method table and each operation's params/result;
* ``_card``: the hybrid card (1.0 + 0.3 members) served, and 0.3 cards read by the client;
* ``_card_model``: a card's JSON as the 0.3 card model reads it (what an a2a-sdk 0.3 signature covers).

Invariant: every translation ends in (or starts from) the 1.0 models' own validation and encoding, so a 0.3 request
is checked by exactly the rules a 1.0 request is.
"""

from relaykit._v03._card import CARD_VERSION, card_in, card_json, card_merged, is_v03
from relaykit._v03._rpc import EXTENSIONS_HEADER, MARK, VERSION, push_body

__all__ = [
    "CARD_VERSION",
    "EXTENSIONS_HEADER",
    "MARK",
    "VERSION",
    "card_in",
    "card_json",
    "card_merged",
    "is_v03",
    "push_body",
]
