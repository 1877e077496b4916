# shellcheck shell=bash
# Sourced by ./dev and .ci/install: the project's own virtual environment, when .ci/install
# made one (a machine whose python3 is managed by Debian), comes first on PATH.
if [ -x "$PWD/.venv/bin/python" ]; then
  case ":$PATH:" in *":$PWD/.venv/bin:"*) ;; *) export PATH="$PWD/.venv/bin:$PATH" ;; esac
fi
