"""``relaykit serve --metrics-port P``: the Prometheus exposition on a port of its own (scraped and parsed after one
request), and not on the A2A port unless ``--metrics`` asks for it there too."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from support.servers import free_port, start_serve


def test_metrics_on_a_separate_port(tmp_path: Path) -> None:
    port = free_port()
    server = start_serve("examples/echo.py", tmp_path, args=["--metrics-port", str(port)])
    try:
        with httpx.Client(timeout=10) as http:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hi"}]}},
            }
            sent = http.post(server.url + "/", json=body, headers={"A2A-Version": "1.0"})
            assert "result" in sent.json(), sent.text
            scrape = http.get(f"http://127.0.0.1:{port}/metrics")
            on_a2a_port = http.get(server.url + "/metrics")
            elsewhere = http.get(f"http://127.0.0.1:{port}/")
    finally:
        server.stop()
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
    }
    key = frozenset({"operation": "SendMessage", "binding": "jsonrpc", "outcome": "ok"}.items())
    assert samples[("a2a_server_requests_total", key)] == 1
    assert samples[("a2a_server_tasks", frozenset({("state", "COMPLETED")}))] == 1
    assert on_a2a_port.status_code == 404
    assert elsewhere.status_code == 404
