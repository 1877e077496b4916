"""The core model every other room builds on, importing none of them: how a command, client or
job reaches a cluster (connection) and why it cannot (diagnose), the broker's configuration
(broker_config), the dead-letter contract (dead_letter), every HANZO_STREAM_* variable
(environment), where local state and caches live (paths, state) and how a secret file is
written (secret_files)."""
