"""``relaykit card|send|get|list|cancel|subscribe|chat``: call an A2A agent from a shell.

    relaykit card http://localhost:8000
    relaykit send http://localhost:8000 "hello"
    relaykit send --stream http://localhost:8000 "5"
    relaykit send --json http://localhost:8000 "hello" | jq -r .task.id
    relaykit send --no-wait http://localhost:8000 "long job"; relaykit subscribe http://localhost:8000 TASK_ID
    relaykit list http://localhost:8000 --state working
    relaykit chat http://localhost:8000
    relaykit send https://agent.internal:8443 "hi" --ca ca.pem --cert me.crt --key me.key   # (mutual) TLS

URLs are shown with their userinfo and query values masked (``https://***@host/?key=***``), in errors and hints alike.

Output is for people by default; ``--json`` prints the result's ProtoJSON instead: one object for a unary result
(``send``: the SendMessageResponse, ``get``/``cancel``: the Task, ``list``: one ListTasksResponse holding every page,
``card``: the AgentCard), and JSON Lines (one StreamResponse per line) for ``send --stream`` and ``subscribe``.

Exit codes (the same for every command):

* 0: success;
* 1: an A2A error (its message on stderr, e.g. "Task not found"), or, for ``send`` and ``subscribe``, a task that
  ended FAILED or REJECTED (the outcome is still printed; scripts can test ``$?``);
* 2: a usage error (argparse: a missing argument, an unknown state, a malformed URL or header), or credentials
  refused because they would go without TLS to a host that is not loopback (``--insecure-credentials`` allows it);
* 3: the agent could not be reached (connection refused, DNS, timeout, a stream that could not be resumed);
* 130: interrupted (Ctrl-C).

Modules: this one holds the arguments, the parsers and the one-shot commands; ``_output`` what the commands print
(and the exit codes); ``_chat`` the ``chat`` conversation loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from relaykit._enums import TaskState
from relaykit._errors import A2AConnectionError, A2AError, A2AInsecureCredentialsError, A2ATimeoutError
from relaykit._requests import ListTasksResponse
from relaykit._types import Message, SendMessageResponse, Task
from relaykit.cli._args import add_credentials, request_headers, tls_options
from relaykit.cli._chat import chat
from relaykit.cli._output import (
    EXIT_A2A,
    EXIT_CONNECTION,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    LiveView,
    card_text,
    outcome,
    parts_text,
    print_json,
    print_task_table,
    report_error,
    task_details,
    task_summary,
)
from relaykit.client import Client, tls_verify
from relaykit.client._urls import redact_url

__all__ = ["add_client_parsers", "parse_state", "run_client"]

Command = Callable[[Client, argparse.Namespace], Awaitable[int]]

UNARY_TIMEOUT = 60.0  # seconds for get/list/cancel/card; send, streams and chat wait as long as the agent works
CONNECT_TIMEOUT = 10.0
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
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {redact_url(text)!r}")
    return url


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
    add_credentials(group)
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

    p = add("chat", chat, "talk with an agent, one line per turn (a terminal or piped stdin)", [common])
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
    headers = request_headers(args)
    try:
        # One CA bundle and client certificate for every binding: the HTTP client below (card, JSON-RPC, REST)
        # verifies with them, and the Client gets them for its gRPC channel.
        tls = tls_options(args)
        verify = tls_verify(**tls)
    except (argparse.ArgumentTypeError, OSError) as exc:  # OSError: ssl.SSLError too (not a PEM, wrong key)
        print(f"relaykit {args.command}: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    waits = args.command in ("send", "subscribe", "chat")
    read = args.timeout if args.timeout is not None else (None if waits else UNARY_TIMEOUT)
    timeout = httpx.Timeout(read, connect=min(CONNECT_TIMEOUT, args.timeout or CONNECT_TIMEOUT))
    options: dict[str, Any] = {"transports": (args.transport,)} if args.transport else {}
    if args.timeout is not None:
        options["stream_timeout"] = args.timeout
    command: Command = args.client_command
    async with httpx.AsyncClient(timeout=timeout, verify=verify) as http:
        client = Client(
            args.url,
            http=http,
            headers=headers,
            allow_insecure_credentials=args.insecure_credentials,
            **options,
            **tls,
        )
        try:
            if command is _card:
                # Not ``connect()``: a card with no interface this client speaks is still worth showing.
                await client.resolve_card()
            else:
                await client.connect()
            return await command(client, args)
        except A2AInsecureCredentialsError as exc:
            report_error(args, exc)
            return EXIT_USAGE
        except (A2AConnectionError, A2ATimeoutError) as exc:
            report_error(args, exc)
            return EXIT_CONNECTION
        except A2AError as exc:
            report_error(args, exc)
            return EXIT_A2A
        finally:
            await client.aclose()


# --- commands ----------------------------------------------------------------------------------------------


async def _card(client: Client, args: argparse.Namespace) -> int:
    card = client.card
    assert card is not None
    if args.json:
        print_json(card)
    else:
        print(card_text(card), flush=True)
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
        return outcome(args, view.task_id, view.state, view.status_message)
    result = await client.send(text, task_id=args.task, context_id=args.context, return_immediately=args.no_wait)
    if args.json:
        print_json(
            SendMessageResponse(task=result) if isinstance(result, Task) else SendMessageResponse(message=result)
        )
    elif isinstance(result, Message):
        print(f"message {result.message_id} (context {result.context_id})", flush=True)
        print(parts_text(result.parts), flush=True)
    else:
        print(task_summary(result), flush=True)
        if result.status.state.is_interrupted:
            _reply_hint(args, result.id)
    if isinstance(result, Task):
        return outcome(args, result.id, result.status.state, result.status.message)
    return EXIT_OK


def _reply_hint(args: argparse.Namespace, task_id: str) -> None:
    print(f"(answer with: relaykit send --task {task_id} {redact_url(args.url)} TEXT)", file=sys.stderr, flush=True)


async def _get(client: Client, args: argparse.Namespace) -> int:
    task = await client.get_task(args.task_id, history_length=args.history)
    if args.json:
        print_json(task)
    else:
        print(task_details(task), flush=True)
    return EXIT_OK


async def _list(client: Client, args: argparse.Namespace) -> int:
    tasks: list[Task] = []
    async for page in client.list_task_pages(context_id=args.context or "", state=args.state, page_size=args.page_size):
        tasks.extend(page.tasks)
    if args.json:
        print_json(ListTasksResponse(tasks=tasks, page_size=len(tasks), total_size=len(tasks)))
        return EXIT_OK
    if not tasks:
        print("no tasks", file=sys.stderr, flush=True)
        return EXIT_OK
    print_task_table(tasks)
    return EXIT_OK


async def _cancel(client: Client, args: argparse.Namespace) -> int:
    task = await client.cancel(args.task_id)
    if args.json:
        print_json(task)
    else:
        print(task_summary(task), flush=True)
    return EXIT_OK


async def _subscribe(client: Client, args: argparse.Namespace) -> int:
    view = LiveView(sys.stdout, as_json=args.json)
    async for event in client.subscribe(args.task_id):
        view.show(event)
    view.end()
    return outcome(args, view.task_id or args.task_id, view.state, view.status_message)
