"""The web inspector: look at any A2A agent in a browser — its card (with validation findings), chat, streams with
their SSE ids, tasks, actions (cancel, resubscribe, answer, push configs) and a raw request console.

The page is plain HTML/CSS/JS shipped in this package (no build step, no third-party front-end code); its server
side calls the agent through ``relaykit.client.Client``, so the browser needs no CORS and auth headers, transports
and versions work as they do for the client.

    relaykit inspect http://localhost:8000             # any agent, on http://127.0.0.1:8100/
    relaykit serve examples/echo.py --inspector         # this agent, at http://localhost:8000/inspector/

>>> from relaykit.inspector import create_inspector
>>> app = create_inspector("http://localhost:8000")
"""

from relaykit.inspector._app import MOUNT_PATH, create_inspector, inspector_routes

__all__ = ["MOUNT_PATH", "create_inspector", "inspector_routes"]
