"""The README's "Calling an agent" snippets run as written against ``relaykit serve examples/…``.

Each ```python block of that section names its server on its first line (``# relaykit serve examples/X.py``) and is
followed by a ```text block with what it prints. The test serves that example, runs the block as a separate Python
process (only ``http://localhost:8000`` is changed, to the test server's URL), and compares the output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support.servers import REPO_ROOT, ServerProcess, start_serve

README = REPO_ROOT / "README.md"
SECTION = "## Calling an agent"
RUN_TIMEOUT = 30.0


def _snippets() -> list[tuple[str, str, str]]:
    """(example file, code, expected output) for each python block of the section."""
    text = README.read_text()
    assert SECTION in text, "the README lost its 'Calling an agent' section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```\s*```text\n(.*?)```", section, re.S)
    assert len(blocks) >= 3, "each python snippet needs its ```text output block"
    out = []
    for code, expected in blocks:
        found = re.match(r"# relaykit serve (examples/\w+\.py)\n", code)
        assert found, f"a snippet does not say which server it needs:\n{code}"
        out.append((found.group(1), code, expected))
    return out


SNIPPETS = _snippets()


@pytest.fixture(scope="module")
def example_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    logs = tmp_path_factory.mktemp("readme-servers")
    started: dict[str, ServerProcess] = {}
    try:
        for example in sorted({example for example, _, _ in SNIPPETS}):
            started[example] = start_serve(example, logs)
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.mark.parametrize(("example", "code", "expected"), SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_snippet(example_servers: dict[str, ServerProcess], example: str, code: str, expected: str) -> None:
    assert "http://localhost:8000" in code
    program = code.replace("http://localhost:8000", example_servers[example].url)
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"the {example} snippet failed:\n{done.stderr}"
    assert done.stdout == expected
