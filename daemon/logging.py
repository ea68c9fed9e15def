"""structlog set-up: human-readable on a terminal, JSON lines for journald/log shippers."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    return structlog.PrintLogger(file=sys.stderr)


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    """Logs go to stderr, so stdout stays free for what a command prints."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # sys.stderr is looked up per logger, not bound once: it can be replaced (pytest does).
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
