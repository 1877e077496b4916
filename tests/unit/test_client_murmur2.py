"""murmur2 partitioning, proven against the Java client's own partitioner from the Kafka jars.

The Java side is Kafka's BuiltInPartitioner.partitionForKey (what KafkaProducer uses for a
keyed record) and Utils.murmur2, run as a single-file Java program on the broker classpath.
The hash is kafka-python's (unsigned: Java's signed int read as 32 bits); the partition is
hanzo_stream.client.keying.partition.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from hanzo_stream.artifacts.jars import kafka_classpath
from hanzo_stream.artifacts.jvm import java, jit_flags
from hanzo_stream.client.keying import partition

PARTITION_COUNTS = (1, 4, 8, 16, 7, 1000)

JAVA = """
import java.io.*;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class Vectors {
    public static void main(String[] args) throws Exception {
        int[] counts = {COUNTS};
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            byte[] key = new byte[line.length() / 2];
            for (int i = 0; i < key.length; i++)
                key[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            out.append(Utils.murmur2(key));
            for (int n : counts) out.append(' ').append(BuiltInPartitioner.partitionForKey(key, n));
            out.append('\\n');
        }
        System.out.print(out);
    }
}
""".replace("COUNTS", ", ".join(map(str, PARTITION_COUNTS)))


def _keys() -> list[bytes]:
    rng = random.Random(20261122)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"team_42", b"org_21c9", "équipe-ß-✓".encode(),
            bytes(range(256)), b"\xff" * 7]
    keys += [f"team_{i}".encode() for i in range(200)]
    keys += [rng.randbytes(rng.randint(0, 64)) for _ in range(400)]
    return keys


@pytest.fixture(scope="module")
def java_vectors(tmp_path_factory) -> list[list[int]]:
    d: Path = tmp_path_factory.mktemp("murmur2")
    (d / "Vectors.java").write_text(JAVA)
    proc = subprocess.run([java(), *jit_flags(), "-cp", kafka_classpath(), str(d / "Vectors.java")],
                          input="\n".join(k.hex() for k in _keys()) + "\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [list(map(int, line.split())) for line in proc.stdout.splitlines()]


@pytest.mark.integration  # runs the Java client (Kafka's jars)
def test_hash_and_partition_match_the_java_client(java_vectors):
    keys = _keys()
    assert len(java_vectors) == len(keys)
    for key, (java_hash, *java_parts) in zip(keys, java_vectors, strict=True):
        assert murmur2(key) == java_hash & 0xFFFFFFFF, key
        assert [partition(key, n) for n in PARTITION_COUNTS] == java_parts, key


def test_keys_spread_over_partitions():
    used = {partition(f"team_{i}".encode(), 16) for i in range(500)}
    assert used == set(range(16))


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition(b"x", 0)
