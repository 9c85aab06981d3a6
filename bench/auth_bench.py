"""Server CPU per blocking SendMessage with Bearer JWT authentication on and off, side by side in one run.

Two ``relaykit serve bench/echo.py --store memory`` processes, one with ``--auth-jwks`` (a JWKS served by this
script, RS256 tokens minted by it, ``--auth-issuer`` / ``--auth-audience`` checked), are driven alternately
(off, on, off, on, …) by the same load: ``--concurrency`` clients sending blocking SendMessage over JSON-RPC for
``--duration`` seconds. ``--concurrency`` tokens (one principal each, so the default per-principal quotas stay on)
are reused, as real clients reuse theirs until they expire. Server CPU is read from
``/proc/PID/stat`` (user + system) around each phase; the result is microseconds of server CPU per request, medians
over the rounds.

    python bench/auth_bench.py                       # 3 rounds x 5 s at 16 clients
    python bench/auth_bench.py --rounds 5 --duration 8
    python bench/auth_bench.py --same-bytes          # both servers receive the tokens; only one verifies them
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
from _procs import HOST, cpu_seconds, relaykit_serve, start_server
from cryptography.hazmat.primitives.asymmetric import rsa

AUDIENCE = "bench"
# Which token the next request sends: one count over the whole run, so every phase goes on cycling where the last one
# stopped. (Restarting at token 0 each phase made the distinct-token phases reuse tokens the server had verified a
# round earlier, and so measured cache hits, not the worst case they are meant to show.)
_TURN = itertools.count()


def _serve_jwks(key: Any) -> tuple[ThreadingHTTPServer, str]:
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    body = json.dumps({"keys": [{**jwk, "kid": "bench", "use": "sig"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((HOST, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{HOST}:{server.server_address[1]}"


async def _load(url: str, tokens: list[str] | None, concurrency: int, duration: float) -> int:
    headers = {"A2A-Version": "1.0"}
    done = 0
    stop = time.monotonic() + duration

    async def client() -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            while time.monotonic() < stop:
                message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
                extra = {"Authorization": f"Bearer {tokens[next(_TURN) % len(tokens)]}"} if tokens else None
                answer = await http.post("/", json=body, headers=extra)
                if answer.status_code != 200 or "error" in answer.json():
                    raise RuntimeError(f"request failed: {answer.status_code} {answer.text[:200]}")
                done += 1

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


def _phase(proc: subprocess.Popen[bytes], url: str, tokens: list[str] | None, args: argparse.Namespace) -> float:
    asyncio.run(_load(url, tokens, args.concurrency, args.warmup))
    before = cpu_seconds(proc.pid)
    count = asyncio.run(_load(url, tokens, args.concurrency, args.duration))
    return (cpu_seconds(proc.pid) - before) / count * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument(
        "--distinct-tokens",
        type=int,
        default=0,
        help="also measure N distinct tokens cycled (more than the server's verified-token cache holds: every "
        "request pays a signature check)",
    )
    p.add_argument(
        "--same-bytes",
        action="store_true",
        help="send the off server the same Authorization headers (it has no auth, so it ignores them): the ratio is "
        "then the cost of verifying a token alone, without the cost of carrying one",
    )
    args = p.parse_args()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks_server, idp = _serve_jwks(key)
    now = int(time.time())
    claims = {"iss": idp, "aud": AUDIENCE, "iat": now, "exp": now + 3600}
    # One principal per token: the per-principal request quota (200/s by default, docs/limits.md) stays in force,
    # as in production, and one bench principal sending a whole server's load would only measure its refusals.
    tokens = [
        jwt.encode({**claims, "sub": f"bench-{n}"}, key, algorithm="RS256", headers={"kid": "bench"})
        for n in range(args.concurrency)
    ]
    distinct = [
        jwt.encode({**claims, "sub": f"bench-{n}"}, key, algorithm="RS256", headers={"kid": "bench"})
        for n in range(args.distinct_tokens)
    ]
    off, off_url = start_server(relaykit_serve())
    on, on_url = start_server(
        relaykit_serve(*["--auth-jwks", idp + "/jwks.json", "--auth-issuer", idp, "--auth-audience", AUDIENCE])
    )
    results: dict[str, list[float]] = {"off": [], "on": [], "distinct": []}
    try:
        for n in range(args.rounds):
            results["off"].append(_phase(off, off_url, tokens if args.same_bytes else None, args))
            results["on"].append(_phase(on, on_url, tokens, args))
            line = f"round {n + 1}: off {results['off'][-1]:.0f} us/req, on {results['on'][-1]:.0f} us/req"
            if distinct:
                results["distinct"].append(_phase(on, on_url, distinct, args))
                line += f", on with distinct tokens {results['distinct'][-1]:.0f} us/req"
            print(line, flush=True)
    finally:
        for proc in (off, on):
            proc.terminate()
            proc.wait(10)
        jwks_server.shutdown()
    off_median, on_median = statistics.median(results["off"]), statistics.median(results["on"])
    print("| metric | JWT off | JWT on | on/off |")
    print("|---|---|---|---|")
    print(
        f"| SendMessage server CPU us/req (c={args.concurrency}, one token per client) | {off_median:.0f} | "
        f"{on_median:.0f} | {on_median / off_median:.2f}x |"
    )
    if distinct:
        worst = statistics.median(results["distinct"])
        print(
            f"| the same, {len(distinct)} distinct tokens cycled (a signature check per request) | {off_median:.0f} | "
            f"{worst:.0f} | {worst / off_median:.2f}x |"
        )


if __name__ == "__main__":
    main()
