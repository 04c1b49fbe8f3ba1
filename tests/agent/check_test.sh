#!/usr/bin/env bash
# netprism-agent --check: exit 0 with an "environment ok" line when the agent could run; exit 2 with one line
# per missing piece (interface, capabilities), each naming what is missing and how to fix it.
set -u
agent=$1
fails=0
tmp=$(mktemp -d /tmp/np-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if [[ $(id -u) != 0 ]]; then
  if [[ ${CI:-} == true ]]; then echo "FAIL: needs root under CI"; exit 1; fi
  echo "SKIP: needs root"; exit 0
fi

out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" 2>&1); rc=$?
[[ $rc == 0 ]] || fail "--check --iface lo exited $rc: $out"
[[ $out == *"environment ok"* ]] || fail "--check did not say ok: $out"
[[ -e $tmp/spool ]] && fail "--check must not create the spool directory"

out=$("$agent" --check --insecure --iface lo --iface np-nosuch$$ --spool-dir "$tmp/spool" 2>&1); rc=$?
[[ $rc == 2 ]] || fail "--check with a missing interface exited $rc"
[[ $(grep -c . <<<"$out") == 1 ]] || fail "expected exactly one line, got: $out"
[[ $out == *"np-nosuch$$"*"does not exist"* ]] || fail "line does not name the interface: $out"

out=$("$agent" --check --insecure --spool-dir "$tmp/spool" 2>&1); rc=$?
[[ $rc == 2 && $out == *"--iface"* ]] || fail "--check without interfaces: rc $rc, $out"

out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" --aggregator tcp://127.0.0.1 2>&1); rc=$?
[[ $rc == 2 && $out == *"no port"* && $(grep -c . <<<"$out") == 1 ]] || fail "endpoint without port: rc $rc, $out"

# CURVE is the default: without --key/--server-pub (or --insecure) the check fails and names the fix.
out=$("$agent" --check --iface lo --spool-dir "$tmp/spool" 2>&1); rc=$?
[[ $rc == 2 && $out == *"--key"*"--insecure"* && $(grep -c . <<<"$out") == 1 ]] || fail "no keys: rc $rc, $out"

# Without privileges: one line per missing capability, each naming it.
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$agent" --check --insecure --iface lo \
      --spool-dir "$tmp/spool" 2>&1); rc=$?
[[ $rc == 2 ]] || fail "unprivileged --check exited $rc"
for cap in CAP_BPF CAP_PERFMON CAP_NET_ADMIN; do
  [[ $(grep -c "missing capability $cap " <<<"$out") == 1 ]] || fail "no single line for $cap: $out"
done

# The kernel side: the probe variant the agent would load, and why (issue 16 item 5); forced by flag or file.
out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" 2>&1); rc=$?
[[ $rc == 0 && $out == *"probe variant "*" (auto; kernel $(uname -r): bpf_loop "* ]] ||
  fail "--check does not name the probe variant: rc $rc, $out"
out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" --probe-variant compat 2>&1); rc=$?
[[ $rc == 0 && $out == *"probe variant compat (forced;"* ]] || fail "--probe-variant compat: rc $rc, $out"
out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" --probe-variant legacy 2>&1); rc=$?
[[ $rc == 2 && $out == *"probe-variant"* ]] || fail "unknown variant not refused: rc $rc, $out"
printf '[probe]\nvariant = "compat"\n' >"$tmp/variant.toml"
out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" --config "$tmp/variant.toml" 2>&1); rc=$?
[[ $rc == 0 && $out == *"probe variant compat (forced;"* ]] || fail "probe.variant from the file: rc $rc, $out"
printf '[probe]\nvariant = "old"\n' >"$tmp/variant.toml"
out=$("$agent" --check --insecure --iface lo --spool-dir "$tmp/spool" --config "$tmp/variant.toml" 2>&1); rc=$?
[[ $rc != 0 && $out == *"probe variant must be auto, modern or compat"* ]] || fail "bad probe.variant: rc $rc, $out"

# A config file naming a missing interface is checked the same way; flags override it.
printf 'iface = ["np-cfg%s"]\nspool_dir = "%s"\n' $$ "$tmp/s2" >"$tmp/agent.toml"
out=$("$agent" --check --insecure --config "$tmp/agent.toml" 2>&1); rc=$?
[[ $rc == 2 && $out == *"np-cfg$$"* ]] || fail "config iface not checked: rc $rc, $out"
out=$("$agent" --check --insecure --config "$tmp/agent.toml" --iface lo 2>&1); rc=$?
[[ $rc == 0 ]] || fail "--iface should override the file: rc $rc, $out"
printf 'ifaces = ["lo"]\n' >"$tmp/bad.toml"
out=$("$agent" --check --insecure --config "$tmp/bad.toml" 2>&1); rc=$?
[[ $rc == 1 && $out == *"ifaces"* ]] || fail "bad key not named: rc $rc, $out"

((fails == 0)) && echo "agent --check: all checks passed" || exit 1
