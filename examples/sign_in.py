"""Sign in: in-task authorization (A2A §7.4). The agent needs a calendar token: without one it pauses the task in
AUTH_REQUIRED, saying what it needs; a follow-up whose request carries ``X-Calendar-Token`` completes it.

    relaykit serve examples/sign_in.py
"""

from relaykit import agent

TOKEN = "demo-token"  # a real agent checks the token with the calendar's issuer


@agent
async def calendar(context):
    """Reads your calendar, once you give it a token."""
    if context.call.headers.get("x-calendar-token") != TOKEN:
        context.requires_auth("Calendar access needed: send a token in X-Calendar-Token")
    return "3 meetings today"
