"""Echo: any text T ⇒ a task, COMPLETED, with exactly one artifact whose only part is text T.

    relaykit serve examples/echo.py
"""

from relaykit import agent


@agent
async def echo(context):
    """Repeats your text back as an artifact."""
    return context.text
