"""relaykit's A2A client against real servers (a2a-sdk and relaykit, each a separate process).

This directory is a package on purpose: its modules import each other as ``client._procs`` etc. The name ``client``
shadows nothing (there is no top-level ``client`` module in the standard library or the installed packages; the
standard library's is ``http.client``), unlike ``tests/http`` (see the docstring of ``tests/http/conftest.py``).
"""
