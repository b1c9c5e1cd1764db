"""The tools' shared command-line helpers: where they say to look for mrcd."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mrcnet import cliutil
from mrcnet.fabric import state


def test_state_root_agrees_with_the_fabric() -> None:
    assert cliutil.DEFAULT_FABRIC_STATE_ROOT == state.DEFAULT_STATE_ROOT


def test_not_running_names_the_fabrics_mrcd_sockets(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MRCD_SOCKET", raising=False)
    monkeypatch.setenv(cliutil.FABRIC_STATE_ENV, str(tmp_path))
    assert "sockets of the fabrics" not in cliutil.not_running(None)
    (tmp_path / "lab" / "mrcd").mkdir(parents=True)
    (tmp_path / "lab" / "mrcd" / "h9.sock").write_text("")  # not a socket: not listed
    path = tmp_path / "lab" / "mrcd" / "h0.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        text = cliutil.not_running(None)
    assert f"lab h0 {path}" in text, text
    assert "h9" not in text
    # a socket given (or from the environment) is the one named, nothing else
    assert "fabrics" not in cliutil.not_running("/nonexistent/x.sock")
