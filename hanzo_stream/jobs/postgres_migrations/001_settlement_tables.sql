-- The settlement jobs' PostgreSQL copy (the standard's phase 1: "billing events are also
-- persisted in PostgreSQL"). One row per record the job writes to Kafka, keyed by the same
-- deterministic id, so a replayed batch rewrites identical rows (hanzo_stream/jobs/postgres.py).
-- Columns are the output event's data fields (hanzo_stream/jobs/totals.py output_data_fields)
-- plus the Kafka record's envelope id; the job checks them at start.

-- billing-agg: billing.usage.hourly, one row per team, org and hour.
CREATE TABLE billing_usage_hourly (
    billing_id        text PRIMARY KEY,      -- sha256 of "team_id|org_id|window_start"
    team_id           text NOT NULL,
    org_id            text NOT NULL,
    window_start      timestamptz NOT NULL,
    window_end        timestamptz NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens      bigint NOT NULL,
    cost_usd          numeric(38, 12) NOT NULL,  -- exact, as summed by the job
    cost_micros       bigint NOT NULL,
    request_count     bigint NOT NULL,
    event_id          uuid NOT NULL,         -- the billing_events record's envelope id
    written_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX billing_usage_hourly_org_window ON billing_usage_hourly (org_id, window_start);

-- rpc-billing: agent.rpc.settled, one row per agent and hour.
CREATE TABLE agent_rpc_settled (
    settlement_id     text PRIMARY KEY,      -- sha256 of "agent_id|window_start"
    agent_id          text NOT NULL,
    window_start      timestamptz NOT NULL,
    window_end        timestamptz NOT NULL,
    units             bigint NOT NULL,
    duration_ms       bigint NOT NULL,
    cost_usd          numeric(38, 12) NOT NULL,
    cost_micros       bigint NOT NULL,
    call_count        bigint NOT NULL,
    event_id          uuid NOT NULL,
    written_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_rpc_settled_agent_window ON agent_rpc_settled (agent_id, window_start);
