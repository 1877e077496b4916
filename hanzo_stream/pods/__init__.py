"""What runs in the cluster's pods, next to the broker: the roll gate (a native sidecar of every
broker pod of a 3+ broker stack), the TLS reload (the sidecar that serves a renewed certificate
without a restart), the roller (the Job that restarts out-of-date brokers, the active controller
last), the Kubernetes API as those pods see it (in_cluster), and the takeover (the configuration
a broker pod runs while it takes the standard's insights-kafka over in place). infra/ starts
them in its pod specs (`python -m hanzo_stream.pods.roll_gate`, `.tls_reload`, `.roller`);
they build on core/ and artifacts/ only."""
