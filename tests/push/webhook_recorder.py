"""A webhook receiver process for the push tests: records every POST, answers as told.

    python3 webhook_recorder.py [--sdk] [--token T]

Binds 127.0.0.1 on a free port and prints ``PORT <n>`` as its first line. Endpoints:

* ``POST <any path>``: recorded (path, headers, exact body as base64, the status answered) and answered 200 ``{}``,
  unless failing: ``fail_first`` answers ``fail_status`` to the next N posts, ``fail_all`` to every post.
* ``GET /_records``: ``{"records": [...]}`` in arrival order; ``POST /_control`` (JSON) sets ``fail_first``,
  ``fail_all``, ``fail_status``, ``delay`` (seconds before answering); ``GET /_ready``: 200.

``--sdk``: "a receiver built with the official a2a-sdk": every body is parsed with the SDK's own types and JSON
parser (``google.protobuf.json_format.Parse`` into ``a2a.types.StreamResponse``, strict: an unknown field is an
error) and answered 400 if that fails; the record gets the payload kind the SDK saw. ``--token T``: requests whose
``X-A2A-Notification-Token`` (the SDK's header convention) is not T are answered 401.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn

# Run as a script (the push tests start it as a subprocess): make ``tests/`` importable for ``support``.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.asgi import lifespan, read_body, respond

STATE: dict[str, Any] = {"fail_first": 0, "fail_all": False, "fail_status": 503, "delay": 0.0, "records": []}


def _sdk_kind(body: bytes) -> tuple[str | None, str]:
    from a2a.types import StreamResponse
    from google.protobuf.json_format import Parse, ParseError

    try:
        message = Parse(body.decode("utf-8"), StreamResponse())
    except (ParseError, UnicodeDecodeError) as exc:
        return None, str(exc)
    return message.WhichOneof("payload"), ""


async def _send(send: Any, status: int, payload: Any) -> None:
    await respond(send, status, json.dumps(payload).encode())


def make_app(sdk: bool, token: str | None) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        path, method = scope["path"], scope["method"]
        body = await read_body(receive)
        if path == "/_ready":
            await _send(send, 200, {})
            return
        if path == "/_records":
            await _send(send, 200, {"records": STATE["records"]})
            return
        if path == "/_control":
            STATE.update(json.loads(body))
            await _send(send, 200, {})
            return
        if method != "POST":
            await _send(send, 405, {"error": "POST only"})
            return
        headers: dict[str, list[str]] = {}
        for key, value in scope["headers"]:
            headers.setdefault(key.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        record: dict[str, Any] = {
            "path": path,
            "headers": {k: v[0] for k, v in headers.items()},
            "body_b64": base64.b64encode(body).decode(),
            "at": time.time(),
        }
        status, answer = 200, {}
        if token is not None and headers.get("x-a2a-notification-token", [""])[0] != token:
            status, answer = 401, {"error": "bad X-A2A-Notification-Token"}
        elif sdk:
            kind, error = _sdk_kind(body)
            record["sdk_kind"] = kind
            if kind is None:
                status, answer = 400, {"error": f"not an a2a StreamResponse: {error}"}
        if status == 200:
            if STATE["fail_all"]:
                status, answer = STATE["fail_status"], {"error": "failing on purpose"}
            elif STATE["fail_first"] > 0:
                STATE["fail_first"] -= 1
                status, answer = STATE["fail_status"], {"error": "failing on purpose"}
        record["status"] = status
        STATE["records"].append(record)
        if STATE["delay"]:
            await asyncio.sleep(STATE["delay"])  # a slow receiver (the sender's timeout tests)
        await _send(send, status, answer)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sdk", action="store_true")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (else Nagle + delayed
    # ACK cost 40 ms per response).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(make_app(args.sdk, args.token), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    asyncio.run(server.serve(sockets=[sock]))
    sys.exit(0)


if __name__ == "__main__":
    main()
