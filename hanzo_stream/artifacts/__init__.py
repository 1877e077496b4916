"""What the platform fetches and pins, and how it starts what it fetched: every pinned version
(versions, the one place for every pin), the Maven Central jars (jars), the Go toolchain
(gotoolchain), the java command and its class archive (jvm), Kafka's own tools run from those
jars (kafka_tools) and the published images' Dockerfiles rendered from the pins (dockerfiles).
It builds on core/ only."""
