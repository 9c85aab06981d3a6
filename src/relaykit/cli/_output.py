"""What the client commands print, and the exit code they end with.

Results go to stdout (for people, or ProtoJSON with ``--json``), errors and failed outcomes to stderr, so a pipe
gets only results and a script can test ``$?``. Every write is flushed, so a pipe sees a stream's events live.
The exit codes are listed in ``_client_cmds``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

import pydantic_core

from relaykit._card import AgentCard
from relaykit._enums import TaskState
from relaykit._errors import A2AClientError, A2AError
from relaykit._model import format_timestamp
from relaykit._types import Message, Part, StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

__all__ = [
    "EXIT_A2A",
    "EXIT_CONNECTION",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "LiveView",
    "card_text",
    "outcome",
    "parts_text",
    "print_json",
    "print_task_table",
    "report_error",
    "task_details",
    "task_summary",
]

Event = Task | Message | TaskStatusUpdateEvent | TaskArtifactUpdateEvent

EXIT_OK, EXIT_A2A, EXIT_USAGE, EXIT_CONNECTION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
_FAILED = frozenset({TaskState.FAILED, TaskState.REJECTED})


# --- results and errors ------------------------------------------------------------------------------------


def report_error(args: argparse.Namespace, exc: A2AError) -> None:
    """The error on stderr, after whatever stdout holds: ``relaykit <command>: <message> [<reason>]``."""
    reason = "" if isinstance(exc, A2AClientError) else f" [{exc.reason}]"
    sys.stdout.flush()
    print(f"relaykit {args.command}: {_sentence_case(exc.message)}{reason}", file=sys.stderr, flush=True)


def _sentence_case(message: str) -> str:
    """A message as the rest of a ``prog: message`` line: its first letter in lower case ("Task not found" from
    a2a-sdk servers and relaykit's own default reads "task not found"), unless the first word is an acronym or a
    name in capitals ("HTTP 502", "JSON")."""
    if len(message) > 1 and message[0].isupper() and message[1].islower():
        return message[0].lower() + message[1:]
    return message


def print_json(model: Any) -> None:
    """``model``'s ProtoJSON, one line."""
    sys.stdout.write(model.to_json().decode() + "\n")
    sys.stdout.flush()


def outcome(args: argparse.Namespace, task_id: str, state: TaskState | None, message: Message | None) -> int:
    """Exit code for a followed task: 1 (and a line on stderr) when it ended FAILED or REJECTED."""
    if state not in _FAILED:
        return EXIT_OK
    assert state is not None
    reason = f": {message.text}" if message is not None and message.text else ""
    sys.stdout.flush()
    print(f"relaykit {args.command}: task {task_id} {state.name}{reason}", file=sys.stderr, flush=True)
    return EXIT_A2A


def print_task_table(tasks: list[Task]) -> None:
    """One line per task (id, state, context, last update), columns aligned, a header first."""
    rows = [("TASK", "STATE", "CONTEXT", "UPDATED")]
    for task in tasks:
        stamp = format_timestamp(task.status.timestamp) if task.status.timestamp else "-"
        rows.append((task.id, task.status.state.name, task.context_id or "-", stamp))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    sys.stdout.flush()


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
            print_json(StreamResponse.of(event))
            return
        if isinstance(event, Message):
            self.context_id = event.context_id or self.context_id
            if self.chat:
                self._line("agent: " + parts_text(event.parts))
            else:
                self._line(f"message {event.message_id} (context {event.context_id})")
                self._line(parts_text(event.parts))
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
                self._line(("agent: " if self.chat else "") + parts_text(artifact.parts[seen:]))
        self._status(task.status.state, task.status.message, line=False)

    def _status(self, state: TaskState, message: Message | None, *, line: bool) -> None:
        new_message = message is not None and message.message_id not in self._seen_messages
        if message is not None:
            self._seen_messages.add(message.message_id)
        text = parts_text(message.parts) if message is not None and new_message else ""
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
        self.out.write(parts_text(artifact.parts))
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


def parts_text(parts: list[Part]) -> str:
    return "".join(_part_text(p) for p in parts)


def task_summary(task: Task) -> str:
    lines = [f"task {task.id}: {task.status.state.name} (context {task.context_id})"]
    message = task.status.message
    if message is not None and parts_text(message.parts):
        lines.append(f"agent: {parts_text(message.parts)}")
    lines.extend(parts_text(a.parts) for a in task.artifacts)
    return "\n".join(lines)


def task_details(task: Task) -> str:
    stamp = format_timestamp(task.status.timestamp) if task.status.timestamp else ""
    lines = [
        f"task      {task.id}",
        f"context   {task.context_id}",
        f"state     {task.status.state.name}" + (f"  ({stamp})" if stamp else ""),
    ]
    if task.status.message is not None:
        lines.append(f"message   {parts_text(task.status.message.parts)}")
    if task.history:
        lines.append("history")
        for message in task.history:
            lines.append(f"  {message.role.name.lower():<5}  {parts_text(message.parts)}")
    if task.artifacts:
        lines.append("artifacts")
        for artifact in task.artifacts:
            lines.append(f"  {artifact.name or artifact.artifact_id}: {parts_text(artifact.parts)}")
    return "\n".join(lines)


def card_text(card: AgentCard) -> str:
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
