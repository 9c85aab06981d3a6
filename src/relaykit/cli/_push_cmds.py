"""``relaykit push status``: delivery health of a task's push configs.

    relaykit push status http://localhost:8000 TASK_ID          # asks the server
    relaykit push status --store sqlite:///relaykit.db TASK_ID  # reads a SQLite store directly (read-only)

The first form calls relaykit's read-only endpoint ``GET {URL}/relaykit/push/status/{TASK_ID}`` (with
``A2A-Version: 1.0``, ``--tenant`` as a query parameter, and credentials given as for the client commands:
``-H NAME:VALUE``, ``--token``), so it sees exactly what the caller may see. The second opens the SQLite file
read-only, works whether or not a server is running on it, and shows the task's configs of every owner (it is an
operator's view: whoever can read the file can read everything in it).

Per config: notifications ``delivered``, failed attempts (``failures``, and how many in a row), ``pending`` ones,
``dead`` letters (given up on), the last success / failure times and the last error. ``--json`` prints the
endpoint's JSON. Exit codes as for the client commands: 0 ok, 1 an A2A error (e.g. task not found), 2 usage, 3 the
server could not be reached (or the store could not be read).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from typing import Any
from urllib.parse import quote

import httpx

from relaykit._errors import A2AError
from relaykit.backends._base import DeliveryHealth, from_epoch
from relaykit.backends._url import sqlite_path
from relaykit.cli._args import add_credentials, request_headers, tls_options
from relaykit.client import tls_verify
from relaykit.client._plaintext import guard
from relaykit.client._urls import redact_url, scrub
from relaykit.push._status import STATUS_PATH, status_json

__all__ = ["add_push_parser", "run_push_status"]

EXIT_OK, EXIT_A2A, EXIT_USAGE, EXIT_CONNECTION = 0, 1, 2, 3
TIMEOUT = 30.0


def add_push_parser(sub: Any) -> None:
    """Register ``relaykit push …``."""
    push = sub.add_parser("push", help="push notification tools")
    commands = push.add_subparsers(dest="push_command", required=True)
    status = commands.add_parser(
        "status",
        help="delivery health of a task's push configs",
        usage="relaykit push status [options] URL TASK_ID\n       relaykit push status [options] --store STORE TASK_ID",
        description="Delivery health of a task's push configs, from the server or from its SQLite store.",
    )
    status.add_argument("target", nargs="+", metavar="ARG", help="URL TASK_ID (or TASK_ID with --store)")
    status.add_argument("--store", default=None, help="read this SQLite store (sqlite:///path.db) instead")
    status.add_argument("--namespace", default="relaykit", help="table prefix of --store")
    status.add_argument("--tenant", default="", help="the task's tenant")
    status.add_argument("--json", action="store_true", help="print JSON")
    add_credentials(status.add_argument_group("connection (with URL)"))
    status.set_defaults(func=run_push_status)


def run_push_status(args: argparse.Namespace) -> int:
    """``relaykit push status``; returns the exit code."""
    if args.store is not None:
        if len(args.target) != 1:
            print("relaykit push status: with --store give only TASK_ID", file=sys.stderr)
            return EXIT_USAGE
        return _from_store(args, args.target[0])
    if len(args.target) != 2:
        print("relaykit push status: give URL TASK_ID (or --store STORE TASK_ID)", file=sys.stderr)
        return EXIT_USAGE
    return _from_server(args, args.target[0], args.target[1])


def _from_server(args: argparse.Namespace, url: str, task_id: str) -> int:
    headers = {"A2A-Version": "1.0", "Accept": "application/json", **request_headers(args)}
    if not url.startswith(("http://", "https://")):
        print(f"relaykit push status: {redact_url(url)!r} is not an http(s) URL", file=sys.stderr)
        return EXIT_USAGE
    try:
        verify = tls_verify(**tls_options(args))
    except (argparse.ArgumentTypeError, OSError) as exc:
        print(f"relaykit push status: {exc}", file=sys.stderr)
        return EXIT_USAGE
    endpoint = url.rstrip("/") + STATUS_PATH.format(task_id=quote(task_id, safe=""))
    # The client's rule (relaykit.client._plaintext): no credential in clear to a host that is not loopback.
    exposed = guard(endpoint, url[:8].lower() == "https://", allowed=args.insecure_credentials)
    if exposed is not None:
        try:
            exposed.check(headers)
        except A2AError as exc:
            print(f"relaykit push status: {exc.message}", file=sys.stderr)
            return EXIT_USAGE
    params = {"tenant": args.tenant} if args.tenant else None
    try:
        response = httpx.get(endpoint, headers=headers, params=params, timeout=TIMEOUT, verify=verify)
    except httpx.HTTPError as exc:
        print(f"relaykit push status: cannot reach {redact_url(url)}: {scrub(str(exc), url)}", file=sys.stderr)
        return EXIT_CONNECTION
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict):
        message = ""
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = str(body["error"].get("message", ""))
        if response.status_code == 404 and not message:
            message = f"{redact_url(url)} has no push status endpoint (not a relaykit server, or push is off)"
        print(f"relaykit push status: {message or f'HTTP {response.status_code}'}", file=sys.stderr)
        return EXIT_A2A
    _print(args, body)
    return EXIT_OK


def _from_store(args: argparse.Namespace, task_id: str) -> int:
    path = sqlite_path(args.store)
    if path is None:
        print("relaykit push status: --store reads SQLite stores only (sqlite:///path.db)", file=sys.stderr)
        return EXIT_USAGE
    if not os.path.isfile(path):
        print(f"relaykit push status: no such store file: {path}", file=sys.stderr)
        return EXIT_CONNECTION
    ns = args.namespace
    try:
        conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        print(f"relaykit push status: cannot open {path}: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    try:
        tenant_filter = " AND tenant = ?" if args.tenant else ""
        params: tuple[str, ...] = (task_id, args.tenant) if args.tenant else (task_id,)
        known = conn.execute(f"SELECT 1 FROM {ns}_tasks WHERE id = ?{tenant_filter}", params).fetchone()
        if known is None:
            print(f"relaykit push status: task {task_id} not found in {path}", file=sys.stderr)
            return EXIT_A2A
        rows: dict[str, DeliveryHealth] = {}
        for (body,) in conn.execute(
            f"SELECT body FROM {ns}_push_configs WHERE task_id = ?{tenant_filter} ORDER BY seq", params
        ):
            config = json.loads(body)
            rows[str(config.get("id", ""))] = DeliveryHealth(
                task_id, str(config.get("id", "")), url=config.get("url", "")
            )
        for row in conn.execute(
            f"SELECT config_id, url, delivered, failures, consecutive, last_success, last_failure, last_error "
            f"FROM {ns}_push_health WHERE task_id = ?{tenant_filter}",
            params,
        ):
            health = rows.setdefault(str(row[0]), DeliveryHealth(task_id, str(row[0])))
            health.url = health.url or str(row[1])
            health.delivered += int(row[2])
            health.failures += int(row[3])
            health.consecutive_failures = max(health.consecutive_failures, int(row[4]))
            health.last_success = max(filter(None, (health.last_success, from_epoch(row[5]))), default=None)
            health.last_failure = max(filter(None, (health.last_failure, from_epoch(row[6]))), default=None)
            health.last_error = str(row[7]) or health.last_error
        for config_id, pending, dead in conn.execute(
            f"SELECT config_id, SUM(dead_at IS NULL), SUM(dead_at IS NOT NULL) FROM {ns}_push_outbox "
            f"WHERE task_id = ?{tenant_filter} GROUP BY config_id",
            params,
        ):
            health = rows.setdefault(str(config_id), DeliveryHealth(task_id, str(config_id)))
            health.pending += int(pending)
            health.dead += int(dead)
    except sqlite3.Error as exc:
        print(f"relaykit push status: cannot read {path} (namespace {ns!r}): {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    finally:
        conn.close()
    _print(args, status_json(task_id, rows.values()))
    return EXIT_OK


def _print(args: argparse.Namespace, body: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(body, indent=2))
        return
    configs = body.get("configs", [])
    print(f"task {body.get('taskId', '')}: {len(configs)} push config(s)")
    for c in configs:
        print(f"  {c['configId']}  {c['url']}")
        in_a_row = f" ({c['consecutiveFailures']} in a row)" if c["consecutiveFailures"] else ""
        print(
            f"    delivered {c['delivered']}, failed attempts {c['failures']}{in_a_row}, "
            f"pending {c['pending']}, dead {c['dead']}"
        )
        if c["lastSuccess"]:
            print(f"    last success {c['lastSuccess']}")
        if c["lastFailure"]:
            print(f"    last failure {c['lastFailure']}: {c['lastError']}")
