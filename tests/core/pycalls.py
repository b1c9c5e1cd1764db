"""The Python functions a piece of code runs (a test of the hot path's calls counts
them: the figure the profiles of docs/PERFORMANCE.md give per round trip)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType


def python_calls(fn: Callable[[], object]) -> list[str]:
    """The qualified names of the Python functions ``fn()`` runs, in order (builtins and
    C functions are not listed)."""
    seen: list[str] = []

    def prof(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            seen.append(frame.f_code.co_qualname)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen
