"""What the soft-RoCE VM tests share: one `scripts/rdmabed run` with its contract JSON, and the checks'
printing. Used by train_vm_test.py (issue 16 item 3) and counters_vm_test.py (item 4)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile


class Run:
    """`rdmabed --build BUILD run ARGS --out DIR` in a fresh temporary DIR. `code` is None when the run gave
    its contract JSON (`res`), else the test's exit code (77: rdmabed cannot run here outside CI)."""

    def __init__(self, rdmabed, build, args, prefix):
        self.out = tempfile.mkdtemp(prefix=prefix)
        os.rmdir(self.out)  # rdmabed run wants a new or empty directory
        r = subprocess.run([rdmabed, "--build", build, "run", *args, "--out", self.out],
                           text=True, capture_output=True)
        sys.stderr.write(r.stderr[-6000:])
        self.res, self.code, self.fails = None, None, []
        lines = r.stdout.strip().splitlines()
        if r.returncode == 77:
            self.code = 77
        elif r.returncode != 0 or not lines:
            print(f"FAIL: rdmabed run exited {r.returncode}; kept {self.out}")
            self.code = 1
        else:
            self.res = json.loads(lines[-1])
            print(json.dumps({k: v for k, v in self.res.items() if k not in ("wire", "clock_set", "clock_end")},
                             indent=1))

    def need(self, what, ok):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.fails.append(what)

    def need_dp2_structure(self):
        """One job, its nodes, DP group and pp 1 exact, every truth iteration but the first two matched (an
        observer locking on, as the recordings' tests allow)."""
        res = self.res
        self.need("one job", res["jobs"] == 1)
        self.need("grouping exact", res["grouping_exact"] is True)
        self.need("parallelism exact (dp 2, pp 1, the DP group)", res["parallelism_exact"] is True)
        self.need("every truth iteration but the first two matched",
                  res["iterations_truth"] >= 10 and res["iterations_matched"] >= res["iterations_truth"] - 2)

    def verdict(self):
        """The test's exit code; the run directory is kept when a check failed."""
        if self.fails:
            print(f"FAIL: {len(self.fails)} check(s); kept {self.out}")
            return 1
        shutil.rmtree(self.out, ignore_errors=True)
        return 0
