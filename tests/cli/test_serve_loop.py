"""``relaykit serve`` runs on the event loop uvicorn itself would pick: uvloop when it is installed."""

import asyncio

import pytest
import uvicorn

from relaykit.cli._uvicorn import loop_factory as _loop_factory


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
