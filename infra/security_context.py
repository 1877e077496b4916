"""Every pod's and container's security context (Pod Security "restricted"), in one place."""

from __future__ import annotations

from typing import Any


def pod(uid: int, **extra: Any) -> dict:
    """Non-root as `uid`, with its group and the volumes' group, the runtime's seccomp profile."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"}, **extra}


def container(writable_root: bool = False, **extra: Any) -> dict:
    """No privilege escalation, no capabilities, and a read-only root file system unless the
    program writes into its image (Spark's and the schema registry's do)."""
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": not writable_root,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}, **extra}
