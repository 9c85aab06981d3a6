"""``relaykit db upgrade``: create or migrate a store's schema explicitly, then print its version.

relaykit db upgrade --store postgresql://user@db.example.com/agents --namespace relaykit

Servers do the same on start (PostgreSQL under an advisory lock, so replicas may start together); running it
first lets a deployment migrate once, before rolling out, and see the version. Against PostgreSQL it is safe
while servers run on the namespace. Exit codes: 0 done, 1 the store refused or is unreachable, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

__all__ = ["add_db_parser", "run_db_upgrade"]


def add_db_parser(sub: Any) -> None:
    """Register ``relaykit db …``."""
    p = sub.add_parser("db", help="manage the store's schema")
    db_sub = p.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser("upgrade", help="create or migrate the store schema, then print its version")
    up.add_argument(
        "--store",
        default=None,
        help="postgresql://… | sqlite:///path.db | path.db (env RELAYKIT_STORE)",
    )
    up.add_argument("--namespace", default="relaykit", help="table prefix (default relaykit)")
    up.set_defaults(func=run_db_upgrade)


def run_db_upgrade(args: argparse.Namespace) -> int:
    """Migrate the schema of ``--store`` / ``--namespace``; print the outcome."""
    url = args.store or os.environ.get("RELAYKIT_STORE")
    if not url:
        print("relaykit db upgrade: no store given: pass --store URL or set RELAYKIT_STORE", file=sys.stderr)
        return 2
    if url.startswith(("postgresql://", "postgres://")):
        return _upgrade_postgres(url, args.namespace)
    from relaykit.backends._url import sqlite_path

    try:
        path = sqlite_path(url)
    except ValueError as exc:
        print(f"relaykit db upgrade: {exc}", file=sys.stderr)
        return 2
    if path is None:
        print(
            f"relaykit db upgrade: store {url!r} has no schema to upgrade (use postgresql://… or sqlite:///path.db)",
            file=sys.stderr,
        )
        return 2
    return _upgrade_sqlite(path, args.namespace)


def _upgrade_postgres(url: str, namespace: str) -> int:
    try:
        from relaykit.backends.postgres import redact, upgrade
    except ImportError as exc:
        print(f"relaykit db upgrade: the PostgreSQL store needs asyncpg ({exc})", file=sys.stderr)
        return 1
    try:
        found, now = asyncio.run(upgrade(url, namespace=namespace))
    except Exception as exc:
        print(f"relaykit db upgrade: {exc}", file=sys.stderr)
        return 1
    if found == 0:
        outcome = "created"
    elif found == now:
        outcome = "already current"
    else:
        outcome = f"migrated from version {found}"
    print(f"{redact(url)} namespace {namespace.lower()}: schema version {now} ({outcome})")
    return 0


def _upgrade_sqlite(path: str, namespace: str) -> int:
    from relaykit.backends.sqlite import SCHEMA_VERSION, SQLiteTaskStore

    async def run() -> str:
        store = SQLiteTaskStore(path, namespace=namespace)
        await store.start()
        await store.close()
        return store.path

    try:
        # Refused (StoreLockedError) while a server holds the file; migrates in one transaction otherwise.
        real = asyncio.run(run())
    except Exception as exc:
        print(f"relaykit db upgrade: {exc}", file=sys.stderr)
        return 1
    print(f"{real} namespace {namespace}: schema version {SCHEMA_VERSION}")
    return 0
