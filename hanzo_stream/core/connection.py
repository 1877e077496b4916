"""How every command, client and job reaches a cluster: one dataclass, read from HANZO_STREAM_*.

`eval "$(hanzo-stream local env)"` exports these variables; CLI flags override them. The
same object renders the option dictionaries of each client family (librdkafka, kafka-python,
the Java client used by Spark and the Kafka CLI tools), so all of them connect the same way.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace

ENV = {
    "bootstrap": "HANZO_STREAM_BOOTSTRAP",
    "security_protocol": "HANZO_STREAM_SECURITY_PROTOCOL",
    "sasl_mechanism": "HANZO_STREAM_SASL_MECHANISM",
    "username": "HANZO_STREAM_SASL_USERNAME",
    "password": "HANZO_STREAM_SASL_PASSWORD",
    "ca_file": "HANZO_STREAM_CA_FILE",
}


class ConnectionError_(RuntimeError):
    """Raised when no cluster is configured; the message says how to configure one."""


@dataclass(frozen=True)
class Connection:
    bootstrap: str
    security_protocol: str = "SASL_SSL"
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None

    def __repr__(self) -> str:  # never print the password
        return (f"Connection(bootstrap={self.bootstrap!r}, security_protocol="
                f"{self.security_protocol!r}, sasl_mechanism={self.sasl_mechanism!r}, "
                f"username={self.username!r}, ca_file={self.ca_file!r})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str | None) -> Connection:
        env = os.environ if env is None else env
        values = {f: env.get(var) for f, var in ENV.items()}
        values.update({k: v for k, v in overrides.items() if v is not None})
        if not values.get("bootstrap"):
            raise ConnectionError_(
                "no cluster configured: set HANZO_STREAM_BOOTSTRAP (or pass --bootstrap); "
                'for the local platform run: eval "$(hanzo-stream local env)"'
            )
        return cls(**{k: v for k, v in values.items() if v is not None})

    def login_missing(self) -> str | None:
        """Why this connection cannot log in before trying (librdkafka would raise deep inside
        a client's constructor), or None."""
        if self.uses_sasl and not (self.username and self.password):
            return (f"{self.security_protocol} needs a username and a password: set "
                    f"{ENV['username']} and {ENV['password']} (or pass --sasl-username and "
                    f"--sasl-password)")
        return None

    def as_principal(self, username: str, password: str) -> Connection:
        return replace(self, username=username, password=password)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol.endswith("SSL")

    def confluent(self) -> dict[str, str]:
        """librdkafka options (confluent-kafka, and through it most non-JVM services)."""
        cfg = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.uses_sasl:
            cfg |= {"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username or "",
                    "sasl.password": self.password or ""}
        if self.uses_tls and self.ca_file:
            cfg |= {"ssl.ca.location": self.ca_file,
                    "ssl.endpoint.identification.algorithm": "https"}
        return cfg

    def kafka_python(self) -> dict[str, object]:
        """kafka-python(-ng) keyword arguments."""
        cfg: dict[str, object] = {"bootstrap_servers": self.bootstrap.split(","),
                                  "security_protocol": self.security_protocol}
        if self.uses_sasl:
            cfg |= {"sasl_mechanism": self.sasl_mechanism, "sasl_plain_username": self.username,
                    "sasl_plain_password": self.password}
        if self.uses_tls:
            cfg |= {"ssl_cafile": self.ca_file, "ssl_check_hostname": True}
        return cfg

    def java(self) -> dict[str, str]:
        """Java client properties (Spark's `kafka.*` options, kafka-*.sh --command-config)."""
        cfg = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.uses_sasl:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                      if self.sasl_mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            cfg |= {"sasl.mechanism": self.sasl_mechanism,
                    "sasl.jaas.config": f'{module} required username="{self.username}" '
                                        f'password="{self.password}";'}
        if self.uses_tls and self.ca_file:
            cfg |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": self.ca_file,
                    "ssl.endpoint.identification.algorithm": "https"}
        return cfg

    def environ(self) -> dict[str, str]:
        """The HANZO_STREAM_* variables for a child process (a password travels here, never
        on a command line)."""
        return {var: str(getattr(self, f)) for f, var in ENV.items() if getattr(self, f) is not None}

    def env_exports(self) -> str:
        """`export ...` lines for eval in a shell."""
        lines = []
        for f, var in ENV.items():
            value = getattr(self, f)
            if value is not None:
                lines.append(f"export {var}={shlex.quote(str(value))}")
        return "\n".join(lines) + "\n"


def pod_ordinal(hostname: str | None = None) -> int:
    """A StatefulSet pod's ordinal (kafka-2: 2), its broker's node id: the brokers' sidecars
    take it from HOSTNAME."""
    return int((hostname or os.environ["HOSTNAME"]).rsplit("-", 1)[1])
