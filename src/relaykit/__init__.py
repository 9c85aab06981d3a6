"""relaykit: A2A 1.0 agent servers and clients."""

__all__: list[str] = []
