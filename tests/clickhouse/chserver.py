"""ClickHouse servers for tests: clickhouse-server (Debian's 18.16) processes of our own -- a config dir in a
temporary directory, unique local ports (HTTP, native TCP, interserver), never the system service -- declared
as one cluster ("np", one shard per server) so a Distributed table spans them. kill() / start() simulate an
outage on one server; close() (also on failure: use it as a context manager) kills all and removes the dir."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SERVER = "/usr/sbin/clickhouse-server"


_handed_out = set()


def free_port():
    """A local port nobody listens on, never one this process handed out before: bind(0) may return a port it
    gave a moment ago once that socket closed, and two servers (or a server and an aggregator) configured with
    the same port fail within seconds ("Address already in use"; one clickhouse_analyzer run failed in 3.5 s)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class Servers:
    def __init__(self, count=1, cluster="np"):
        if not os.access(SERVER, os.X_OK):
            raise RuntimeError(SERVER + " missing: apt-get install clickhouse-server (scripts/setup)")
        self.dir = tempfile.mkdtemp(prefix="np-clickhouse-")
        self.cluster = cluster
        self.ports = [dict(http=free_port(), tcp=free_port(), inter=free_port()) for _ in range(count)]
        self.procs = [None] * count
        try:
            for i in range(count):
                self._write_config(i)
                self.start(i)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def url(self, i, database="netprism", cluster=False):
        u = "http://127.0.0.1:%d/?database=%s" % (self.ports[i]["http"], database)
        return u + ("&cluster=" + self.cluster if cluster else "")

    def _write_config(self, i):
        d = os.path.join(self.dir, "s%d" % i)
        for sub in ("data", "tmp", "log", "user_files", "format_schemas"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shards = "".join("<shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard>" % p["tcp"]
                         for p in self.ports)
        p = self.ports[i]
        with open(os.path.join(d, "config.xml"), "w") as f:
            f.write(f"""<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/log/server.log</log><errorlog>{d}/log/err.log</errorlog></logger>
  <http_port>{p['http']}</http_port><tcp_port>{p['tcp']}</tcp_port>
  <interserver_http_port>{p['inter']}</interserver_http_port><listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path><tmp_path>{d}/tmp/</tmp_path><user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config><default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size><uncompressed_cache_size>268435456</uncompressed_cache_size>
  <remote_servers><{self.cluster}>{shards}</{self.cluster}></remote_servers>
</yandex>
""")
        with open(os.path.join(d, "users.xml"), "w") as f:
            f.write("""<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval>
  </default></quotas>
</yandex>
""")

    def start(self, i, timeout=60):
        d = os.path.join(self.dir, "s%d" % i)
        out = open(os.path.join(d, "log", "stdout.log"), "ab")
        self.procs[i] = subprocess.Popen([SERVER, "--config-file=" + os.path.join(d, "config.xml")],
                                         stdout=out, stderr=subprocess.STDOUT, cwd=d, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.procs[i].poll() is not None:
                for line in self.log_tail(i):
                    sys.stderr.write("clickhouse-server %d: %s\n" % (i, line))
                raise RuntimeError("clickhouse-server %d exited (%s); see %s/log" % (i, self.procs[i].returncode, d))
            try:
                if self.query(i, "SELECT 1").strip() == "1":
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("clickhouse-server %d did not answer within %ds" % (i, timeout))

    def log_tail(self, i, n=5):
        """The last lines of server i's error log and stdout (why it exited), for the test's own output."""
        d = os.path.join(self.dir, "s%d" % i, "log")
        lines = []
        for name in ("err.log", "stdout.log"):
            try:
                with open(os.path.join(d, name), errors="replace") as f:
                    lines += [l.rstrip() for l in f.readlines()[-n:]]
            except OSError:
                pass
        return lines

    def kill(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        self.procs[i] = None

    def query(self, i, sql, timeout=60):
        req = urllib.request.Request("http://127.0.0.1:%d/" % self.ports[i]["http"], data=sql.encode())
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode()

    def close(self):
        for i in range(len(self.procs)):
            try:
                self.kill(i)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
