"""A stand-in for systemd's side of sd_notify(3): a Unix datagram socket a service finds through
$NOTIFY_SOCKET, with $WATCHDOG_USEC asking for the watchdog. Shared by the aggregator's and the agent's
Type=notify tests (systemd_notify_test.py, agent_notify_test.py)."""
import os
import socket
import time


class NotifySocket:
    def __init__(self, work, watchdog_usec=2_000_000):
        self.path = os.path.join(work, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.watchdog_usec = watchdog_usec
        self.got = []  # (seconds since env() was made, message)
        self.t0 = time.time()

    def env(self, **extra):
        """The service's environment, as systemd sets it; the clock of got starts here."""
        env = dict(os.environ, NOTIFY_SOCKET=self.path, WATCHDOG_USEC=str(self.watchdog_usec), **extra)
        env.pop("WATCHDOG_PID", None)
        self.t0 = time.time()
        return env

    def drain(self, seconds):
        """Collects what the service sends for this long."""
        until = time.time() + seconds
        while time.time() < until:
            try:
                msg = self.sock.recv(4096).decode()
            except socket.timeout:
                continue
            self.got.extend((time.time() - self.t0, m) for m in msg.split("\n") if m)

    def messages(self):
        return [m for _, m in self.got]

    def times(self, message):
        return [t for t, m in self.got if m == message]

    def close(self):
        self.sock.close()
