"""``relaykit card|send|get|list|cancel|subscribe|chat``: call an A2A agent from a shell.

    relaykit card http://localhost:8000
    relaykit send http://localhost:8000 "hello"
    relaykit send --stream http://localhost:8000 "5"
    relaykit send --json http://localhost:8000 "hello" | jq -r .task.id
    relaykit send --no-wait http://localhost:8000 "long job"; relaykit subscribe http://localhost:8000 TASK_ID
    relaykit list http://localhost:8000 --state working
    relaykit chat http://localhost:8000

Output is for people by default; ``--json`` prints the result's ProtoJSON instead: one object for a unary result
(``send``: the SendMessageResponse, ``get``/``cancel``: the Task, ``list``: one ListTasksResponse holding every page,
``card``: the AgentCard), and JSON Lines (one StreamResponse per line) for ``send --stream`` and ``subscribe``.

Exit codes (the same for every command):

* 0: success;
* 1: an A2A error (its message on stderr, e.g. "Task not found"), or, for ``send`` and ``subscribe``, a task that
  ended FAILED or REJECTED (the outcome is still printed; scripts can test ``$?``);
* 2: a usage error (argparse: a missing argument, an unknown state, a malformed URL or header);
* 3: the agent could not be reached (connection refused, DNS, timeout, a stream that could not be resumed);
* 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO
from urllib.parse import urlsplit

import httpx
import pydantic_core

from relaykit._card import AgentCard
from relaykit._errors import A2AClientError, A2AConnectionError, A2AError, A2ATimeoutError
from relaykit._model import format_timestamp
from relaykit._types import (
    ListTasksResponse,
    Message,
    Part,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from relaykit.client import CardResolver, Client

__all__ = ["add_client_parsers", "parse_state", "run_client"]

Event = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent
Command = Callable[[Client, argparse.Namespace], Awaitable[int]]

EXIT_OK, EXIT_A2A, EXIT_USAGE, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
UNARY_TIMEOUT = 60.0  # seconds for get/list/cancel/card; send, streams and chat wait as long as the agent works
CONNECT_TIMEOUT = 10.0
_FAILED = frozenset({TaskState.FAILED, TaskState.REJECTED})
_BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "http+json": "HTTP+JSON", "grpc": "GRPC"}


# --- argument types ----------------------------------------------------------------------------------------


def parse_state(text: str) -> TaskState:
    """``working``, ``WORKING``, ``TASK_STATE_WORKING`` (and ``input-required``, ``cancelled``) ⇒ ``TaskState``.

    >>> parse_state("input-required")
    <TaskState.INPUT_REQUIRED: 'TASK_STATE_INPUT_REQUIRED'>
    """
    key = text.strip().upper().replace("-", "_")
    if not key.startswith("TASK_STATE_"):
        key = "TASK_STATE_" + key
    if key == "TASK_STATE_CANCELLED":
        key = "TASK_STATE_CANCELED"
    known = {s.value: s for s in TaskState if s is not TaskState.UNSPECIFIED}
    if key not in known:
        names = ", ".join(s.name.lower() for s in known.values())
        raise argparse.ArgumentTypeError(f"unknown task state {text!r} (one of: {names})")
    return known[key]


def _url(text: str) -> str:
    url = text if "://" in text else "http://" + text
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    return url


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a header is NAME:VALUE, not {text!r}")
    return name.strip(), value.strip()


def _binding(text: str) -> str:
    binding = _BINDINGS.get(text.strip().lower())
    if binding is None:
        raise argparse.ArgumentTypeError(f"unknown transport {text!r} (jsonrpc, rest or grpc)")
    return binding


# --- parsers -----------------------------------------------------------------------------------------------


def add_client_parsers(sub: Any) -> None:
    """Add the client subcommands to ``relaykit``'s subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection")
    group.add_argument(
        "-H",
        "--header",
        action="append",
        type=_header,
        default=[],
        metavar="NAME:VALUE",
        help="send this HTTP header on every request (repeatable)",
    )
    group.add_argument("--token", default=None, help="bearer token (default: env RELAYKIT_TOKEN)")
    group.add_argument(
        "--transport",
        type=_binding,
        default=None,
        metavar="BINDING",
        help="use this binding only: jsonrpc, rest or grpc (default: the card's order, JSON-RPC first)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds to wait for an answer (default {UNARY_TIMEOUT:g}; "
        "send, streams and chat wait as long as the agent works)",
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print ProtoJSON (JSON Lines for streams)")

    def add(name: str, command: Command, help_text: str, parents: list[argparse.ArgumentParser]) -> Any:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=parents)
        p.set_defaults(func=run_client, client_command=command)
        p.add_argument("url", type=_url, metavar="URL", help="the agent's base URL (or its card's URL)")
        return p

    add("card", _card, "show an agent's card", [common, as_json])

    p = add("send", _send, "send a message (a task's outcome, or the agent's reply)", [common, as_json])
    p.add_argument("text", metavar="TEXT", help="the message text ('-' reads it from stdin)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--stream", action="store_true", help="show events as they arrive")
    mode.add_argument(
        "--no-wait", action="store_true", help="answer as soon as the task exists (returnImmediately), don't wait"
    )
    p.add_argument("--task", default=None, metavar="ID", help="continue this task (e.g. answer INPUT_REQUIRED)")
    p.add_argument("--context", default=None, metavar="ID", help="send within this context")

    p = add("get", _get, "show a task", [common, as_json])
    p.add_argument("task_id", metavar="TASK_ID")
    p.add_argument("--history", type=int, default=None, metavar="N", help="at most N history messages")

    p = add("list", _list, "list tasks, newest first", [common, as_json])
    p.add_argument("--state", type=parse_state, default=None, metavar="S", help="only tasks in this state")
    p.add_argument("--context", default=None, metavar="ID", help="only tasks of this context")
    p.add_argument("--page-size", type=int, default=None, metavar="N", help="tasks per request (all pages are read)")

    p = add("cancel", _cancel, "cancel a task", [common, as_json])
    p.add_argument("task_id", metavar="TASK_ID")

    p = add("subscribe", _subscribe, "follow a task's events until it ends", [common, as_json])
    p.add_argument("task_id", metavar="TASK_ID")

    p = add("chat", _chat, "talk with an agent, one line per turn (a terminal or piped stdin)", [common])
    p.add_argument("--context", default=None, metavar="ID", help="continue this context")


# --- running -----------------------------------------------------------------------------------------------


def run_client(args: argparse.Namespace) -> int:
    """Run one client subcommand; returns the exit code."""
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``relaykit list … | head``): stop quietly, and keep the interpreter's final flush
        # from complaining about the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


async def _run(args: argparse.Namespace) -> int:
    headers = dict(args.header)
    token = args.token or os.environ.get("RELAYKIT_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    waits = args.command in ("send", "subscribe", "chat")
    read = args.timeout if args.timeout is not None else (None if waits else UNARY_TIMEOUT)
    timeout = httpx.Timeout(read, connect=min(CONNECT_TIMEOUT, args.timeout or CONNECT_TIMEOUT))
    options: dict[str, Any] = {"transports": (args.transport,)} if args.transport else {}
    if args.timeout is not None:
        options["stream_timeout"] = args.timeout
    command: Command = args.client_command
    async with httpx.AsyncClient(timeout=timeout) as http:
        client = Client(args.url, http=http, headers=headers, **options)
        try:
            if command is _card:
                # Not ``connect()``: a card with no interface this client speaks is still worth showing.
                client.card = await CardResolver(http).get(args.url, headers=client.headers)
            else:
                await client.connect()
            return await command(client, args)
        except (A2AConnectionError, A2ATimeoutError) as exc:
            _error(args, exc)
            return EXIT_CONNECTION
        except A2AError as exc:
            _error(args, exc)
            return EXIT_A2A
        finally:
            await client.aclose()


def _error(args: argparse.Namespace, exc: A2AError) -> None:
    reason = "" if isinstance(exc, A2AClientError) else f" [{exc.reason}]"
    sys.stdout.flush()
    print(f"relaykit {args.command}: {exc.message}{reason}", file=sys.stderr, flush=True)


def _print_json(model: Any) -> None:
    sys.stdout.write(model.to_json().decode() + "\n")
    sys.stdout.flush()


def _outcome(args: argparse.Namespace, task_id: str, state: TaskState | None, message: Message | None) -> int:
    """Exit code for a followed task: 1 (and a line on stderr) when it ended FAILED or REJECTED."""
    if state not in _FAILED:
        return EXIT_OK
    assert state is not None
    reason = f": {message.text}" if message is not None and message.text else ""
    sys.stdout.flush()
    print(f"relaykit {args.command}: task {task_id} {state.name}{reason}", file=sys.stderr, flush=True)
    return EXIT_A2A


# --- commands ----------------------------------------------------------------------------------------------


async def _card(client: Client, args: argparse.Namespace) -> int:
    card = client.card
    assert card is not None
    if args.json:
        _print_json(card)
    else:
        print(_card_text(card), flush=True)
    return EXIT_OK


async def _send(client: Client, args: argparse.Namespace) -> int:
    text = sys.stdin.read().rstrip("\n") if args.text == "-" else args.text
    if args.stream:
        view = LiveView(sys.stdout, as_json=args.json)
        async for event in client.stream(text, task_id=args.task, context_id=args.context):
            view.show(event)
        view.end()
        if view.state is not None and view.state.is_interrupted and not args.json:
            _reply_hint(args, view.task_id)
        return _outcome(args, view.task_id, view.state, view.status_message)
    result = await client.send(text, task_id=args.task, context_id=args.context, return_immediately=args.no_wait)
    if args.json:
        _print_json(
            SendMessageResponse(task=result) if isinstance(result, Task) else SendMessageResponse(message=result)
        )
    elif isinstance(result, Message):
        print(f"message {result.message_id} (context {result.context_id})", flush=True)
        print(_parts_text(result.parts), flush=True)
    else:
        print(_task_summary(result), flush=True)
        if result.status.state.is_interrupted:
            _reply_hint(args, result.id)
    if isinstance(result, Task):
        return _outcome(args, result.id, result.status.state, result.status.message)
    return EXIT_OK


def _reply_hint(args: argparse.Namespace, task_id: str) -> None:
    print(f"(answer with: relaykit send --task {task_id} {args.url} TEXT)", file=sys.stderr, flush=True)


async def _get(client: Client, args: argparse.Namespace) -> int:
    task = await client.get_task(args.task_id, history_length=args.history)
    if args.json:
        _print_json(task)
    else:
        print(_task_details(task), flush=True)
    return EXIT_OK


async def _list(client: Client, args: argparse.Namespace) -> int:
    tasks: list[Task] = []
    async for page in client.list_task_pages(context_id=args.context or "", state=args.state, page_size=args.page_size):
        tasks.extend(page.tasks)
    if args.json:
        _print_json(ListTasksResponse(tasks=tasks, page_size=len(tasks), total_size=len(tasks)))
        return EXIT_OK
    if not tasks:
        print("no tasks", file=sys.stderr, flush=True)
        return EXIT_OK
    rows = [("TASK", "STATE", "CONTEXT", "UPDATED")]
    for task in tasks:
        stamp = format_timestamp(task.status.timestamp) if task.status.timestamp else "-"
        rows.append((task.id, task.status.state.name, task.context_id or "-", stamp))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    sys.stdout.flush()
    return EXIT_OK


async def _cancel(client: Client, args: argparse.Namespace) -> int:
    task = await client.cancel(args.task_id)
    if args.json:
        _print_json(task)
    else:
        print(_task_summary(task), flush=True)
    return EXIT_OK


async def _subscribe(client: Client, args: argparse.Namespace) -> int:
    view = LiveView(sys.stdout, as_json=args.json)
    async for event in client.subscribe(args.task_id):
        view.show(event)
    view.end()
    return _outcome(args, view.task_id or args.task_id, view.state, view.status_message)


async def _chat(client: Client, args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    card = client.card
    streaming = card is None or card.capabilities.streaming is not False
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        name = card.name if card is not None else args.url
        print(f"Chatting with {name} at {args.url}. One line per turn; Ctrl-D ends.", flush=True)
    view = LiveView(sys.stdout, chat=True)
    context_id: str | None = args.context
    waiting: str | None = None  # the task that asked for input: the next line answers it
    while True:
        line = _read_line("you> " if interactive else "")
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
        except (A2AConnectionError, A2ATimeoutError):
            raise
        except A2AError as exc:
            # One failed turn does not end the conversation; the next line starts a fresh task.
            view.end()
            _error(args, exc)
            waiting = None
            continue
        view.end()
        context_id = view.context_id or context_id
        waiting = view.task_id if view.state is not None and view.state.is_interrupted else None
    if interactive:
        print(flush=True)
    return EXIT_OK


def _read_line(prompt: str) -> str | None:
    """One line of input, ``None`` at EOF. A terminal gets a prompt (and line editing through ``input``)."""
    if prompt:
        try:
            return input(prompt)
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


# --- rendering ---------------------------------------------------------------------------------------------


class LiveView:
    """Prints a task's events as they arrive: status lines, artifact chunks as they stream, a final state line.

    Plain text that works without a terminal (every write is flushed, so a pipe sees events live); ``as_json``
    prints one StreamResponse per line instead; ``chat`` prints only what the agent says.
    """

    def __init__(self, out: TextIO, *, as_json: bool = False, chat: bool = False) -> None:
        self.out = out
        self.as_json = as_json
        self.chat = chat
        self.task_id = ""
        self.context_id = ""
        self.state: TaskState | None = None
        self.status_message: Message | None = None
        self.chunks = 0
        self._open_line = False  # an artifact's text was written without its final newline
        self._open_artifact = ""
        self._seen_parts: dict[str, int] = {}
        self._seen_messages: set[str] = set()

    def begin_turn(self) -> None:
        """A new chat turn: forget the previous turn's outcome, keep what was already shown."""
        self.state = None
        self.status_message = None
        self.task_id = ""

    def show(self, event: Event) -> None:
        """Print one event."""
        if self.as_json:
            self._note(event)
            _print_json(StreamResponse.of(event))
            return
        if isinstance(event, Message):
            self.context_id = event.context_id or self.context_id
            if self.chat:
                self._line("agent: " + _parts_text(event.parts))
            else:
                self._line(f"message {event.message_id} (context {event.context_id})")
                self._line(_parts_text(event.parts))
        elif isinstance(event, Task):
            self._snapshot(event)
        elif isinstance(event, TaskStatusUpdateEvent):
            self._note(event)
            self._status(event.status.state, event.status.message, line=not self.chat)
        else:
            self._note(event)
            self._artifact(event)

    def end(self) -> None:
        """Close an open line (an artifact whose last chunk never came)."""
        if self._open_line:
            self.out.write("\n")
            self.out.flush()
            self._open_line = False
            self._open_artifact = ""

    def _note(self, event: Event) -> None:
        if isinstance(event, Message):
            self.context_id = event.context_id or self.context_id
        elif isinstance(event, Task):
            self.task_id, self.context_id = event.id, event.context_id
            self.state, self.status_message = event.status.state, event.status.message
        elif isinstance(event, TaskStatusUpdateEvent):
            self.task_id, self.context_id = event.task_id, event.context_id
            self.state, self.status_message = event.status.state, event.status.message
        else:
            self.task_id, self.context_id = event.task_id, event.context_id
            self.chunks += 1

    def _snapshot(self, task: Task) -> None:
        self._note(task)
        if not self.chat:
            self._line(f"task {task.id}: {task.status.state.name} (context {task.context_id})")
        for artifact in task.artifacts:
            # Only what was not shown yet (a chat turn continuing a task, a snapshot after a resume).
            seen = self._seen_parts.get(artifact.artifact_id, 0)
            if len(artifact.parts) > seen:
                self._seen_parts[artifact.artifact_id] = len(artifact.parts)
                self._line(("agent: " if self.chat else "") + _parts_text(artifact.parts[seen:]))
        self._status(task.status.state, task.status.message, line=False)

    def _status(self, state: TaskState, message: Message | None, *, line: bool) -> None:
        new_message = message is not None and message.message_id not in self._seen_messages
        if message is not None:
            self._seen_messages.add(message.message_id)
        text = _parts_text(message.parts) if message is not None and new_message else ""
        if line or (self.chat and state in (*_FAILED, TaskState.CANCELED)):
            self._line(f"[{state.name}] {text}".rstrip())
        elif text:
            self._line(f"agent: {text}")

    def _artifact(self, event: TaskArtifactUpdateEvent) -> None:
        artifact = event.artifact
        key = artifact.artifact_id
        seen = self._seen_parts.get(key, 0)
        self._seen_parts[key] = seen + len(artifact.parts) if event.append else len(artifact.parts)
        continuing = self._open_line and self._open_artifact == key and event.append
        if not continuing:
            self.end()
            if self.chat:
                self.out.write("agent: ")
        self.out.write(_parts_text(artifact.parts))
        self._open_line, self._open_artifact = True, key
        if event.last_chunk:
            self.end()
        self.out.flush()

    def _line(self, text: str) -> None:
        self.end()
        self.out.write(text + "\n")
        self.out.flush()


def _part_text(part: Part) -> str:
    if part.text is not None:
        return part.text
    label = " ".join(x for x in (part.filename, part.media_type) if x)
    if part.raw is not None:
        return f"[file {label} {len(part.raw)} bytes]".replace("  ", " ")
    if part.url is not None:
        return f"[file {label} {part.url}]".replace("  ", " ")
    return pydantic_core.to_json(part.data).decode()


def _parts_text(parts: list[Part]) -> str:
    return "".join(_part_text(p) for p in parts)


def _task_summary(task: Task) -> str:
    lines = [f"task {task.id}: {task.status.state.name} (context {task.context_id})"]
    message = task.status.message
    if message is not None and _parts_text(message.parts):
        lines.append(f"agent: {_parts_text(message.parts)}")
    lines.extend(_parts_text(a.parts) for a in task.artifacts)
    return "\n".join(lines)


def _task_details(task: Task) -> str:
    stamp = format_timestamp(task.status.timestamp) if task.status.timestamp else ""
    lines = [
        f"task      {task.id}",
        f"context   {task.context_id}",
        f"state     {task.status.state.name}" + (f"  ({stamp})" if stamp else ""),
    ]
    if task.status.message is not None:
        lines.append(f"message   {_parts_text(task.status.message.parts)}")
    if task.history:
        lines.append("history")
        for message in task.history:
            lines.append(f"  {message.role.name.lower():<5}  {_parts_text(message.parts)}")
    if task.artifacts:
        lines.append("artifacts")
        for artifact in task.artifacts:
            lines.append(f"  {artifact.name or artifact.artifact_id}: {_parts_text(artifact.parts)}")
    return "\n".join(lines)


def _card_text(card: AgentCard) -> str:
    lines = [card.name + (f" {card.version}" if card.version else "")]
    if card.description:
        lines.append(card.description)
    if card.provider is not None:
        lines.append(f"provider: {card.provider.organization} ({card.provider.url})")
    lines.append("interfaces:")
    for interface in card.supported_interfaces:
        tenant = f" (tenant {interface.tenant})" if interface.tenant else ""
        lines.append(f"  {interface.protocol_binding:<10} {interface.url}  A2A {interface.protocol_version}{tenant}")
    caps = card.capabilities
    flags = [
        name
        for name, on in (
            ("streaming", caps.streaming),
            ("push notifications", caps.push_notifications),
            ("extended card", caps.extended_agent_card),
        )
        if on
    ]
    lines.append("capabilities: " + (", ".join(flags) or "none"))
    if card.security_schemes:
        lines.append("security: " + ", ".join(sorted(card.security_schemes)))
    if card.skills:
        lines.append("skills:")
        for skill in card.skills:
            tags = f" [{', '.join(skill.tags)}]" if skill.tags else ""
            lines.append(f"  {skill.id}: {skill.name}{tags}" + (f" - {skill.description}" if skill.description else ""))
    return "\n".join(lines)
