#!/usr/bin/env bash
# The analysis over one of the testbed's committed recordings (tests/e2e/samples/NAME), scored against the
# recording's own ground truth by the testbed's scorer with the acceptance thresholds of issues 7 and 8
# (exact structure and state, no missing/extra iterations after the first two, duration error median <= 0.3 %
# and p95 <= 1 % or within 1.5 x the truth's own noise, faults named within 3 iterations, no false positives).
#   score_samples.sh ANALYZE_FILE SAMPLES_DIR NAME   (ANALYZE_FILE: the netprism CLI for a recording.db sample)
set -euo pipefail
analyze=$1 samples=$2 name=$3
dir=$samples/$name
out=$(mktemp /tmp/np-analysis-sample-XXXXXX.json)
trap 'rm -f "$out"' EXIT
if [[ -f $dir/recording.db ]]; then # a native recording: ANALYZE is the netprism CLI
  "$analyze" analyze --input "$dir/recording.db" --format native --json >"$out"
else
  "$analyze" "$dir/flows.csv.gz" "$dir/topology.txt" >"$out"
fi
# A recording whose README names a known limit of the analysis keeps its own, stated, thresholds in
# score_args (one line of score.py options; the soft-RoCE recording: tests/e2e/samples/README.md).
if [[ -f $dir/score_args ]]; then
  read -ra args <"$dir/score_args"
  /usr/bin/python3 "$samples/../score.py" "$dir" --json "$out" "${args[@]}"
  exit
fi
# Not exec: the EXIT trap must still remove the answer (an exec'd scorer left one file per run in /tmp).
/usr/bin/python3 "$samples/../score.py" "$dir" --json "$out" --strict --max-median-err 0.3 \
  --max-p95-err 1.0 --noise-factor 1.5 --grace 2 --max-missing 0 --max-extra 0 --max-finding-delay 3
