"""The composition root: ``create_app`` is ``assemble`` plus the HTTP app, option for option.

``create_app`` passes its options on to ``assemble`` by name, so the two signatures must agree: every option of
``assemble`` is one of ``create_app``'s with the same default and type, and ``create_app`` adds only HTTP ones.
"""

from __future__ import annotations

import inspect

from relaykit import agent
from relaykit.assembly import A2AServer, assemble
from relaykit.http import create_app

HTTP_ONLY = {"max_body", "keepalive", "inspector"}


@agent
async def echo(context):  # type: ignore[no-untyped-def]
    """Echoes text."""
    return context.text


def test_create_app_takes_assembles_options_and_only_http_ones_more() -> None:
    app_params = dict(inspect.signature(create_app).parameters)
    assembly_params = dict(inspect.signature(assemble).parameters)
    assert set(app_params) - set(assembly_params) == HTTP_ONLY
    assert set(assembly_params) <= set(app_params)
    for name, param in assembly_params.items():
        other = app_params[name]
        assert (other.kind, other.default, other.annotation) == (param.kind, param.default, param.annotation), name


def test_the_app_serves_the_assembly_it_was_given_options_for() -> None:
    app = create_app(echo, grace=1.5, retention=60.0, push=False, public_url="http://agent.example/a2a")
    server = app.state.relaykit
    assert isinstance(server, A2AServer)
    assert (server.grace, server.retention, server.push_sender) == (1.5, 60.0, None)
    assert server.handler.card.supported_interfaces[1].url == "http://agent.example/a2a"
