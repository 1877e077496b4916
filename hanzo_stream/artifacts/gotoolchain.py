"""A Go toolchain of at least versions.GO_VERSION: the machine's own, or that release from the
Go module proxy.

Debian's golang-go (1.19 on bookworm) is older than the kube/ modules' `go` lines and predates
GOTOOLCHAIN, so it cannot fetch a newer release itself. The Go module proxy serves every
release as the module golang.org/toolchain (what GOTOOLCHAIN downloads), whose zip is the
whole distribution. It is fetched once into ~/.cache/hanzo-stream/go/<release> and checked
against the module hash pinned in versions.py (sum.golang.org is not reachable here).

`python -m hanzo_stream.artifacts.gotoolchain` prints the go binary's path (.ci/install-*.sh use it).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

from ..core.paths import cache_dir
from . import versions


class ToolchainError(RuntimeError):
    pass


def _release(go: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except OSError:
        return None
    digits = out.removeprefix("go").split("-")[0].split(".")
    return tuple(int(d) for d in digits if d.isdigit()) or None


def _wanted() -> tuple[int, ...]:
    return tuple(int(d) for d in versions.GO_VERSION.split("."))


def module_version() -> str:
    return f"v0.0.1-go{versions.GO_VERSION}.linux-amd64"


def dirhash(zf: zipfile.ZipFile) -> str:
    """Go's module hash (golang.org/x/mod/sumdb/dirhash Hash1) of a module zip."""
    lines = []
    for name in sorted(i.filename for i in zf.infolist() if not i.is_dir()):
        lines.append(f"{hashlib.sha256(zf.read(name)).hexdigest()}  {name}\n")
    return "h1:" + base64.b64encode(hashlib.sha256("".join(lines).encode()).digest()).decode()


def _fetch(dest: Path) -> None:
    proxy = next((p for p in os.environ.get("GOPROXY", "https://proxy.golang.org").split(",")
                  if p.startswith("http")), "https://proxy.golang.org")
    url = f"{proxy.rstrip('/')}/golang.org/toolchain/@v/{module_version()}.zip"
    print(f"==> Go {versions.GO_VERSION} from the Go module proxy ({url})", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=600) as r:
        data = r.read()
    zf = zipfile.ZipFile(io.BytesIO(data))
    got = dirhash(zf)
    if got != versions.GO_TOOLCHAIN_HASH:
        raise ToolchainError(f"{url}: module hash {got}, versions.GO_TOOLCHAIN_HASH pins "
                             f"{versions.GO_TOOLCHAIN_HASH}")
    prefix = f"golang.org/toolchain@{module_version()}/"
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for info in zf.infolist():
        if info.is_dir() or not info.filename.startswith(prefix):
            continue
        out = partial / info.filename[len(prefix):]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(zf.read(info))
        mode = (info.external_attr >> 16) & 0o777
        out.chmod(mode or 0o644)
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)


def go() -> str:
    """The path of a go binary of at least GO_VERSION (fetching the release if none is)."""
    for found in (shutil.which("go"), "/usr/local/go/bin/go"):
        if found and os.path.exists(found) and (_release(found) or ()) >= _wanted():
            return found
    home = cache_dir() / "go" / versions.GO_VERSION
    binary = home / "bin" / "go"
    if not binary.exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        _fetch(home)
    if (_release(str(binary)) or ()) < _wanted():
        raise ToolchainError(f"{binary} does not run as Go {versions.GO_VERSION}")
    return str(binary)


if __name__ == "__main__":
    try:
        print(go())
    except (ToolchainError, OSError) as e:
        print(f"hanzo-stream: no Go toolchain: {e}", file=sys.stderr)
        sys.exit(1)
