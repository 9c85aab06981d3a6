"""``InputModes``: the media types an agent accepts in a message's parts, read once from its card; a part it does not
accept is refused with ``ContentTypeNotSupportedError`` (digest §6.1 "a Media Type provided in the request's
message.parts is not supported by the agent", §7 "check media types").

Rules:

* Accepted: the card's ``defaultInputModes`` plus every skill's ``inputModes``, and the same of a static extended
  card. A message names no skill, so a type any skill takes is a type the agent takes.
* Checked only when the agent declared its modes itself on its public card (``defaultInputModes`` given, or any
  skill's ``inputModes``). ``AgentCard`` defaults ``defaultInputModes`` to ``["text/plain"]`` because the field is
  REQUIRED on the wire, and ``build_card`` derives a card with that default for an agent that gives none: refusing
  by that default would start refusing every image or PDF sent to existing agents that never thought about modes.
  So the default card stays what it was on the wire (``text/plain``), and the check is on once the author says
  what the agent takes.
* What counts as said: ``default_input_modes=[...]`` given in code, whatever its value; in a card read from JSON
  (``AgentCard.from_json``, ``model_validate`` of wire data), any value but exactly ``["text/plain"]``. A card's
  JSON always has the field, and a card copied from a served one says ``["text/plain"]`` whether or not its author
  ever thought about modes, so ``AgentCard`` reads that exact value as the default (unset). A skill's
  ``inputModes`` are always a declaration (they are optional on the wire and empty by default).
* Only the public card turns the check on: an extended card (``--extended-card card.json``, ``extended_card=``)
  adds its modes to a public card's declaration, for every caller (a message does not say which card its sender
  read), but never starts the check by itself: what anonymous callers may send is what the public card announces.
* No matcher at all (``InputModes.of`` answers ``None``, and the handler does nothing per request) when nothing is
  declared, when the declared lists are empty, or when any of them accepts everything (``*/*``, ``*``).
* Only a part that carries a ``mediaType`` is checked (file, raw, url, data parts that name one): a text part without
  one is never refused, since many clients send text to any agent (tolerant in what we accept). The first part
  refused is named with its index; the check stops there, so it costs one dictionary lookup or two per part that
  names a media type and nothing for the others.
* Matching: case-insensitive, parameters after ``;`` ignored on both sides (declared ``application/json`` accepts
  ``application/json; charset=utf-8``), exact ``type/subtype``, or a wildcard ``type/*``. A declared mode without a
  ``/`` is a legacy 0.3-era token: ``file`` accepts any file part (``raw`` or ``url``) and ``data`` any data part,
  whatever their media type (0.3's part kinds, which is what those cards meant); ``text`` accepts text parts and any
  ``text/*`` media type; any other bare word (``image``, ``audio``) accepts that top-level type (``image/*``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from relaykit._card import AgentCard
from relaykit._errors import ContentTypeNotSupportedError
from relaykit._types import Part

__all__ = ["InputModes"]

SHOWN_MODES = 8  # declared modes listed in the error (the rest counted): an error stays short whatever the card says
SHOWN_CHARS = 64  # characters of one media type shown in the error (a client's value may be megabytes long)
_ANY = frozenset(("*/*", "*"))
_KINDS = frozenset(("file", "data"))  # 0.3 part kinds a legacy mode token may name ("text" is also a media type)


def _bounded(value: str) -> str:
    shown = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "..."
    return shown if shown.isprintable() else ascii(shown)


def _declared(card: AgentCard) -> bool:
    # ``model_fields_set``: the author gave ``defaultInputModes`` (in code, or in JSON a value other than the default:
    # see ``AgentCard._default_modes_read``), as opposed to the model's default; it survives ``model_copy``, which
    # ``build_card`` and the card signer use.
    return "default_input_modes" in card.model_fields_set or any(skill.input_modes for skill in card.skills)


def _modes(card: AgentCard) -> Iterable[str]:
    yield from card.default_input_modes
    for skill in card.skills:
        yield from skill.input_modes


class InputModes:
    """What a card's input modes accept, compiled once.

    >>> card = AgentCard(name="a", default_input_modes=["text/plain", "image/*"])
    >>> modes = InputModes.of(card)
    >>> modes.accepts(Part(raw=b"x", media_type="IMAGE/PNG"))
    True
    >>> modes.accepts(Part(raw=b"x", media_type="application/pdf"))
    False
    >>> InputModes.of(AgentCard(name="b")) is None  # nothing declared: every part is accepted
    True
    """

    __slots__ = ("_exact", "_kinds", "_listed", "_types")

    def __init__(self, modes: Iterable[str]) -> None:
        exact: set[str] = set()
        types: set[str] = set()
        kinds: set[str] = set()
        listed: dict[str, None] = {}
        for mode in modes:
            key = mode.partition(";")[0].strip().lower()
            if not key:
                continue
            listed.setdefault(mode.strip())
            main, slash, sub = key.partition("/")
            if not slash:
                if key in _KINDS:
                    kinds.add(key)
                else:
                    types.add(key)
                    if key == "text":
                        kinds.add("text")
            elif sub == "*":
                types.add(main)
            else:
                exact.add(key)
        self._exact = frozenset(exact)
        self._types = frozenset(types)
        self._kinds = frozenset(kinds)
        names = [_bounded(m) for m in listed]
        more = len(names) - SHOWN_MODES
        self._listed = ", ".join(names[:SHOWN_MODES]) + (f" and {more} more" if more > 0 else "")

    @classmethod
    def of(cls, card: AgentCard, extended: AgentCard | None = None) -> InputModes | None:
        """The matcher for an agent serving the public ``card`` (and ``extended``, its extended card when it has a
        fixed one), or ``None`` when every part is accepted (see the module's rules: only the public card's
        declaration turns the check on)."""
        if not _declared(card):
            return None
        cards = (card,) if extended is None else (card, extended)
        modes = [mode for each in cards for mode in _modes(each)]
        if any(mode.partition(";")[0].strip().lower() in _ANY for mode in modes):
            return None
        matcher = cls(modes)
        if not (matcher._exact or matcher._types or matcher._kinds):
            return None  # declared, but empty (or blank): the agent declares no input modes at all
        return matcher

    def accepts(self, part: Part) -> bool:
        """Whether ``part`` may be sent to this agent (a part without a media type always may)."""
        media_type = part.media_type
        if not media_type:
            return True
        key = media_type.partition(";")[0].strip().lower()
        if key in self._exact or key.partition("/")[0] in self._types:
            return True
        kinds = self._kinds
        if not kinds:
            return False
        kind = "text" if part.text is not None else "data" if part.data is not None else "file"
        return kind in kinds

    def check(self, parts: Sequence[Part]) -> None:
        """Raise ``ContentTypeNotSupportedError`` naming the first part of a message that this agent does not
        accept."""
        for index, part in enumerate(parts):
            if part.media_type and not self.accepts(part):
                shown = _bounded(part.media_type.strip())
                field = f"message.parts[{index}].mediaType"
                raise ContentTypeNotSupportedError(
                    f"message.parts[{index}]: media type {shown} is not accepted by this agent "
                    f"(accepted: {self._listed})",
                    field_violations=[(field, "not accepted by this agent")],
                    media_type=shown,
                )
