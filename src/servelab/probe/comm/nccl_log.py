"""Reads NCCL's NCCL_DEBUG=INFO lines for what it chose: version, network, transports.

The transport decides the all-reduce: P2P (NVLink or PCIe peer-to-peer, through cuMem
or legacy CUDA IPC handles), SHM (staged through host shared memory, what NCCL falls
back to when P2P is unavailable, e.g. in a VM) or NET (a network, even on one host).

Line shapes, from NCCL's sources (github.com/NVIDIA/nccl, 2.18-2.30):
- prefix, src/debug.cc: "<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <message>", and
  "... NCCL WARN <message>" (with the source file and line before it)
- src/init.cc: "NCCL version 2.21.5+cuda12.4" and "Using network Socket"
- src/transport/p2p.cc: "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read" (or P2P/MNNVL,
  P2P/IPC, "P2P/direct pointer" within one process, "P2P/indirect/2[2]"; "/CE" when
  NCCL_P2P_USE_CUDA_MEMCPY is set)
- src/transport/shm.cc: "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct" (2.30:
  "via SHM/direct")
- src/transport/net.cc: "Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0", with
  "/GDRDMA" and "/Shared" suffixes; coll_net.cc: "... [send] via COLLNET/<name>/0"
- src/transport/generic.cc: "Connected all rings, use ring PXN 0 GDR 1"

`parse_connection` reads one "Channel ... via ..." line; an engine's log signatures use it
too (`nccl_transport` events), so the probe and the engine log read transports alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from servelab.probe.comm.results import NcclSetup

__all__ = ["NcclConnection", "parse_connection", "parse_nccl_log", "transport_kind"]

_MAX_LINES = 12
_MAX_WARNINGS = 10

_INFO = re.compile(r"NCCL INFO (?P<message>.*)$")
_WARN = re.compile(r"NCCL WARN ")
_VERSION = re.compile(r"NCCL version (?P<version>\S+)")
_NETWORK = re.compile(r"^Using network (?P<network>.+?)\s*$")
# "Channel 00/0 : 0[0] -> 1[1] [send] via ..." (shm.cc has no "/0"); coll_net.cc's
# "CollNet 00/0 : 0 [send] via ..." names no peer.
_CONNECTION = re.compile(
    r"^(?:Channel|CollNet) (?P<channel>\d+)(?:/\d+)? : (?P<from_rank>\d+)(?:\[\d+\])?"
    r"(?: -> (?P<to_rank>\d+)\[\d+\])?.*? via (?P<via>.+?)\s*$"
)
_RINGS = re.compile(r"^Connected all rings")

# The second part of a P2P path, as p2p.cc writes it -> the name we report.
_P2P_KINDS = {"direct pointer": "direct", "indirect": "indirect"}


@dataclass(frozen=True)
class NcclConnection:
    """One connection NCCL set up: a channel from a rank to a peer (none for CollNet)."""

    channel: int
    from_rank: int
    to_rank: int | None
    via: str
    """The path as NCCL printed it: "P2P/CUMEM/read", "SHM/direct/direct", "NET/IB/0/GDRDMA"."""

    @property
    def transport(self) -> str:
        """The transport alone: "P2P", "SHM", "NET" or "COLLNET"."""
        return self.via.partition("/")[0]


def parse_connection(line: str) -> NcclConnection | None:
    """The connection an NCCL INFO line (or its message alone) sets up; None for another line."""
    info = _INFO.search(line)
    match = _CONNECTION.match(info.group("message") if info else line)
    if match is None:
        return None
    to_rank = match.group("to_rank")
    return NcclConnection(
        channel=int(match.group("channel")),
        from_rank=int(match.group("from_rank")),
        to_rank=int(to_rank) if to_rank is not None else None,
        via=match.group("via"),
    )


def parse_nccl_log(lines: Iterable[str]) -> NcclSetup:
    """Version, network and distinct transports of one or more ranks' NCCL logs."""
    setup = NcclSetup()
    seen_paths: set[str] = set()
    for raw in lines:
        line = raw.strip()
        if _WARN.search(line):
            if len(setup.warnings) < _MAX_WARNINGS:
                setup.warnings.append(line)
            continue
        version = _VERSION.search(line)
        if version and setup.version is None:
            setup.version = version.group("version")
            _keep(setup, line)
            continue
        info = _INFO.search(line)
        if info is None:
            continue
        message = info.group("message")
        if (network := _NETWORK.match(message)) and setup.network is None:
            setup.network = network.group("network")
            _keep(setup, line)
        elif connection := parse_connection(message):
            path = connection.via
            kind = transport_kind(path)
            if kind not in setup.transports:
                setup.transports.append(kind)
            if path not in seen_paths:
                seen_paths.add(path)
                _keep(setup, line)
        elif _RINGS.match(message):
            _keep(setup, line)
    return setup


def transport_kind(path: str) -> str:
    """The transport of a `via` path: 'P2P/CUMEM/read' -> 'P2P/CUMEM', 'NET/IB/0' -> 'NET/IB'."""
    head, _, rest = path.partition("/")
    if head == "SHM":
        return "SHM"
    if head == "P2P":
        for prefix, name in _P2P_KINDS.items():
            if rest.startswith(prefix):
                return f"P2P/{name}"
    second = rest.split("/", 1)[0]
    return f"{head}/{second}" if second else head


def _keep(setup: NcclSetup, line: str) -> None:
    if len(setup.lines) < _MAX_LINES and line not in setup.lines:
        setup.lines.append(line)
