"""tableside: the open table-side controller for casino table games.

Layers, named after the wire: ``drivers`` (transport, framing, device protocols, drivers) →
``rules`` (pure rule engine) → ``daemon`` (config, supervisor, MQTT publisher).
``simulators`` are device-side peers built on the same codecs.
"""

import sys

__all__ = ["__version__"]

# structlog.dev imports rich when it is installed (the demo extra brings it along) for pretty
# tracebacks on a terminal: 34 ms of import and some MiB that a daemon logging to journald never
# uses (tableside's renderer gets tracebacks already formatted). Hidden from structlog's first
# import unless stderr is a terminal; anything else may still import rich afterwards.
if "structlog" not in sys.modules and "rich" not in sys.modules and not sys.stderr.isatty():
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]

__version__ = "0.1.0"
