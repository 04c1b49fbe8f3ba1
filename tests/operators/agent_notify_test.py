#!/usr/bin/python3
"""netprism-agent's systemd protocol (Type=notify, WatchdogSec=), against a stand-in for systemd: a Unix datagram
socket passed as $NOTIFY_SOCKET with $WATCHDOG_USEC = 2 s. The agent runs as root in a network namespace of its
own, observing that namespace's loopback (the probe really attaches), shipping to an address where nothing
listens (readiness does not wait for the aggregator: batches go to the spool). Checks: READY=1 once the probe
is attached, WATCHDOG=1 about every second, STOPPING=1 on SIGTERM, exit 0.

usage: agent_notify_test.py AGENT      (root; exit 77 without root outside CI)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from notify_socket import NotifySocket


def main():
    if os.geteuid() != 0:
        print("agent_notify_test: needs root (probe attach, network namespace)", file=sys.stderr)
        return 1 if os.environ.get("CI") == "true" else 77
    agent_bin = sys.argv[1]
    work = tempfile.mkdtemp(prefix="np-agent-notify-")
    ns = f"npnotify{os.getpid()}"
    notify = NotifySocket(work)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    agent = None
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        env = notify.env()
        log = open(os.path.join(work, "agent.log"), "w+")
        agent = subprocess.Popen(["ip", "netns", "exec", ns, agent_bin, "--aggregator", "tcp://127.0.0.1:9",
                                  "--node", "notify", "--iface", "lo", "--spool-dir", os.path.join(work, "spool"), "--insecure"],
                                 env=env, stdout=log, stderr=log)
        notify.drain(8)
        agent.send_signal(signal.SIGTERM)
        notify.drain(2)
        rc = agent.wait(timeout=30)
        msgs = notify.messages()
        ready = notify.times("READY=1")
        pings = notify.times("WATCHDOG=1")
        problems = []
        if not ready:
            problems.append("no READY=1")
        elif len([t for t in pings if t > ready[0]]) < 3:
            problems.append(f"only {len(pings)} WATCHDOG=1 after READY (every 1 s expected)")
        if "STOPPING=1" not in msgs:
            problems.append("no STOPPING=1 on SIGTERM")
        if rc != 0:
            problems.append(f"exit code {rc}")
        if problems:
            log.seek(0)
            print("FAIL: " + "; ".join(problems) + f"\nmessages: {notify.got}\n" + log.read(), file=sys.stderr)
            return 1
        print(f"ok: READY after {ready[0]:.1f} s, {len(pings)} watchdog pings, STOPPING, exit 0")
        return 0
    finally:
        if agent and agent.poll() is None:
            agent.kill()
            agent.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
        notify.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
