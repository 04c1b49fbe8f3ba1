#!/usr/bin/python3
"""netprism-aggregator's systemd protocol (Type=notify, WatchdogSec=), against a stand-in for systemd: a Unix
datagram socket passed as $NOTIFY_SOCKET with $WATCHDOG_USEC = 2 s, as systemd would set them. Checks: READY=1
arrives once the daemon serves queries, WATCHDOG=1 keeps arriving about every second while it is healthy, and
STOPPING=1 arrives on SIGTERM, after which it exits 0. Its stderr is a file named by $JOURNAL_STREAM (as systemd
connects a service's stderr to journald): every log line then starts with a syslog priority prefix ("<6>").

usage: systemd_notify_test.py AGGREGATOR
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from notify_socket import NotifySocket

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from nplocal import free_ports  # noqa: E402


def main():
    agg_bin = sys.argv[1]
    work = tempfile.mkdtemp(prefix="np-notify-")
    notify = NotifySocket(work)
    ingest, query = free_ports(2)
    log = open(os.path.join(work, "journal"), "w+")
    st = os.fstat(log.fileno())
    env = notify.env(JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
    agg = subprocess.Popen([agg_bin, "--listen", f"tcp://127.0.0.1:{ingest}", "--query", f"tcp://127.0.0.1:{query}",
                            "--data-dir", os.path.join(work, "data"), "--insecure"], env=env, stdout=log, stderr=log)
    try:
        notify.drain(6)
        agg.send_signal(signal.SIGTERM)
        notify.drain(2)
        rc = agg.wait(timeout=20)
        msgs = notify.messages()
        problems = []
        if "READY=1" not in msgs:
            problems.append("no READY=1")
        pings = notify.times("WATCHDOG=1")
        if len(pings) < 3:
            problems.append(f"only {len(pings)} WATCHDOG=1 in 6 s (every 1 s expected)")
        if "STOPPING=1" not in msgs:
            problems.append("no STOPPING=1 on SIGTERM")
        elif "READY=1" in msgs and msgs.index("READY=1") > msgs.index("STOPPING=1"):
            problems.append("READY=1 after STOPPING=1")
        if rc != 0:
            problems.append(f"exit code {rc}")
        log.seek(0)
        lines = log.read().splitlines()
        if not lines or not all(line.startswith("<6>") for line in lines):
            problems.append(f"log lines without the journal's priority prefix: {lines[:3]}")
        if problems:
            log.seek(0)
            print("FAIL: " + "; ".join(problems) + f"\nmessages: {notify.got}\n" + log.read(), file=sys.stderr)
            return 1
        print(f"ok: READY, {len(pings)} watchdog pings, STOPPING, exit 0, {len(lines)} log lines at priority 6")
        return 0
    finally:
        if agg.poll() is None:
            agg.kill()
            agg.wait()
        notify.close()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
