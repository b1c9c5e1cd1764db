"""The MRC 1.0 Wireshark dissector (a Lua plugin) shipped with mrcnet.

``python -m mrcnet.wireshark path`` prints where the plugin is, for a one-off load::

    tshark -X lua_script:$(python -m mrcnet.wireshark path) -r capture.pcap

and ``python -m mrcnet.wireshark install`` copies it to Wireshark's personal Lua plugin
directory. See docs/WIRESHARK.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PLUGIN_NAME = "mrc.lua"
DEFAULT_PLUGIN_DIR = Path("~/.local/lib/wireshark/plugins")


def plugin_path() -> Path:
    """The dissector shipped in the package (mrcnet/wireshark/mrc.lua)."""
    return Path(__file__).resolve().parent / PLUGIN_NAME


def personal_plugin_dir() -> Path:
    """Wireshark's personal Lua plugin directory.

    Asked of ``tshark -G folders`` when tshark is installed (it knows its platform's
    place); otherwise ~/.local/lib/wireshark/plugins, where Wireshark looks on Linux and
    macOS.
    """
    tshark = shutil.which("tshark")
    if tshark is not None:
        try:
            run = subprocess.run([tshark, "-G", "folders"], capture_output=True, text=True,
                                 timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            run = None
        if run is not None and run.returncode == 0:
            for line in run.stdout.splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Personal Lua Plugins" and value.strip():
                    return Path(value.strip())
    return Path(os.path.expanduser(DEFAULT_PLUGIN_DIR))


def install(dest_dir: Path | None = None) -> Path:
    """Copy the plugin into ``dest_dir`` (default :func:`personal_plugin_dir`), creating
    it if needed; returns the installed file."""
    target_dir = personal_plugin_dir() if dest_dir is None else dest_dir
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / PLUGIN_NAME
    shutil.copyfile(plugin_path(), target)
    return target
