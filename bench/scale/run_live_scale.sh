#!/usr/bin/env bash
# Live scale benchmark (issue 20): the target cluster (1,250 nodes x 8 NICs, 20 concurrent jobs of 8-512 nodes
# starting and ending, steps 0.5-10 s) streamed in real time through a real aggregator, plus every testbed
# recording and the SimAI sample replayed as copies on nodes of their own; prints progress and, as its last
# line, one JSON object (see live_scale.py for every field).
# usage: bench/scale/run_live_scale.sh BUILD_DIR [--minutes N] [--nodes N] [--jobs N] [--copies N] [--nics N]
set -euo pipefail
build=$(cd "${1:?usage: run_live_scale.sh BUILD_DIR [--minutes N] [--nodes N] [--jobs N]}" && pwd)
shift
minutes=30 nodes=1250 jobs=20 copies=2 nics=8
while (($#)); do
  case $1 in
    --minutes) minutes=$2 ;;
    --nodes) nodes=$2 ;;
    --jobs) jobs=$2 ;;
    --copies) copies=$2 ;;
    --nics) nics=$2 ;;
    *) echo "run_live_scale.sh: unknown option $1" >&2 && exit 2 ;;
  esac
  shift 2
done
ulimit -n "$(ulimit -Hn)" || true
exec /usr/bin/python3 "$(dirname "$0")/live_scale.py" "$build" "$minutes" "$nodes" "$jobs" "$copies" "$nics"
