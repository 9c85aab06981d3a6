"""``relaykit chat``: a conversation with an agent, one line per turn, from a terminal or piped stdin.

Each line is a turn: streamed when the agent streams, sent otherwise; an INPUT_REQUIRED task is answered by the next
line, and the context carries over from turn to turn. A failed turn is reported and the conversation goes on.

The conversation ends at EOF (Ctrl-D: exit 0) or at Ctrl-C, at the prompt or during a turn (exit 130, as every
interrupted command). At the prompt the process waits in a blocking ``input()`` on the event loop's thread, where
asyncio's own SIGINT handler would only cancel the task once the line is finished, so ``read_line`` restores Python's
default handler around it: the first Ctrl-C ends the chat at once.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys

from relaykit._errors import A2AConnectionError, A2AError, A2AInsecureCredentialsError, A2ATimeoutError
from relaykit.cli._output import EXIT_INTERRUPTED, EXIT_OK, LiveView, report_error
from relaykit.client import Client
from relaykit.client._urls import redact_url

__all__ = ["chat", "read_line"]


async def chat(client: Client, args: argparse.Namespace) -> int:
    """Read lines until EOF, each one a turn; returns the exit code."""
    interactive = sys.stdin.isatty()
    card = client.card
    streaming = card is None or card.capabilities.streaming is not False
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        shown = redact_url(args.url)
        name = card.name if card is not None else shown
        print(f"Chatting with {name} at {shown}. One line per turn; Ctrl-D or Ctrl-C ends.", flush=True)
    view = LiveView(sys.stdout, chat=True)
    context_id: str | None = args.context
    waiting: str | None = None  # the task that asked for input: the next line answers it
    while True:
        try:
            line = read_line("you> " if interactive else "")
        except KeyboardInterrupt:
            print(flush=True)  # the shell's prompt starts on a line of its own
            return EXIT_INTERRUPTED
        if line is None:
            break
        text = line.strip()
        if not text:
            continue
        view.begin_turn()
        try:
            if streaming:
                async for event in client.stream(text, task_id=waiting, context_id=context_id):
                    view.show(event)
            else:
                view.show(await client.send(text, task_id=waiting, context_id=context_id))
        except (A2AConnectionError, A2ATimeoutError, A2AInsecureCredentialsError):
            raise  # every later turn would fail alike
        except A2AError as exc:
            # One failed turn does not end the conversation; the next line starts a fresh task.
            view.end()
            report_error(args, exc)
            waiting = None
            continue
        view.end()
        context_id = view.context_id or context_id
        waiting = view.task_id if view.state is not None and view.state.is_interrupted else None
    if interactive:
        print(flush=True)
    return EXIT_OK


def read_line(prompt: str) -> str | None:
    """One line of input, ``None`` at EOF; ``KeyboardInterrupt`` at Ctrl-C, as soon as it is pressed.

    A terminal gets a prompt (and line editing through ``input``)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if prompt:
            try:
                return input(prompt)
            except EOFError:
                return None
        line = sys.stdin.readline()
        return line if line else None
    finally:
        signal.signal(signal.SIGINT, previous)
