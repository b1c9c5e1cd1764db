"""Human-readable output of ``mrc-fabric``: the status table and failure settings in words.

Pure formatting of the dicts :meth:`Fabric.status` returns (no I/O), so the CLI, tests and
other tools print the same thing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["failure_words", "fmt_bytes", "fmt_rate", "link_state", "status_table"]


def fmt_bytes(n: float) -> str:
    """``1234567`` -> ``1.2M`` (powers of 1000, as link rates are)."""
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}T"  # pragma: no cover - loop always returns


def fmt_rate(bits_per_s: float | None) -> str:
    """Bits per second as ``12.3M`` (``-`` when not measured)."""
    if bits_per_s is None:
        return "-"
    return fmt_bytes(bits_per_s)


def failure_words(key: str, value: dict[str, Any]) -> str:
    """One failure entry of the state record as a sentence fragment.

    ``link:L0.0-S0.1 {"down": true, "loss_pct": {"L0.0->S0.1": 1.5}}`` ->
    ``link L0.0-S0.1: down, loss 1.5% L0.0->S0.1``.
    """
    kind, _, what = key.partition(":")
    words: list[str] = []
    if kind == "link":
        if value.get("down"):
            words.append("down")
        if value.get("flap_ms"):
            pid = value.get("flap_pid")
            words.append(f"flapping every {value['flap_ms']} ms"
                         + (f" (pid {pid})" if pid else ""))
        words += [f"blackhole {d}" for d in value.get("blackhole", [])]
        words += [f"loss {pct:g}% {d}" for d, pct in sorted(value.get("loss_pct", {}).items())]
        return f"link {what}: {', '.join(words) or 'clear'}"
    if kind == "node":
        done = "blackholed (every egress drops)" if value.get("blackhole") else "forwarding"
        return f"switch {what}: {done}"
    if kind == "port":
        host, _, plane = what.partition(":")
        return f"port {host} plane {plane}: {'down' if value.get('down') else 'up'}"
    return f"{key}: {value}"


def link_state(d: dict[str, Any], link_failure: dict[str, Any], node_blackholed: bool) -> str:
    """The impairments of one link direction in words (``up`` when there are none)."""
    words = []
    oper = str(d.get("oper", "?"))
    if link_failure.get("flap_ms"):
        words.append(f"flapping {link_failure['flap_ms']}ms")
    if oper not in ("up", "unknown"):
        words.append("DOWN" if oper in ("down", "lowerlayerdown") else oper)
    if node_blackholed:
        words.append("switch blackholed")
    elif d.get("blackhole"):
        words.append("blackhole")
    if d.get("loss_pct"):
        words.append(f"loss {d['loss_pct']:g}%")
    if "error" in d:
        words.append("counters unreadable")
    return ", ".join(words) or "up"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """Columns padded to fit; the columns in ``right`` right-aligned (numbers)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w)
               for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(out).rstrip()

    return [line(header)] + [line(r) for r in rows]


def status_table(st: dict[str, Any], spec_lines: list[str],
                 rates: dict[str, tuple[float, float]] | None = None,
                 interval: float | None = None) -> str:
    """The ``mrc-fabric status`` text: header, nodes, links (counters with their rates),
    failures in words, background processes.

    ``rates`` maps a direction ("L0.0->S0.1") to (packets/s, bits/s) measured over
    ``interval`` seconds; without it the rate columns show ``-``.
    """
    out = [f"fabric {st['name']} ({st['status']}), srv6 {st['srv6']}, "
           f"block {st['usid_block']}"
           + (f"; rates over the last {interval:.1f} s" if interval else "")]
    out.append(f"description: {st['description']}")
    out += spec_lines
    mrcd = st.get("mrcd") or {}
    rows = []
    for n in st["nodes"]:
        if n["role"] == "host":
            m = mrcd.get(n["name"])
            state = (f"mrcd {m['pid']} {'running' if m['running'] else 'GONE'}" if m
                     else "no mrcd")
            state += f", {n['mrc_ingress_dropped']} MRC frames dropped after the tap"
        else:
            state = "BLACKHOLED (every egress drops)" if n.get("blackhole") else "forwarding"
        rows.append([n["name"], n["role"], f"{n['usid']:#06x}", n["netns"], state])
    out += ["", *_table(["NODE", "ROLE", "USID", "NETNS", "STATE"], rows, right=set())]
    failures = st.get("failures") or {}
    blackholed = {n["name"] for n in st["nodes"] if n.get("blackhole")}
    rows = []
    for ln in st["links"]:
        lf = failures.get(f"link:{ln['name']}") or {}
        for dname, d in ln["directions"].items():
            pps, bps = (rates or {}).get(dname, (None, None))
            rows.append([
                dname, link_state(d, lf, d.get("from") in blackholed),
                str(d.get("pkts", 0)), "-" if pps is None else f"{pps:.0f}",
                fmt_bytes(d.get("bytes", 0)), fmt_rate(bps),
                str(d.get("drops", 0)), str(d.get("trims", 0)), str(d.get("ce", 0)),
            ])
    out += ["", *_table(["LINK DIRECTION", "STATE", "PKTS", "PKT/S", "BYTES", "BIT/S",
                         "DROPS", "TRIMS", "CE"], rows, right=set(range(2, 9)))]
    out += ["", "failures:" + (" none" if not failures else "")]
    out += [f"  {failure_words(k, v)}" for k, v in sorted(failures.items())]
    others = [p for p in st.get("processes", []) if not str(p["what"]).startswith("mrcd ")]
    for p in others:
        out.append(f"process {p['pid']} ({p['what']}): {'running' if p['alive'] else 'gone'}")
    if mrcd:
        out.append("")
        out += _table(["HOST", "MRCD PID", "STATE", "SOCKET"],
                      [[h, str(m["pid"]), "running" if m["running"] else "GONE", m["socket"]]
                       for h, m in mrcd.items()], right={1})
    return "\n".join(out)
