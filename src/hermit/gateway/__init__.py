"""The gateway: Hermit as a long-running local service (agents, channels, the bus, the web chat)."""
