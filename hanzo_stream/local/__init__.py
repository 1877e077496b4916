"""The local platform: real processes on this machine, started and stopped by the CLI."""
