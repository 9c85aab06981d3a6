"""Fixtures of the telemetry tests (the helpers are in ``otel_helpers``)."""

from __future__ import annotations

import pytest
from otel_helpers import Spans, new_spans


@pytest.fixture
def spans() -> Spans:
    """An SDK tracer provider of the test's own with an in-memory exporter."""
    return new_spans()
