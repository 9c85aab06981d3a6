"""Helpers shared by the test suites (importable as ``support``: ``tests/`` is on ``sys.path`` because
``tests/conftest.py`` is not in a package).

* ``support.servers``: subprocess servers (``relaykit serve`` and any other command), free ports, replicas, and a
  round-robin TCP proxy for multi-replica tests.
* ``support.stalls``: ``loop_stalls()``, the event loop's stalls while a block runs.
"""
