#!/usr/bin/env bash
# tc filters outlive a crashed agent: after SIGKILL they stay; the next run finds them by program name and
# replaces them (one filter per hook, not two), and its SIGTERM then leaves no filter and no clsact qdisc --
# the qdisc the crashed run added included (remembered by a marker in the spool directory).
set -u
agent=$1
# --unprivileged: run the agent as the packaged unit does -- a non-root user with CAP_BPF, CAP_NET_ADMIN and
# CAP_PERFMON only (no CAP_SYS_ADMIN, so it cannot read programs by id).
wrap=()
if [[ ${2:-} == --unprivileged ]]; then
  wrap=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=+bpf,+net_admin,+perfmon
        --ambient-caps=+bpf,+net_admin,+perfmon)
fi
if [[ $(id -u) != 0 ]]; then
  [[ ${CI:-} == true ]] && { echo "FAIL: needs root under CI"; exit 1; }
  echo "SKIP: needs root"; exit 0
fi
sfx=$$$RANDOM
ns=npcr$sfx; va=npcra${sfx:0:8}; vb=npcrb${sfx:0:8}
tmp=$(mktemp -d /tmp/np-crash-XXXXXX)
chmod 755 "$tmp"; mkdir -p "$tmp/spool" "$tmp/spool2"; chown 65534 "$tmp/spool" "$tmp/spool2"
pid=
cleanup() {
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null
  [[ -n ${early:-} ]] && kill -9 "$early" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
in_ns() { ip netns exec "$ns" "$@"; }
filters() { in_ns tc filter show dev "$va" "$1" | grep -c "np_tc_$1"; }

ip netns add "$ns" && in_ns ip link set lo up &&
  in_ns ip link add "$va" type veth peer name "$vb" && in_ns ip link set "$va" up && in_ns ip link set "$vb" up ||
  { echo "FAIL: setup"; exit 1; }

start() {
  local runs_before
  runs_before=$(grep -c "watching 1 interface" "$tmp/agent.log" 2>/dev/null)
  # `ip netns exec` execs the agent, so $! is the agent itself (a shell function here would add a subshell).
  ip netns exec "$ns" "${wrap[@]}" "$agent" --insecure --aggregator tcp://127.0.0.1:7470 --node crash --iface "$va" \
    --spool-dir "$tmp/spool/s" >>"$tmp/agent.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    [[ $(grep -c "watching 1 interface" "$tmp/agent.log") -gt ${runs_before:-0} &&
       $(filters ingress) == 1 && $(filters egress) == 1 ]] && return 0
    sleep 0.1
  done
  return 1
}

start || fail "first run did not attach"
# A SIGTERM during start-up must still end in a clean shutdown (signals are blocked before attaching).
ip netns exec "$ns" "${wrap[@]}" "$agent" --insecure --aggregator tcp://127.0.0.1:7470 --node early --iface "$vb" \
  --spool-dir "$tmp/spool2/s" >>"$tmp/early.log" 2>&1 &
early=$!
# Once the process is in main() (its name is the agent's), a SIGTERM must lead to a clean exit.
for _ in $(seq 200); do [[ $(cat /proc/$early/comm 2>/dev/null) == netprism-agent ]] && break; sleep 0.005; done
sleep 0.02
kill -TERM "$early"; wait "$early"; rc=$?
[[ $rc == 0 ]] || fail "SIGTERM during start-up: exit status $rc (killed by the signal?): $(cat "$tmp/early.log")"
[[ -z $(in_ns tc filter show dev "$vb" ingress) ]] || fail "SIGTERM during start-up left filters on $vb"
kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
[[ $(filters ingress) == 1 && $(filters egress) == 1 ]] || fail "filters should outlive the crashed run"
start || fail "second run did not attach"
sleep 0.5
[[ $(filters ingress) == 1 ]] || fail "ingress: expected the stale filter replaced, found $(filters ingress)"
[[ $(filters egress) == 1 ]] || fail "egress: expected the stale filter replaced, found $(filters egress)"
kill -TERM "$pid"; wait "$pid"; rc=$?; pid=
[[ $rc == 0 ]] || fail "exit status after SIGTERM: $rc"
out=$(in_ns tc filter show dev "$va" ingress; in_ns tc filter show dev "$va" egress)
[[ -z $out ]] || fail "filters left: $out"
in_ns tc qdisc show dev "$va" | grep -q clsact && fail "clsact qdisc left: $(in_ns tc qdisc show dev "$va")"

if ((fails)); then
  echo "---- agent log"; cat "$tmp/agent.log"; exit 1
fi
echo "agent crash/restart: all checks passed"
