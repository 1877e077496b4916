"""rpc-billing: agent_rpc_metering -> one agent.rpc.settled event per (agent, hour).

The exact-totals engine (hanzo_stream/jobs/totals.py) configured by consumers/rpc-billing.yaml
(`aggregate:`), the same engine and guarantees as billing-agg.
"""

from __future__ import annotations

from hanzo_stream.jobs.totals import build

__all__ = ["build"]

if __name__ == "__main__":  # spark-submit spark/rpc_billing.py [--once]
    import sys

    from hanzo_stream.jobs.cli import main

    main(["run", "rpc-billing", *sys.argv[1:]])
