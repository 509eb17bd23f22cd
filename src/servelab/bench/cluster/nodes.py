"""The nodes a run can place client workers on, and how workers are spread over them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Node", "spread"]


@dataclass(frozen=True, slots=True)
class Node:
    """One alive Ray node with CPUs for client workers."""

    node_id: str
    address: str
    cpus: int

    @property
    def short_id(self) -> str:
        return self.node_id[:8]

    @property
    def label(self) -> str:
        return f"{self.address} ({self.short_id})"


def spread(count: int, nodes: int) -> list[tuple[int, int]]:
    """Worker j goes to node j % nodes as that node's (j // nodes)-th worker: an even
    spread, and consecutive workers (an open loop's consecutive arrivals) on different
    nodes."""
    return [(j % nodes, j // nodes) for j in range(count)]
