#!/usr/bin/env bash
# Scaling benchmark (issue 9): offline analysis of simulated clusters of 256..2,048 nodes (four jobs sharing
# the cluster, 100 iterations each), on one core. Prints wall time and peak RSS per size, their growth relative
# to the smallest size measured in the same run, and the accuracy score of each.
# usage: bench/scale/run_scale.sh BUILD_DIR [SIZES...]
set -euo pipefail
build=$(cd "${1:-build}" && pwd); shift || true
sizes=("${@:-256 512 1024 2048}")
read -ra sizes <<<"${sizes[*]}"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/np-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
sim=$build/bench/scale/netprism-sim
cli=$build/aggregator/netprism
printf '%6s %9s %8s %9s %9s %10s %s\n' nodes transfers wall_s rss_mb wall_x rss_x accuracy
base_wall= base_rss= base_n=
for n in "${sizes[@]}"; do
  "$sim" generate --nodes "$n" --scale-preset --iterations 100 --seed "$n" \
    --csv "$work/$n.csv" --topology "$work/$n.topo" --truth "$work/$n.truth.json" 2>/dev/null
  rows=$(($(wc -l <"$work/$n.csv") - 1))
  # One core, as the target says; GNU time reports the peak RSS.
  /usr/bin/time -f '%e %M' -o "$work/$n.time" taskset -c 0 "$cli" analyze --input "$work/$n.csv" --format csv \
    --topology "$work/$n.topo" --json >"$work/$n.result.json"
  read -r wall rss_kb <"$work/$n.time"
  score=$(/usr/bin/python3 "$here/score_sim.py" --truth "$work/$n.truth.json" --result "$work/$n.result.json" |
    tail -1 | awk '{print $2}')
  rss=$((rss_kb / 1024))
  [[ -z $base_wall ]] && base_wall=$wall base_rss=$rss base_n=$n
  printf '%6d %9d %8.2f %9d %9.2f %10.2f %s\n' "$n" "$rows" "$wall" "$rss" \
    "$(echo "$wall / $base_wall" | bc -l)" "$(echo "$rss / $base_rss" | bc -l)" "$score"
done
echo "(wall_x, rss_x: relative to $base_n nodes; linear growth would be the node ratio)"
