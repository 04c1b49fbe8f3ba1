"""The probe's kernel tests under Debian 12's own 6.1 kernel (issue 16 item 5): one emulated VM from the
soft-RoCE testbed's image and runner (scripts/rdmabed.d), the test binaries copied in, every program variant
loaded and run there as on the host. CTest `probe_variants_vm` (labels bpf;long).

  vm_variants.py --build BUILD [--out DIR] [--quick]

The last line is one JSON object: {"kernel", "ok", "wall_s", "boot_s", "runs": [{"test", "filter", "rc",
"seconds", "passed", "failed"}]}. Exit 0 when every run passed, 1 when one failed or the VM broke, 3 when this
machine lacks something (named on stderr; 77 instead when not root and CI is unset).
"""
import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "rdmabed.d"))
import vmcluster as vc  # noqa: E402

# Every kernel test binary of tests/bpf, each variant: (binary, gtest filter). Each probe load takes ~25 s of
# verification in the emulated VM, so of the burst test's 18 cases it runs the ones the variants implement
# differently (lock spin and the flush racing the data path, idle and shutdown flush, egress times) and the
# per-packet accounting the table does not cover (GSO, RoCE classes); --quick keeps the variant test and the
# table (both variants, 214 rows each).
# (Not the 1 ms gap-cut case: a vCPU the loaded host deschedules for > 1 ms splits its burst of back-to-back
# test runs in either variant; the cut itself is the same code in both.)
BURST = ":".join(f"*.{t}/*" for t in (
    "IdleFlushLeavesActiveFlowsAlone",
    "ShutdownFlushEmitsEveryFlow", "GsoPacketCountsEverySegment", "TimestampsOfAnotherClockAreIgnored",
    "EgressTimestampOfAnUnmarkedClock", "RoceOpcodeClassesAndQpsPerBurst",
    "FlushRacingTheDataPathLosesNothingUncounted", "FlushRacingFlowsThatShareAFrontSlotLosesNothingUncounted",
    "FlowsSharingAFrontSlotKeepOneBurstEach"))
RUNS = [
    ("probe_variant_test", "*"),
    ("probe_table_test", "*_modern"),
    ("probe_table_test", "*_compat"),
    ("probe_burst_test", BURST),
    ("probe_veth_test", "Modes/*"),
]
QUICK = RUNS[:3]


def gtest_counts(out):
    passed = re.search(r"\[  PASSED  \] (\d+) test", out)
    failed = re.search(r"\[  FAILED  \] (\d+) test", out)
    return int(passed.group(1)) if passed else 0, int(failed.group(1)) if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", required=True)
    p.add_argument("--out")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", help="run only the runs of this test binary (e.g. probe_veth_test)")
    p.add_argument("--filter", help="with --only: this gtest filter instead")
    a = p.parse_args()
    # SIGINT set explicitly (a background job of a non-interactive shell starts with it ignored): the VM and
    # its namespace go in `finally`.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(f"vm_variants: signal {s}"))
    build = os.path.abspath(a.build)
    bins = {name: os.path.join(build, "tests", "bpf", name) for name, _ in RUNS}
    t_start = time.time()
    try:
        for path in bins.values():
            if not os.access(path, os.X_OK):
                raise vc.Missing(f"{path} not built (cmake --build {build} --target {os.path.basename(path)})")
        out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="np-vmvariants-"))
        # Two vCPUs: the burst test races the data path against the idle flush on two CPUs.
        c = vc.Cluster(1, build, out, mem_mb=1024, smp=2)
    except vc.Missing as e:
        print(f"vm_variants: cannot start: {e}", file=sys.stderr)
        return 77 if os.geteuid() != 0 and not os.environ.get("CI") else 3
    ok = False
    res = {"kernel": None, "ok": False, "runs": []}
    try:
        try:
            c.start()
        except vc.Missing as e:
            print(f"vm_variants: cannot start: {e}", file=sys.stderr)
            return 77 if os.geteuid() != 0 and not os.environ.get("CI") else 3
        res["boot_s"] = round(c.boot_s, 1)
        res["kernel"] = c.run(0, "uname -r").strip()
        for name, path in bins.items():
            dst = c.host_path(0, name)
            shutil.copy2(path, dst)
            c.state["scratch"].append(dst)
        c._save()
        runs = QUICK if a.quick else RUNS
        if a.only:
            runs = [(n, a.filter or f) for n, f in runs if n == a.only][:1]
        for name, filt in runs:
            t0 = time.time()
            # CI=true inside: a kernel test that cannot run there fails instead of skipping.
            # NP_VETH_SLOW: the veth test's gap and pause x10 (probe_veth_test.cpp slow_factor).
            rc, sout, serr = c.wait(0, c.submit(0, f"cd /tmp && CI=true NP_VETH_SLOW=10 /ctl/{name} "
                                                   f"--gtest_filter='{filt}'"), timeout=3600)
            with open(os.path.join(out, f"{name}_{len(res['runs'])}.log"), "w") as f:
                f.write(sout + serr)
            passed, failed = gtest_counts(sout)
            run = {"test": name, "filter": filt, "rc": rc, "seconds": round(time.time() - t0, 1),
                   "passed": passed, "failed": failed}
            res["runs"].append(run)
            print(f"vm_variants: {json.dumps(run)}", file=sys.stderr)
            if rc != 0:
                print(sout[-4000:] + serr[-2000:], file=sys.stderr)
        res["ok"] = ok = all(r["rc"] == 0 and r["passed"] > 0 for r in res["runs"])
        res["wall_s"] = round(time.time() - t_start, 1)
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(res, f, indent=1)
        print(json.dumps(res))
        return 0 if ok else 1
    except (RuntimeError, OSError) as e:
        print(f"vm_variants: {e}", file=sys.stderr)
        return 1
    finally:
        c.teardown()
        if a.out is None and ok:
            shutil.rmtree(out, ignore_errors=True)
        elif not ok:
            print(f"vm_variants: logs kept in {out}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
