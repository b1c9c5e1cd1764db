"""The compiled C twins (``mrcnet._native``, built with cffi from mrcnet/_csrc), loaded once.

Every module with a C twin (:mod:`mrcnet.wire.checksum`, :mod:`mrcnet.wire.template`,
:mod:`mrcnet.io.batch`, :mod:`mrcnet.core.rxlane`, ...) takes ``C``/``ffi`` from here and
never imports ``mrcnet._native`` itself, so the decision is made in one place:

- ``HAVE_C``: the C module is in use. Each module then binds its public names (for
  example :data:`mrcnet.wire.checksum.udp6_checksum`) to the C twin, else to the
  pure-Python one, which gives the same bytes and decisions.
- ``MRCNET_NO_FASTPATH=1`` forces the Python twins (no warning: it was asked for).
- A missing C module costs one ``RuntimeWarning``, at the first import of this module.

This module imports nothing but the standard library, so anything may import it.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any, Final

__all__ = ["HAVE_C", "NOT_BUILT", "C", "as_ptr", "c_field", "ffi"]

#: The cffi ``lib`` of the compiled module (None without it).
C: Any = None
#: Its ``ffi`` (None without it).
ffi: Any = None
#: True when ``MRCNET_NO_FASTPATH`` asks for the pure-Python twins.
FORCED_OFF: Final = os.environ.get("MRCNET_NO_FASTPATH", "") not in ("", "0")
#: The message of the RuntimeError a C-only class raises without the C module.
NOT_BUILT: Final = "mrcnet._native is not available"

if not FORCED_OFF:
    try:
        _mod = importlib.import_module("mrcnet._native")
        C, ffi = _mod.lib, _mod.ffi
    except ImportError as exc:  # the package works without it, only slower
        warnings.warn(
            f"mrcnet._native is not built ({exc}); using the pure-Python twins "
            "(several times slower per packet). Rebuild: pip install -e . (needs a C "
            "compiler and the Python headers, Debian: gcc python3-dev)",
            RuntimeWarning,
            stacklevel=2,
        )

#: True when the C twins are in use.
HAVE_C: bool = C is not None


def as_ptr(b: bytes | bytearray | memoryview) -> Any:
    """``b`` as a C ``uint8_t *`` argument: bytes pass as they are; writable or sliced
    buffers need a cdata view (no copy)."""
    return b if type(b) is bytes else ffi.from_buffer(b)


def c_field(name: str, kind: type = float, owner: str = "c") -> Any:
    """A property that is field ``name`` of the C struct the instance holds in attribute
    ``owner`` (a C twin's state behind its Python class's attribute names), read as
    ``kind``."""

    def get(self: Any) -> Any:
        return kind(getattr(getattr(self, owner), name))

    def put(self: Any, value: Any) -> None:
        setattr(getattr(self, owner), name, value)

    return property(get, put, doc=f"{name}, in C")
