#!/usr/bin/python3
"""Two testbed recordings as two tenants sharing the same servers (issue 17: tenants sharing one server's NICs).

The transform, so the resulting sample is real traffic of two real jobs and its truth is each run's own:
  - recording B is shifted in time by OFFSET seconds relative to recording A's first row (flows' start_ns and
    end_ns, and every time in B's truth logs: iter start/compute_end/sync_end/step_end, end time, run.json's
    launched_at), so the two jobs run at the same time;
  - B keeps its own addresses (each testbed run has its own subnet), and the topology maps A's address of node
    nI and B's address of node nI to the same node nI: every server has two NICs, one per tenant, as a GPU
    server partitioned between two jobs (each job's GPUs and their NICs) is;
  - B's job is renamed (job0 -> job1) in run.json and its truth logs; the flows are merged and sorted by start.
Nothing else changes: every row of both captures is kept as recorded.

  merge_tenants.py A_DIR B_DIR OUT_DIR [--offset SECONDS]
"""
import argparse
import csv
import gzip
import io
import json
import os
import shutil


def read_rows(d):
    with gzip.open(os.path.join(d, "flows.csv.gz"), "rt") as f:
        r = csv.reader(f)
        return next(r), list(r)


def first_ns(rows, header):
    i = header.index("start_ns")
    return min(int(row[i]) for row in rows)


def shift_truth(src, dst, job_from, job_to, dt):
    times = ("start", "compute_end", "sync_end", "step_end", "time")
    os.makedirs(dst, exist_ok=True)
    for fn in sorted(os.listdir(src)):
        with open(os.path.join(src, fn)) as fi, open(os.path.join(dst, fn), "w") as fo:
            for line in fi:
                rec = json.loads(line)
                if rec.get("job") == job_from:
                    rec["job"] = job_to
                for k in times:
                    if isinstance(rec.get(k), (int, float)) and rec[k] > 1e9:
                        rec[k] += dt
                fo.write(json.dumps(rec) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("out")
    ap.add_argument("--offset", type=float, default=1.0, help="B starts this many seconds after A")
    args = ap.parse_args()
    ha, ra = read_rows(args.a)
    hb, rb = read_rows(args.b)
    assert ha == hb, "both recordings must have the same CSV columns"
    dt_ns = first_ns(ra, ha) + int(args.offset * 1e9) - first_ns(rb, hb)
    s, e = ha.index("start_ns"), ha.index("end_ns")
    for row in rb:
        row[s] = str(int(row[s]) + dt_ns)
        row[e] = str(int(row[e]) + dt_ns)
    rows = sorted(ra + rb, key=lambda row: int(row[s]))
    os.makedirs(args.out, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(ha)
    w.writerows(rows)
    with gzip.GzipFile(os.path.join(args.out, "flows.csv.gz"), "wb", mtime=0) as f:
        f.write(buf.getvalue().encode())
    with open(os.path.join(args.out, "topology.txt"), "w") as fo:
        for d in (args.a, args.b):
            with open(os.path.join(d, "topology.txt")) as fi:
                fo.write(fi.read())
    with open(os.path.join(args.a, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(args.b, "run.json")) as f:
        run_b = json.load(f)
    dt = dt_ns / 1e9
    (jb,) = run_b["jobs"]
    job_from = jb["name"]
    jb = dict(jb, name="job1")
    if "launched_at" in jb:
        jb["launched_at"] += dt
    run["jobs"] = run["jobs"] + [jb]
    run["faults"] = run.get("faults", []) + [dict(f, job="job1") for f in run_b.get("faults", [])]
    run["command"] = ["tests/e2e/merge_tenants.py", os.path.basename(os.path.normpath(args.a)),
                      os.path.basename(os.path.normpath(args.b)), "--offset", str(args.offset)]
    with open(os.path.join(args.out, "run.json"), "w") as f:
        json.dump(run, f, indent=1)
    truth = os.path.join(args.out, "truth")
    shutil.rmtree(truth, ignore_errors=True)
    shutil.copytree(os.path.join(args.a, "truth"), truth)
    shift_truth(os.path.join(args.b, "truth", job_from), os.path.join(truth, "job1"), job_from, "job1", dt)


if __name__ == "__main__":
    main()
