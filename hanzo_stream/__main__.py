"""`python -m hanzo_stream ...` is `hanzo-stream ...` (for environments without the script on PATH)."""

from hanzo_stream.cli import main

main()
