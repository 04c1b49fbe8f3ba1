#!/usr/bin/python3
"""Golden outputs: every kept recording analysed by the CLI (`analyze --json`, `report --json`) and replayed
through the live streaming engine (golden_replay) must give byte-identical JSON to the committed copy in
tests/golden/expected/. A refactoring proves it changed no behaviour by passing this unchanged; a change
that is meant to alter the analysis regenerates the copies (`scripts/update-goldens`) and says in its
commit which outputs changed and why.

  goldens.py --netprism BIN --replay BIN [--update] [--only SUBSTRING]
"""
import argparse
import difflib
import gzip
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXPECTED = os.path.join(HERE, "expected")


def cases():
    """(name, input, format, topology or None): the testbed's samples, third-party data, native recordings."""
    out = []
    samples = os.path.join(ROOT, "tests", "e2e", "samples")
    for d in sorted(os.listdir(samples)):
        flows = os.path.join(samples, d, "flows.csv.gz")
        if os.path.exists(flows):
            out.append(("sample_" + d, flows, "csv", os.path.join(samples, d, "topology.txt")))
        rec = os.path.join(samples, d, "recording.db")  # a live run's agents' records (the soft-RoCE run)
        if os.path.exists(rec):
            out.append(("sample_" + d, rec, "native", None))
    data = os.path.join(ROOT, "tests", "data")
    for d in sorted(os.listdir(data)) if os.path.isdir(data) else []:
        flows = os.path.join(data, d, "flows.csv")
        if os.path.exists(flows):
            topo = os.path.join(data, d, "topology.txt")
            out.append(("data_" + d, flows, "csv", topo if os.path.exists(topo) else None))
    recs = os.path.join(HERE, "recordings")
    for f in sorted(os.listdir(recs)) if os.path.isdir(recs) else []:
        if f.endswith(".db"):
            out.append(("native_" + f[:-3], os.path.join(recs, f), "native", None))
    return out


def outputs(args, inp, fmt, topo):
    """{suffix: argv} of the documents compared for one recording."""
    tail = ["--input", inp, "--format", fmt] + (["--topology", topo] if topo else [])
    return {
        "analyze": [args.netprism, "analyze"] + tail + ["--json"],
        "report": [args.netprism, "report"] + tail + ["--json"],
        "stream": [args.replay, inp, "--format", fmt] + (["--topology", topo] if topo else []),
    }


def pretty(doc):
    """Lines to diff: the document re-indented (the CLI prints one line)."""
    try:
        return json.dumps(json.loads(doc), indent=1, sort_keys=True).splitlines()
    except ValueError:
        return doc.decode(errors="replace").splitlines()


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.decode(errors='replace')[-400:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--netprism", required=True)
    ap.add_argument("--replay", required=True)
    ap.add_argument("--update", action="store_true", help="rewrite the committed copies")
    ap.add_argument("--only", default="", help="only cases whose name contains this")
    args = ap.parse_args()
    os.makedirs(EXPECTED, exist_ok=True)
    failed, checked, wanted = [], 0, set()
    for name, inp, fmt, topo in cases():
        if args.only not in name:
            continue
        for suffix, argv in outputs(args, inp, fmt, topo).items():
            path = os.path.join(EXPECTED, f"{name}.{suffix}.json.gz")
            wanted.add(path)
            got = run(argv)
            if args.update:
                with gzip.GzipFile(path, "wb", mtime=0) as f:
                    f.write(got)
                continue
            checked += 1
            if not os.path.exists(path):
                failed.append(f"{name}.{suffix}: no committed copy ({path}); run scripts/update-goldens")
                continue
            with gzip.open(path, "rb") as f:
                want = f.read()
            if got != want:
                diff = difflib.unified_diff(pretty(want), pretty(got),
                                            "expected", "now", lineterm="", n=2)
                failed.append(f"{name}.{suffix}: differs\n" + "\n".join(list(diff)[:60]))
    if args.update:
        if not args.only:
            for f in os.listdir(EXPECTED):
                if os.path.join(EXPECTED, f) not in wanted:
                    os.remove(os.path.join(EXPECTED, f))
        print(f"goldens: wrote {len(wanted)} files to {EXPECTED}")
        return 0
    for f in failed:
        print("FAIL " + f)
    print(f"goldens: {checked - len(failed)}/{checked} identical")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
