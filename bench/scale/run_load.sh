#!/usr/bin/env bash
# Ingest load test (issue 9): N virtual agents (real DEALER sockets, the real wire protocol) at R records/s each
# plus heartbeats, streaming to one aggregator for D seconds. Reports records/s, whether ingest kept up
# (unacknowledged batches over time), zero loss (acknowledged = stored, from `netprism status`), and the
# aggregator's peak RSS.
# usage: bench/scale/run_load.sh BUILD_DIR [AGENTS] [RATE] [DURATION_S]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
agents=${2:-1000} rate=${3:-200} duration=${4:-60}
work=$(mktemp -d /tmp/np-load.XXXXXX)
port=$((20000 + RANDOM % 20000))
ulimit -n "$(ulimit -Hn)" || true
"$build/aggregator/netprism-aggregator" --listen "tcp://127.0.0.1:$port" --query "tcp://127.0.0.1:$((port + 1))" \
  --data-dir "$work/data" >"$work/agg.log" 2>&1 &
agg=$!
trap 'kill $agg 2>/dev/null; wait $agg 2>/dev/null; rm -rf "$work"' EXIT
sleep 1
peak=0
( while kill -0 $agg 2>/dev/null; do
    r=$(awk '/VmRSS/{print $2}' /proc/$agg/status 2>/dev/null || echo 0); echo "$r"; sleep 1
  done >"$work/rss" ) &
"$build/bench/scale/netprism-sim" load --aggregator "tcp://127.0.0.1:$port" --agents "$agents" --rate "$rate" \
  --duration "$duration" | tee "$work/load.out"
stored=$("$build/aggregator/netprism" --aggregator "tcp://127.0.0.1:$((port + 1))" status --json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["records_total"])')
acked=$(sed -n 's/.*records_acked=\([0-9]*\).*/\1/p' "$work/load.out" | tail -1)
peak=$(sort -n "$work/rss" | tail -1)
echo "stored_records=$stored acked_records=$acked lost=$((acked - stored)) aggregator_peak_rss_mb=$((peak / 1024))"
[[ $stored == "$acked" ]]
