"""netprism-aggregator processes for the ClickHouse tests: --insecure on free local ports, a data dir in the
test's temporary directory, stopped by stop() (SIGTERM, then SIGKILL) -- call it in a finally."""
import json
import os
import subprocess
import time

from chserver import free_port


class Aggregator:
    def __init__(self, binary, cli, tmp, name, extra=()):
        self.cli = cli
        self.listen = "tcp://127.0.0.1:%d" % free_port()
        self.query = "tcp://127.0.0.1:%d" % free_port()
        self.data_dir = os.path.join(tmp, name)
        self.log = os.path.join(tmp, name + ".log")
        self.proc = subprocess.Popen([binary, "--insecure", "--listen", self.listen, "--query", self.query,
                                      "--data-dir", self.data_dir] + list(extra),
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited: %s" % (name, open(self.log).read()))
            if self.status(timeout=0.5) is not None:
                return
        raise RuntimeError("%s did not answer" % name)

    def status(self, timeout=2.0):
        r = subprocess.run([self.cli, "--insecure", "--aggregator", self.query, "--timeout", str(timeout),
                            "status", "--json"], capture_output=True, text=True)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def wait_sunk(self, timeout=120):
        """Until ClickHouse holds every batch this aggregator stored; the last status."""
        deadline = time.time() + timeout
        st = None
        while time.time() < deadline:
            st = self.status()
            ch = (st or {}).get("clickhouse", {})
            if st and ch.get("pending_batches") == 0 and ch.get("high_water_mark", 0) >= st["store"]["batches"] \
                    and st["store"]["batches"] > 0:
                return st
            time.sleep(0.3)
        raise AssertionError("sink did not catch up: %s" % json.dumps((st or {}).get("clickhouse")))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
