"""tableside: the open table-side controller for casino table games.

Layers, named after the wire: ``drivers`` (transport, framing, device protocols, drivers) →
``rules`` (pure rule engine) → ``daemon`` (config, supervisor, MQTT publisher).
``simulators`` are device-side peers built on the same codecs.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
