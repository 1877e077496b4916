"""Kafka's murmur2 partitioner, bit for bit as the Java client computes it.

Java: `Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions`. A key must land on the
same partition whichever client produced it, or per-team order breaks the day a second
language writes to the topic. The producer itself partitions with librdkafka's
`murmur2_random` (the same function for non-null keys); this module lets tools and tests
compute the partition without a broker. Proven against the Java client in
tests/unit/test_client_murmur2.py.
"""

from __future__ import annotations

M = 0x5BD1E995
SEED = 0x9747B28C
MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash as a signed int, like Java's Utils.murmur2."""
    length = len(data)
    h = (SEED ^ length) & MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * M) & MASK
        k ^= k >> 24
        k = (k * M) & MASK
        h = (h * M) & MASK
        h ^= k
    tail = length & 3
    idx = n4 * 4
    if tail == 3:
        h ^= data[idx + 2] << 16
    if tail >= 2:
        h ^= data[idx + 1] << 8
    if tail >= 1:
        h ^= data[idx]
        h = (h * M) & MASK
    h ^= h >> 13
    h = (h * M) & MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java default partitioner picks for a non-null key."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
