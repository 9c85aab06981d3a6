"""Agents for ``test_input_modes.py``, served with ``relaykit serve tests/server/_modes_agents.py:NAME``.

Both ask first: a new task's first message ⇒ INPUT_REQUIRED "What else?"; the answer on that task ⇒ COMPLETED with
one artifact "N parts" (N: the parts of the answer).

* ``declared``: its card declares ``defaultInputModes`` ``text/plain``, ``application/json`` and a skill whose
  ``inputModes`` are ``image/*``;
* ``undeclared``: no card (relaykit derives one, whose ``defaultInputModes`` default to ``text/plain``).
"""

from relaykit import agent
from relaykit.types import AgentCard, AgentSkill

CARD = AgentCard(
    name="modes",
    description="Takes text, JSON and images.",
    version="1.0.0",
    default_input_modes=["text/plain", "application/json"],
    skills=[
        AgentSkill(id="look", name="Look", description="Looks at an image", tags=["image"], input_modes=["image/*"])
    ],
)


async def _ask(context):
    if context.task is None:
        context.requires_input("What else?")
    return f"{len(context.message.parts)} parts"


declared = agent(_ask, card=CARD)
undeclared = agent(_ask)
