"""``python -m mrcnet.wireshark {path,install}``: find or install the MRC dissector."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mrcnet.wireshark import install, personal_plugin_dir, plugin_path

_EPILOG = """\
examples:
  tshark -X lua_script:$(python -m mrcnet.wireshark path) -r capture.pcap
  tshark -X lua_script:$(python -m mrcnet.wireshark path) -r capture.pcap \\
      -Y 'mrc.bth.opcode == 0xdc' -T fields -e mrc.seth.cack_psn -e mrc.seth.sack_bitmap
  python -m mrcnet.wireshark install     # then Wireshark/tshark load it on every start

The dissector takes UDP port 4791 over from Wireshark's RoCEv2 dissector and hands it
back every frame whose opcode is not MRC's. Fields: mrc.<header>.<key>, e.g.
mrc.bth.psn, mrc.meth.rqmsn, mrc.seth.cack_psn, mrc.neth.reason (docs/WIRESHARK.md).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mrcnet.wireshark",
        description="The MRC 1.0 Wireshark dissector (Lua) shipped with mrcnet: print its "
        "path, or install it as a personal Wireshark plugin.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("path", help="print the plugin's path (for tshark -X lua_script:PATH)")
    inst = sub.add_parser(
        "install", help="copy the plugin to Wireshark's personal Lua plugin directory")
    inst.add_argument("--dir", type=Path, default=None, metavar="DIR",
                      help="install into DIR instead (default: the personal Lua plugin "
                      "directory tshark reports, else ~/.local/lib/wireshark/plugins)")
    args = parser.parse_args(argv)
    if args.command == "path":
        print(plugin_path())
        return 0
    dest = args.dir if args.dir is not None else personal_plugin_dir()
    try:
        target = install(dest)
    except OSError as exc:
        print(f"cannot install the MRC dissector into {dest}: {exc}", file=sys.stderr)
        return 1
    print(f"installed the MRC dissector: {target}")
    print("Wireshark and tshark load it at their next start (check: tshark -G plugins).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
