"""Start N a2a-sdk 1.3.0 cluster-mode echo replicas (echo_agent.py) on one fresh PostgreSQL database, behind the same
round-robin TCP proxy as relaykit's bench/cluster.py, listening on PORT (bench only).

    bench/sdk_cluster/start.sh PORT [--replicas N | --no-proxy] [--pg postgresql://postgres@127.0.0.1:5432/test]
        [--pool-size N] [--poll-interval S]

Each run creates its own database (``sdkc_<hex>``, through the server at ``--pg``) and drops it when the launcher
gets SIGTERM/SIGINT, after the replicas have stopped. With ``--no-proxy`` the one replica listens on PORT itself, so
the harness reads that replica's CPU. Runs in the venv of bench/sdk_cluster/setup.sh (asyncpg comes with
``a2a-sdk[postgresql]``).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/: the proxy and the replica handling of relaykit's launcher
from cluster import HOST, front, stop_all, wait_ready  # noqa: E402

CARD = "/.well-known/agent-card.json"


def _with_database(dsn: str, name: str, driver: str = "postgresql") -> str:
    parts = urlsplit(dsn)
    return urlunsplit((driver, parts.netloc, "/" + name, parts.query, parts.fragment))


async def _create(admin: str, name: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _drop(admin: str, name: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        # FORCE: a replica killed after the 15 s grace may leave sessions behind.
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--no-proxy", action="store_true", help="one replica, listening on PORT itself")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test", help="server and admin database")
    p.add_argument("--poll-interval", type=float, default=None, help="event-stream polling, s (SDK default 0.5)")
    p.add_argument("--pool-size", type=int, default=None, help="per replica (default: SQLAlchemy's 5 + 10 overflow)")
    args = p.parse_args()
    if args.no_proxy and args.replicas != 1:
        p.error("--no-proxy needs --replicas 1")
    name = "sdkc_" + secrets.token_hex(4)
    db_url = _with_database(args.pg, name, driver="postgresql+asyncpg")
    ports = [args.port] if args.no_proxy else [args.port + 100 + i for i in range(args.replicas)]
    extra = [] if args.poll_interval is None else ["--poll-interval", str(args.poll_interval)]
    extra += [] if args.pool_size is None else ["--pool-size", str(args.pool_size)]
    asyncio.run(_create(args.pg, name))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # One after the other: the first replica creates the tables, the next ones find them.
        deadline = time.monotonic() + 60
        for port in ports:
            command = [sys.executable, str(HERE / "echo_agent.py"), str(port), "--db", db_url, *extra]
            procs.append(subprocess.Popen(command))
            wait_ready(port, procs[-1], deadline, path=CARD)
        print(f"sdk-cluster: {args.replicas} replica(s) {ports} behind {HOST}:{args.port} ({name})", flush=True)
        front(args.port, ports, procs, direct=args.no_proxy)
    finally:
        stop_all(procs)
        asyncio.run(_drop(args.pg, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
