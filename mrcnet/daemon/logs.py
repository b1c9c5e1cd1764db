"""structlog setup for mrcd: console (humans) or JSON lines (machines), one level knob."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["setup_logging"]


def setup_logging(fmt: str = "console", level: str = "info") -> None:
    """Configure structlog process-wide; logs go to stderr."""
    lvl = logging.getLevelName(level.upper())
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
