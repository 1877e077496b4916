"""billing-agg: llm_usage -> one billing.usage.hourly event per (team, org, hour).

The exact-totals engine (hanzo_stream/jobs/totals.py) configured by consumers/billing-agg.yaml
(`aggregate:`): dedupe by event id, integer sums, exact DECIMAL cost_usd, deterministic ids,
late events dead-lettered. rpc-billing is the same engine with its own spec.
"""

from __future__ import annotations

from hanzo_stream.jobs.totals import build

__all__ = ["build"]

if __name__ == "__main__":  # spark-submit spark/billing_agg.py [--once]
    import sys

    from hanzo_stream.jobs.cli import main

    main(["run", "billing-agg", *sys.argv[1:]])
