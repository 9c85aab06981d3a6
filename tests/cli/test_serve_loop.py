"""``relaykit serve`` runs on the event loop uvicorn itself would pick (uvloop when it is installed), with the
cyclic garbage collector tuned for a server."""

import asyncio
from pathlib import Path

import pytest
import uvicorn
from support.servers import start_serve, stop_all

from relaykit import Message, Task
from relaykit.cli._uvicorn import loop_factory as _loop_factory
from relaykit.client import Client


def test_serve_uses_uvicorns_loop_choice() -> None:
    pytest.importorskip("uvloop")
    config = uvicorn.Config(app=None)  # loop="auto", as relaykit serve configures it
    factory = _loop_factory(config)
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        loop_type = runner.run(_running_loop_type())
    assert loop_type.__module__.startswith("uvloop")


async def _running_loop_type() -> type:
    return type(asyncio.get_running_loop())


GC_AGENT = """
import gc

from relaykit import agent


@agent
async def report(text: str) -> str:
    return f"{gc.get_threshold()[0]} {gc.get_freeze_count()}"
"""


def test_serve_freezes_its_startup_heap_and_collects_young_objects_at_ten_thousand(tmp_path: Path) -> None:
    """README "Deploying": the served process tunes the cyclic collector once started (why: bench/README.md)."""
    target = tmp_path / "gc_agent.py"
    target.write_text(GC_AGENT)
    server = start_serve(str(target), tmp_path, cwd=tmp_path)
    try:
        threshold, frozen = asyncio.run(_ask(server.url)).split()
    finally:
        stop_all([server])
    assert int(threshold) == 10_000
    assert int(frozen) > 10_000  # the modules, schemas and app made at startup


async def _ask(url: str) -> str:
    async with asyncio.timeout(30), Client(url) as client:
        reply = await client.send("gc?")
    assert isinstance(reply, Message | Task)
    return reply.text if isinstance(reply, Message) else reply.artifacts[0].text_content
