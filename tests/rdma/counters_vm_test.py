#!/usr/bin/python3
"""CTest rdma_counters_vm (issue 16 item 4): `scripts/rdmabed run --dp 2 --pp 1 --slow-rank 1 --slow-ms 300
--slow-from 6 --counters-only` trains on OpenMPI + UCX over the soft-RoCE VMs with each agent's probe kept off
the RDMA traffic (what it reads on a NIC whose RoCE bypasses tc/XDP: port counters and QP tables), and its
contract JSON must say:
  - the probe saw none of the RoCE bytes (verbs_bytes_seen 0), and the answer's source is the counters;
  - one job, its nodes and DP group exact, pp 1;
  - every truth iteration but the first two matched;
  - duration error median <= 1 % and p95 <= 3 % (item 4's bounds, absolute);
  - the straggler (rank 1 = node1, 300 ms late from iteration 6) named within 3 iterations of its start, and
    nothing else found;
  - the finished job reads `ended` (its end from the QP tables).
Usage: counters_vm_test.py RDMABED BUILD_DIR. Exit 77 when rdmabed says it cannot run without root outside CI.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vm_contract import Run  # noqa: E402


def main():
    run = Run(sys.argv[1], sys.argv[2], ["--dp", "2", "--pp", "1", "--slow-rank", "1", "--slow-ms", "300",
                                         "--slow-from", "6", "--counters-only"], "rdma-counters-")
    if run.code is not None:
        return run.code
    res, need = run.res, run.need
    need("the probe saw none of the RoCE bytes", res["verbs_bytes_sent"] > 0 and res["verbs_bytes_seen"] == 0)
    need("source counters", res["source"] == "counters")
    run.need_dp2_structure()
    for q, lim in (("median", 1.0), ("p95", 3.0)):
        err = res[f"err_{q}_pct"]
        need(f"duration error {q} {err} % <= {lim} %", err is not None and err <= lim)
    stragglers = [f for f in res["findings"] if f[0] == "straggler"]
    need("the straggler node1 named within 3 iterations of iteration 6",
         len(stragglers) == 1 and stragglers[0][1] == "node1" and abs(stragglers[0][2] - 6) <= 3)
    need("nothing else found", len(res["findings"]) == len(stragglers))
    need("the finished job reads ended", res["state"] == "ended")
    return run.verdict()


if __name__ == "__main__":
    sys.exit(main())
