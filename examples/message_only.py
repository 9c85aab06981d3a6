"""Message only: text T ⇒ a bare Message (role agent, contextId set, no task) whose text contains T.

    relaykit serve examples/message_only.py
"""

from relaykit import Message, agent


@agent
async def reply(context) -> Message:  # "-> Message": reply without creating a task
    """Replies with a message, never a task."""
    return Message.agent(f"You said: {context.text}", context_id=context.context_id)
