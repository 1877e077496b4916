"""state.session_cpu: the CPU a background part used, its children's included, and no one else's
(what `local status` shows per part)."""

from __future__ import annotations

import subprocess
import sys
import time

from hanzo_stream.core import state

# A leader that starts a child which burns ~1 s of CPU and keeps running (not yet reaped, as a
# Spark driver's JVM), then burns ~0.5 s itself and waits.
BURN = """
import subprocess, sys, time
def burn(s):
    end = time.process_time() + s
    while time.process_time() < end:
        pass
child = subprocess.Popen([sys.executable, "-c", "import time\\n"
    "end = time.process_time() + 1.0\\nwhile time.process_time() < end: pass\\n"
    "print('done', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
burn(0.5)
child.stdout.readline()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_session_counts_its_leader_and_its_running_child_only() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        used = state.session_cpu(proc.pid)
        assert 1.4 <= used < 10, used  # 0.5 s + 1.0 s, plus two interpreters' start
        time.sleep(0.5)  # both only sleep now: the figure stays
        assert state.session_cpu(proc.pid) - used < 0.2
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10  # the child's SIGKILL lands a moment later
    while state.session_cpu(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.session_cpu(proc.pid) == 0  # nothing of it runs any more


def test_a_session_of_no_process_used_nothing() -> None:
    assert state.session_cpu(2**22 + 7) == 0  # above any pid_max: no such session
