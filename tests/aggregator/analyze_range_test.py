#!/usr/bin/python3
"""`netprism analyze --since NS --until NS` (issue 20) over a native recording (streamed) and a flow CSV.

Checks: the whole range gives exactly the document without the flags; a range ending in the middle keeps only
what ended before it (fewer iterations, none past the end); a range after the recording has no jobs; --since
after --until is a usage error (exit 2) naming the flags.

usage: analyze_range_test.py NETPRISM NATIVE_RECORDING CSV
"""
import json
import subprocess
import sys


def analyze(cli, inp, *extra):
    p = subprocess.run([cli, "analyze", "--input", inp, "--json", *extra], capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def main():
    cli, native, csv = sys.argv[1:4]
    ok = True
    for inp in (native, csv):
        rc, whole, err = analyze(cli, inp)
        if rc != 0:
            print(f"FAIL: analyze {inp}: {err}")
            return 1
        rc, ranged, _ = analyze(cli, inp, "--since", "0", "--until", str(2**64 - 1))
        if ranged != whole:
            print(f"FAIL: {inp}: the whole range differs from no range")
            ok = False
        jobs = json.loads(whole)["jobs"]
        its = [it for j in jobs for it in j["iterations"]]
        if not its:
            print(f"FAIL: {inp}: no iterations to cut")
            return 1
        first, last = min(i["start_ns"] for i in its), max(i["end_ns"] for i in its)
        mid = (first + last) // 2
        rc, half, err = analyze(cli, inp, "--until", str(mid))
        half_its = [it for j in json.loads(half)["jobs"] for it in j["iterations"]] if rc == 0 else []
        if rc != 0 or not half_its or len(half_its) >= len(its) or max(i["end_ns"] for i in half_its) > mid:
            print(f"FAIL: {inp} --until {mid}: rc={rc} {len(half_its)} of {len(its)} iterations {err}")
            ok = False
        rc, after, _ = analyze(cli, inp, "--since", str(last + 3600 * 10**9))
        if rc != 0 or json.loads(after)["jobs"]:
            print(f"FAIL: {inp}: a range after the recording: rc={rc} {after[:200]}")
            ok = False
        print(f"{inp}: {len(its)} iterations, {len(half_its)} up to the middle")
    rc, _, err = analyze(cli, native, "--since", "10", "--until", "5")
    if rc != 2 or "--since" not in err:
        print(f"FAIL: --since after --until: rc={rc} {err}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
