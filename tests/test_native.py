"""The compiled module is loaded in one place (mrcnet/native.py), and every C twin falls
back to its Python implementation with one warning when it is missing, or silently when
``MRCNET_NO_FASTPATH=1`` asks for Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_only_native_loads_the_compiled_module() -> None:
    users = [p.relative_to(ROOT) for p in (ROOT / "mrcnet").rglob("*.py")
             if "mrcnet._native" in p.read_text() and p.name != "native.py"]
    assert not users


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "default", "-c", code],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60, check=False)


def test_native_missing_module_warns_once_and_every_twin_falls_back() -> None:
    code = (
        "import sys, warnings\n"
        "sys.modules['mrcnet._native'] = None\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import mrcnet.native as n, mrcnet.wire.checksum as c, mrcnet.io.batch as b\n"
        "    import mrcnet.wire.icrc as i, mrcnet.wire.template as t\n"
        "print(n.HAVE_C, sum(issubclass(x.category, RuntimeWarning) for x in w),\n"
        "      c.fast_udp6_checksum is c.udp6_checksum, i.fast_icrc is i.py_icrc,\n"
        "      b.BatchIO.__name__, t.run_patcher())\n"
    )
    r = _run(code, {"MRCNET_NO_FASTPATH": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "1", "True", "True", "PyBatchIO", "None"]


def test_native_env_var_forces_python_without_warning() -> None:
    r = _run("import mrcnet.native as n, mrcnet.wire.parsed as p; "
             "print(n.HAVE_C, p.FrameParser().use_c)", {"MRCNET_NO_FASTPATH": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
    assert "RuntimeWarning" not in r.stderr
