"""NCCL's INFO lines, in the shapes its sources print them (github.com/NVIDIA/nccl).

Prefix: src/debug.cc, "%s:%d:%d " (host, pid, tid) then "[%d] NCCL INFO %s" (cudaDev);
WARN lines carry "%s:%d" (file, line) before "NCCL WARN". Messages: src/init.cc
(VERSION_STRING, "Using network %s"), src/transport/p2p.cc, shm.cc, net.cc,
coll_net.cc ("... via ..."), src/transport/generic.cc ("Connected all rings, ...").
"""

from __future__ import annotations

import pytest

from servelab.probe.comm.nccl_log import parse_nccl_log, transport_kind

PREFIX = "h200-node:41522:41522 [0] NCCL INFO "
PREFIX_THREAD = "h200-node:41522:41601 [0] NCCL INFO "

# Two ranks on NVLink, torch's NCCL 2.21+ with cuMem (the default since 2.19).
NVLINK_LOG = [
    PREFIX + "Bootstrap: Using eth0:10.0.0.5<0>",
    PREFIX + "cudaDriverVersion 12080",
    PREFIX + "NCCL version 2.21.5+cuda12.4",
    PREFIX_THREAD + "Using network Socket",
    PREFIX_THREAD + "[Rank 0] ncclCommInitRankConfig comm 0x55d0c0 rank 0 nranks 2 cudaDev 0 "
    "nvmlDev 0 busId 18000 commId 0x1c2b - Init START",
    PREFIX_THREAD + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    PREFIX_THREAD + "Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    PREFIX_THREAD + "Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    PREFIX_THREAD + "Connected all rings, use ring PXN 0 GDR 1",
    PREFIX_THREAD + "Connected all trees",
    PREFIX_THREAD + "ncclCommInitRankConfig comm 0x55d0c0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
    "busId 18000 commId 0x1c2b - Init COMPLETE",
]

# A VM without P2P: NCCL falls back to shared memory (2.18-2.29 print two modes).
SHM_LOG = [
    "vm:900:900 [1] NCCL INFO NCCL version 2.18.5+cuda12.2",
    "vm:900:931 [1] NCCL INFO Using network Socket",
    "vm:900:931 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
    "vm:900:931 [1] NCCL INFO Channel 01 : 1[1] -> 0[0] via SHM/direct/direct",
    "vm:900:931 [1] NCCL INFO Connected all rings",
]


def test_nvlink_ring():
    setup = parse_nccl_log(NVLINK_LOG)
    assert setup.version == "2.21.5+cuda12.4"
    assert setup.network == "Socket"
    assert setup.transports == ["P2P/CUMEM"]
    assert setup.warnings == []
    # Evidence: version, network, one line per distinct path, the rings line.
    assert setup.lines == [
        NVLINK_LOG[2],
        NVLINK_LOG[3],
        NVLINK_LOG[5],
        NVLINK_LOG[8],
    ]


def test_shared_memory_fallback():
    setup = parse_nccl_log(SHM_LOG)
    assert setup.version == "2.18.5+cuda12.2"
    assert setup.transports == ["SHM"]
    assert SHM_LOG[2] in setup.lines
    assert SHM_LOG[4] in setup.lines


def test_mixed_transports_keep_order_of_appearance_and_warnings():
    lines = [
        # NCCL_DEBUG=VERSION prints the version with no prefix.
        "NCCL version 2.30.7+cuda13.0",
        PREFIX_THREAD + "Using network IB",
        PREFIX_THREAD + "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
        PREFIX_THREAD + "Channel 00 : 1[1] -> 2[2] via SHM/direct",
        PREFIX_THREAD + "Channel 00/0 : 3[3] -> 4[0] [send] via NET/IB/0/GDRDMA",
        PREFIX_THREAD + "Channel 00/0 : 7[3] -> 0[0] [receive] via NET/IB/0/GDRDMA/Shared",
        PREFIX_THREAD + "Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read",
        "h200-node:41522:41601 [0] transport/p2p.cc:204 NCCL WARN Cuda failure "
        "'peer access is not supported between these two devices'",
    ]
    setup = parse_nccl_log(lines)
    assert setup.version == "2.30.7+cuda13.0"
    assert setup.network == "IB"
    assert setup.transports == ["P2P/IPC", "SHM", "NET/IB"]
    assert setup.warnings == [lines[-1]]
    assert lines[6] not in setup.lines  # same path as lines[2]: one line is evidence enough


def test_lines_are_capped():
    many = [PREFIX_THREAD + f"Channel 00/0 : 0[0] -> 1[1] via NET/Socket/{i}" for i in range(50)]
    setup = parse_nccl_log(many)
    assert setup.transports == ["NET/Socket"]
    assert 0 < len(setup.lines) <= 12


def test_no_nccl_lines():
    setup = parse_nccl_log(["Traceback (most recent call last):", ""])
    assert setup.version is None
    assert setup.transports == []
    assert setup.lines == []


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("P2P/CUMEM/read", "P2P/CUMEM"),  # p2p.cc: "via P2P/%s%s%s" with CUMEM, "/read", "/CE"
        ("P2P/CUMEM", "P2P/CUMEM"),
        ("P2P/CUMEM/CE", "P2P/CUMEM"),
        ("P2P/MNNVL/read", "P2P/MNNVL"),
        ("P2P/IPC/read", "P2P/IPC"),  # "via P2P/IPC%s%s"
        ("P2P/direct pointer/read", "P2P/direct"),  # "via P2P/direct pointer%s"
        ("P2P/indirect/2[2]/read", "P2P/indirect"),  # "via P2P/indirect/%d[%d]%s"
        ("SHM/direct/direct", "SHM"),  # shm.cc 2.18-2.29: "via SHM/%s/%s"
        ("SHM/CE/direct", "SHM"),
        ("SHM/direct", "SHM"),  # shm.cc 2.30
        ("NET/Socket/0", "NET/Socket"),  # net.cc: "via NET/%s/%d%s%s%s"
        ("NET/IB/1(0)/GDRDMA(PCI)/Shared", "NET/IB"),
        ("NET/AWS Libfabric/0", "NET/AWS Libfabric"),
        ("COLLNET/SHARP/0", "COLLNET/SHARP"),  # coll_net.cc: "via COLLNET/%s/%d%s%s"
    ],
)
def test_transport_kind(path, kind):
    assert transport_kind(path) == kind


def test_collnet_line_shape():
    line = "node:1:2 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA"
    assert parse_nccl_log([line]).transports == ["COLLNET/SHARP"]
