"""Ask: the first message ⇒ INPUT_REQUIRED with a question; the answer A on the same task ⇒ COMPLETED with A.

    relaykit serve examples/ask.py
"""

from relaykit import agent


@agent
async def ask(context):
    """Asks for your name, then greets you."""
    if context.task is None:
        context.requires_input("What is your name?")
    return f"Nice to meet you, {context.text}!"
