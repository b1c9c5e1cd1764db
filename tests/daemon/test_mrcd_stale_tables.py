"""Stale kernel drop tables (left by an mrcd killed with SIGKILL) and their clean-up."""

from __future__ import annotations

import subprocess

from mdnsutil import NsRegistry, in_netns, needs_root, run

from mrcnet.io.kernel_drop import TABLE_RE, remove_stale_tables, stale_tables


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _table(ns: str, family: str, name: str, comment: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], check=True, text=True,
                   input=f'table {family} {name} {{\n  comment "{comment}"\n}}\n')


def _tables(ns: str) -> set[str]:
    return {line.split()[-1] for line in run("nft", "list", "tables", ns=ns).splitlines()}


def test_table_name_format() -> None:
    assert TABLE_RE.match("mrcd_1234_0a1b2c")
    for bad in ("mrcd_1234_0a1b2c3", "mrcd_1234_0A1B2C", "mrcd_01234_0a1b2c",
                "mrcd__0a1b2c", "xmrcd_1234_0a1b2c", "mrcd_1234_0a1b2c_x", "mrcd_x_0a1b2c"):
        assert not TABLE_RE.match(bad), bad


@needs_root
def test_only_tables_of_dead_mrcds_in_the_exact_format_are_removed(
        nsreg: NsRegistry) -> None:
    ns = nsreg.netns("n")
    dead = _dead_pid()
    stale = f"mrcd_{dead}_0a1b2c"
    keep = {
        "mrcd_1_0a1b2c": ("netdev", "mrcd pid 1: drop MRC frames after the packet tap"),
        f"mrcd_{dead}_0a1b2c3": ("netdev", f"mrcd pid {dead}: x"),  # not the format
        f"mrcd_{dead}_dddddd": ("netdev", "mrcd pid 1: x"),  # comment names another pid
        f"mrcd_{dead}_eeeeee": ("netdev", "somebody else's"),
        "filter_mine": ("netdev", f"mrcd pid {dead}: x"),
        f"mrcd_{dead}_ffffff": ("inet", f"mrcd pid {dead}: x"),  # another family
    }
    _table(ns, "netdev", stale, f"mrcd pid {dead}: drop MRC frames after the packet tap")
    for name, (family, comment) in keep.items():
        _table(ns, family, name, comment)
    with in_netns(ns):
        assert stale_tables() == [stale]
        assert remove_stale_tables() == [stale]
        assert stale_tables() == []
    assert _tables(ns) == set(keep)
