"""One run of a Spark job per state directory (`jobs run` beside `local up`'s own run of it
would write one checkpoint twice), and a killed run never leaves the lock behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from hanzo_stream.jobs.process import CheckpointBusy, hold_checkpoint


def test_a_second_run_is_refused_with_the_holder_and_the_way_out(tmp_path):
    first = hold_checkpoint(tmp_path, "billing-agg", "/cp/billing-agg")
    with pytest.raises(CheckpointBusy) as e:
        hold_checkpoint(tmp_path, "billing-agg", "/cp/billing-agg")
    assert f"pid {os.getpid()}" in str(e.value) and "/cp/billing-agg" in str(e.value)
    assert "hanzo-stream local stop billing-agg" in str(e.value)
    first.close()
    hold_checkpoint(tmp_path, "billing-agg", "/cp/billing-agg").close()  # free once it ended


def test_a_run_killed_with_sigkill_frees_its_checkpoint(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from hanzo_stream.jobs.process import hold_checkpoint
        lock = hold_checkpoint({str(tmp_path)!r}, "audit-archive", "s3a://b/cp")
        print("held", flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointBusy, match=f"pid {holder.pid}"):
            hold_checkpoint(tmp_path, "audit-archive", "s3a://b/cp")
    finally:
        holder.kill()
        holder.wait(10)
    hold_checkpoint(tmp_path, "audit-archive", "s3a://b/cp").close()
