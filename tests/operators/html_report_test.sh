#!/usr/bin/env bash
# `netprism report --html FILE` (issue 19): a straggler run (netprism-sim, DP2 x PP2, node 1 1.6x slower from
# iteration 10) rendered to one self-contained page. Checks: the page references nothing outside itself (no
# scripts, stylesheets, images or URLs); it has a step-time chart per job with every finding of
# `netprism diagnose`-equivalent output marked on it; headless Chromium (Debian `chromium`, with every host
# name unresolvable so any fetch would fail and be logged) renders it to a PNG without a single error, and its
# rendered DOM still holds the chart. Also `analyze --input ... --perfetto FILE` (the trace of a recording) and
# the progress line of `analyze` (terminal only).
# usage: html_report_test.sh NETPRISM SIM
set -euo pipefail
netprism=$1 sim=$2
command -v chromium > /dev/null || { echo "chromium not installed (scripts/setup installs it)" >&2; exit 1; }
work=$(mktemp -d /tmp/np-html.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$sim" generate --csv "$work/run.csv" --topology "$work/run.topo" --nodes 4 \
  --job "dp=2,pp=2,mb=4,sched=1f1b,iters=40" --fault "job=0,kind=straggler,node=1,factor=1.6,from=10" > /dev/null
"$netprism" report --input "$work/run.csv" --topology "$work/run.topo" --html "$work/report.html" --json \
  > "$work/wrote.json"
"$netprism" analyze --input "$work/run.csv" --topology "$work/run.topo" --json > "$work/analysis.json"
page=$work/report.html

# Long commands show progress on a terminal (here a pty from script(1)) and print nothing extra when piped.
"$netprism" analyze --input "$work/run.csv" --topology "$work/run.topo" 2> "$work/piped.err" > /dev/null
[[ ! -s $work/piped.err ]] || fail "analyze wrote to a piped stderr: $(cat "$work/piped.err")"
tty_out=$(script -qec "'$netprism' analyze --input '$work/run.csv' --topology '$work/run.topo' > /dev/null" /dev/null)
[[ $tty_out == *"analysing"*"flow events"* ]] || fail "no progress on a terminal: $tty_out"

# The Perfetto export also works from a recording: every job's iterations and findings in one trace.
"$netprism" analyze --input "$work/run.csv" --topology "$work/run.topo" --perfetto "$work/trace.json" --json \
  > "$work/trace-summary.json"
python3 - "$work/trace.json" "$work/analysis.json" "$work/trace-summary.json" << 'EOF'
import json, sys
trace, analysis, summary = (json.load(open(p)) for p in sys.argv[1:4])
ev = trace["traceEvents"]
assert summary["events"] == len(ev) and summary["jobs"] == len(analysis["jobs"]), summary
for pid, j in enumerate(analysis["jobs"], 1):
    its = {e["args"]["index"] for e in ev if e["pid"] == pid and e.get("cat") == "iteration"}
    assert its == {it["index"] for it in j["iterations"]}, f"job {j['id']}: trace iterations differ"
    found = {(e["args"]["kind"], e["args"]["subject"]) for e in ev if e["pid"] == pid and e.get("cat") == "finding"}
    assert found == {(f["kind"], f["subject"]) for f in j["findings"]}, f"job {j['id']}: trace findings differ"
EOF

# Self-contained: nothing that a browser would fetch.
external='<script|<link|<img|<iframe|src=|href="(https?:|//)|url\(|@import|https?://'
if grep -Eiq "$external" "$page"; then
  fail "the page references something outside itself: $(grep -Eio "$external" "$page" | head -3)"
fi
python3 - "$page" "$work/analysis.json" << 'EOF'
import html, json, re, sys
page, analysis = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
jobs = analysis["jobs"]
assert jobs, "the recording has no job"
for j in jobs:
    assert f'id="job-{j["id"]}"' in page, f"no section for job {j['id']}"
    assert page.count('<polyline class="step"') >= len(jobs), "a job has no step-time chart"
    labels = {html.unescape(m) for m in re.findall(r'<text class="flabel"[^>]*>([^<]*)</text>', page)}
    for f in j["findings"]:
        assert f'{f["kind"]}: {f["subject"]}' in labels, f"finding {f['kind']} {f['subject']} not on the chart"
    assert any(f["kind"] == "straggler" for f in j["findings"]), "the straggler was not found"
    points = re.search(r'<polyline class="step" points="([^"]*)"', page).group(1).split()
    assert len(points) == len(j["iterations"]), f"{len(points)} chart points for {len(j['iterations'])} iterations"
assert "<h3>phases</h3>" in page and 'class="bar"' in page, "no phase breakdown"
EOF

# Rendered by a real browser, offline: no errors, a PNG of the page, the chart in the rendered DOM.
flags=(--headless=new --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions
  --host-resolver-rules="MAP * ~NOTFOUND" --enable-logging=stderr --v=0 --user-data-dir="$work/profile")
timeout 120 chromium "${flags[@]}" --window-size=1000,1400 --screenshot="$work/report.png" "file://$page" \
  2> "$work/chromium.log" || fail "chromium failed: $(tail -5 "$work/chromium.log")"
timeout 120 chromium "${flags[@]}" --dump-dom "file://$page" > "$work/dom.html" 2>> "$work/chromium.log" ||
  fail "chromium --dump-dom failed"
# Chromium logs page problems as CONSOLE messages and failed loads as net::ERR_; dbus/GPU noise is not the page's.
if grep -E 'CONSOLE|net::ERR_|Uncaught|Failed to load|Not allowed to load' "$work/chromium.log"; then
  fail "the page logged errors in chromium"
fi
python3 - "$work/report.png" "$work/dom.html" << 'EOF'
import struct, sys
png = open(sys.argv[1], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG"
w, h = struct.unpack(">II", png[16:24])
assert (w, h) == (1000, 1400), f"screenshot is {w}x{h}"
assert len(png) > 20000, f"the screenshot is nearly empty ({len(png)} bytes)"
dom = open(sys.argv[2]).read()
assert "<polyline" in dom and "netprism fleet report" in dom, "the rendered DOM lost the chart"
EOF
echo "ok: $(cat "$work/wrote.json"), screenshot $(stat -c %s "$work/report.png") bytes"
