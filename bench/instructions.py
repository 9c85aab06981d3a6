"""CPU instructions per request, counted by valgrind (repeatable on a loaded machine, unlike wall-clock figures).

The ASGI app is called in-process (no HTTP server, no sockets): a prepared scope, a receive that hands over the
body and then waits, a send that collects the answer. Each measurement runs the program twice under
``valgrind --tool=callgrind`` with the same warm-up and a different number of requests; the difference divided by the
extra requests is the cost of one request, start-up and warm-up cancel out.

    PYTHONPATH=src python bench/instructions.py                      # relaykit (bench/echo.py, memory store)
    PYTHONPATH=src python bench/instructions.py --app /work/shared/bench/peers/baseline/starlette_echo.py
    PYTHONPATH=src python bench/instructions.py --ops send --keep /tmp/send.out   # + a profile for callgrind_annotate
    PYTHONPATH=src python bench/instructions.py --opcodes send      # Python opcodes by function (no valgrind)

``--app PATH`` measures another ASGI app (a module with a global ``app`` speaking A2A 1.0 JSON-RPC, as the bare
Starlette echo does). Operations: ``send`` (blocking SendMessage), ``get`` (GetTask of a finished task), ``chunk`` (one
artifact chunk of a SendStreamingMessage: a 200-chunk stream minus a 100-chunk one, per chunk). Runs on uvloop when
installed, as ``relaykit serve`` does; ``PYTHONHASHSEED`` is fixed so runs compare.

``--opcodes OP`` (``send`` or ``get``) counts instead the Python opcodes each function executes per request
(``sys.settrace`` opcode events over 200 requests after the warm-up): where the interpreted work is, by function,
exactly and in a few seconds; what C code does (pydantic-core, the event loop) is not in it.

``--run`` (internal) is the measured program: ``--run OP COUNT``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_WARMUP = 300
_COLLECTED = re.compile(rb"Collected : (\d+)")


def _request(method: str, n: int, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode()


def _send_body(method: str, text: str, n: int) -> bytes:
    message = {"role": "ROLE_USER", "messageId": f"m-{n}", "parts": [{"text": text}]}
    return _request(method, n, {"message": message})


async def _call(app: Any, body: bytes) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"a2a-version", b"1.0"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    delivered = False
    done = asyncio.Event()
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    await app(scope, receive, send)
    done.set()
    return b"".join(chunks)


def _load(path: str | None) -> Any:
    if path is None:
        sys.path.insert(0, str(Path(__file__).parent))
        from echo import BenchEcho

        from relaykit.http import create_app

        return create_app(BenchEcho(), store="memory")
    spec = importlib.util.spec_from_file_location("peer_app", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def _task_id(answer: bytes) -> str:
    result = json.loads(answer)["result"]
    return str(result.get("task", result)["id"])


async def _run(path: str | None, op: str, count: int) -> None:
    app = _load(path)
    for i in range(_WARMUP):  # warm-up, and the lazy start of the app
        out = await _call(app, _send_body("SendMessage", "hello", i))
        assert b"COMPLETED" in out, out[:300]
    out = await _call(app, _send_body("SendStreamingMessage", "stream 5", _WARMUP))
    assert out.count(b"chunk ") == 5, out[-300:]
    task_id = _task_id(await _call(app, _send_body("SendMessage", "hello", _WARMUP + 1)))
    get = _request("GetTask", 1, {"id": task_id})
    for i in range(count):
        n = 1000 + i
        if op == "send":
            out = await _call(app, _send_body("SendMessage", "hello", n))
            assert b"COMPLETED" in out, out[:300]
        elif op == "get":
            out = await _call(app, get)
            assert task_id.encode() in out, out[:300]
        else:  # "stream:K"
            chunks = int(op.split(":")[1])
            out = await _call(app, _send_body("SendStreamingMessage", f"stream {chunks}", n))
            assert out.count(b"chunk ") == chunks, out[-300:]


def _opcodes(path: str | None, op: str, count: int = 200, top: int = 40) -> None:
    """Print the Python opcodes per request, in all and by function (self), for ``count`` requests after the warm-up."""
    import collections
    import types

    per_function: collections.Counter[tuple[str, int, str]] = collections.Counter()
    calls: collections.Counter[tuple[str, int, str]] = collections.Counter()

    def tracer(frame: types.FrameType, event: str, _arg: Any) -> Any:
        code = frame.f_code
        key = (code.co_filename, code.co_firstlineno, code.co_name)
        if event == "call":
            calls[key] += 1
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            per_function[key] += 1
        return tracer

    async def measured() -> None:
        app = _load(path)
        for i in range(_WARMUP):
            await _call(app, _send_body("SendMessage", "hello", i))
        task_id = _task_id(await _call(app, _send_body("SendMessage", "hello", _WARMUP)))
        get = _request("GetTask", 1, {"id": task_id})
        sys.settrace(tracer)
        try:
            for i in range(count):
                await _call(app, _send_body("SendMessage", "hello", 1000 + i) if op == "send" else get)
        finally:
            sys.settrace(None)

    _loop_run(measured())
    total = sum(per_function.values())
    print(f"{op}: {total / count:,.0f} Python opcodes and {sum(calls.values()) / count:,.0f} calls per request")
    for (file, line, name), n in per_function.most_common(top):
        print(f"{n / count:8.0f} {calls[(file, line, name)] / count:6.1f}  {file}:{line} {name}")


def _loop_run(main: Any) -> None:
    """Run ``main`` on uvloop when installed, as ``relaykit serve`` does."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        asyncio.run(main)
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)


def _instructions(path: str | None, op: str, count: int, keep: str | None) -> int:
    out_file = keep or os.path.join(tempfile.mkdtemp(), "callgrind.out")
    argv = [sys.executable, __file__, "--run", op, str(count)]
    if path is not None:
        argv += ["--app", path]
    env = dict(os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *argv],
        env=env,
        capture_output=True,
        check=True,
    )
    found = _COLLECTED.search(done.stderr)
    assert found is not None, done.stderr[-2000:]
    if keep is None:
        os.unlink(out_file)
    return int(found.group(1))


def _per_request(path: str | None, op: str, low: int, high: int, keep: str | None) -> float:
    base = _instructions(path, op, low, None)
    more = _instructions(path, op, high, keep)
    return (more - base) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", help="an ASGI app file (global `app`) instead of relaykit's echo")
    parser.add_argument("--ops", default="send,get,chunk", help="send, get, chunk (comma-separated)")
    parser.add_argument("--requests", type=int, default=200, help="extra requests measured (default 200)")
    parser.add_argument("--keep", help="keep the larger run's callgrind profile here (last op)")
    parser.add_argument("--opcodes", choices=["send", "get"], help="Python opcodes per function instead")
    parser.add_argument("--run", nargs=2, metavar=("OP", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run is not None:
        _loop_run(_run(args.app, args.run[0], int(args.run[1])))
        return
    if args.opcodes is not None:
        _opcodes(args.app, args.opcodes)
        return
    results: dict[str, float] = {}
    for op in args.ops.split(","):
        if op == "chunk":
            streams = max(args.requests // 20, 5)
            longer = _instructions(args.app, "stream:200", streams, args.keep)
            shorter = _instructions(args.app, "stream:100", streams, None)
            results[op] = (longer - shorter) / (streams * 100)
        else:
            results[op] = _per_request(args.app, op, 50, 50 + args.requests, args.keep)
        print(f"{op}: {results[op]:,.0f} instructions per {'chunk' if op == 'chunk' else 'request'}", flush=True)


if __name__ == "__main__":
    main()
