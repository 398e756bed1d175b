"""Collective communication times: ring all-reduce, all-gather / reduce-scatter and all-to-all, by
message size, rank count and link (NVLink within a node, the NICs across nodes).

Ring algorithms (Patarasuk & Yuan 2009; NCCL's ring, "NCCL tests: performance.md" for the bus-bandwidth
definitions): an all-gather or reduce-scatter of an ``S``-byte (full) buffer over ``n`` ranks moves
``(n − 1)/n · S`` per rank in ``n − 1`` steps; an all-reduce is a reduce-scatter plus an all-gather.
A step costs a latency α; the bandwidth term runs at the link's bus bandwidth.

Achieved bus bandwidth rises with the message: NCCL-tests sweeps on DGX A100/H100 (NVIDIA, "NCCL tests"
README and the DGX SuperPOD reference architecture's all-reduce tables) reach about half of the large-
message bus bandwidth at a few MB and saturate above ~100 MB. :func:`size_efficiency` models that with
the half-saturation sizes below; the large-message fraction is the link's efficiency in
:mod:`service.domain.hardware_behaviour`.

All-to-all (MoE token dispatch/combine): each rank sends ``(n − 1)/n`` of its buffer; the share bound
for ranks on other nodes crosses the NICs, the rest NVLink, both at once, so the slower part decides.
"""

from __future__ import annotations

#: Message size (bytes) at which a collective reaches half of its large-message bus bandwidth on
#: NVLink (NCCL-tests all_reduce_perf on one DGX H100: ~50% of peak busbw near 1 MB).
NVLINK_HALF_SATURATION_BYTES = 1e6
#: The same across nodes over InfiniBand/RoCE (NCCL-tests on 2-16 DGX nodes: ~50% near 8 MB).
NETWORK_HALF_SATURATION_BYTES = 8e6


def size_efficiency(size_bytes: float, inter_node: bool) -> float:
    """Share of the large-message bus bandwidth a collective of ``size_bytes`` reaches."""
    half = NETWORK_HALF_SATURATION_BYTES if inter_node else NVLINK_HALF_SATURATION_BYTES
    if size_bytes <= 0:
        return 1.0
    return size_bytes / (size_bytes + half)


def ring_allreduce_seconds(
    n: int, size_bytes: float, bandwidth: float, latency: float, inter_node: bool = False
) -> float:
    """Ring all-reduce of a ``size_bytes`` buffer over ``n`` ranks."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    eff = size_efficiency(size_bytes, inter_node)
    return 2.0 * (n - 1) / n * size_bytes / (bandwidth * eff) + 2.0 * (n - 1) * latency


def ring_gather_seconds(
    n: int, size_bytes: float, bandwidth: float, latency: float, inter_node: bool = False
) -> float:
    """All-gather or reduce-scatter of a ``size_bytes`` (full, gathered) buffer over ``n`` ranks."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    eff = size_efficiency(size_bytes, inter_node)
    return (n - 1) / n * size_bytes / (bandwidth * eff) + (n - 1) * latency


def all_to_all_seconds(
    n: int,
    size_bytes: float,
    ranks_per_node: int,
    intra_bandwidth: float,
    inter_bandwidth: float,
    intra_latency: float,
    inter_latency: float,
) -> float:
    """All-to-all of a ``size_bytes`` buffer per rank over ``n`` ranks, ``ranks_per_node`` of them on
    each node: the intra-node and the cross-node shares move at once, the slower decides."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    local = max(min(ranks_per_node, n), 1)
    intra_share = (local - 1) / n * size_bytes
    inter_share = (n - local) / n * size_bytes
    t_intra = intra_share / (intra_bandwidth * size_efficiency(intra_share, False)) if intra_share else 0.0
    t_inter = inter_share / (inter_bandwidth * size_efficiency(inter_share, True)) if inter_share else 0.0
    lat = (local - 1) * intra_latency + (n - local) * inter_latency / max(local, 1)
    return max(t_intra, t_inter) + lat
