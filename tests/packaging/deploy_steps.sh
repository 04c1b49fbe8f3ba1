# docs/deploy.md's steps 3, 5 and 8 in the clean root of packages_test.sh, with the installed packages (sourced
# there: uses $root, $work, inroot and fail). No systemd runs in the root, so the aggregator is started the way
# its unit would start it (same ExecStart), as root; the agent only runs its --check (attaching needs a node),
# and synthetic agents from the build ($build/tests/aggregator/np_feed) feed it a job.
deploy_steps() {
  local port iport qport token pid i code exec_start
  # Three ports the kernel hands out as free, held at once so they differ (port + 1 and + 2, before, could be
  # taken: after a load test's thousand connections, the suite's next run failed to bind them).
  read -r port iport qport < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
  # The packaged aggregator.toml parses (the aggregator rejects unknown keys; its sections are commented out).
  local data=/tmp/np-deploy-data
  chroot "$root" /usr/bin/netprism-aggregator --config /etc/netprism/aggregator.toml --data-dir $data \
    --listen "tcp://127.0.0.1:$iport" --query "tcp://127.0.0.1:$qport" >"$work/agg0.log" 2>&1 &
  pid=$!
  for i in $(seq 100); do grep -q listening "$work/agg0.log" && break; sleep 0.1; done
  grep -q listening "$work/agg0.log" && echo "ok: deploy: the packaged aggregator.toml is accepted" ||
    fail "deploy: the packaged aggregator.toml: $(cat "$work/agg0.log")"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "${root:?}$data"
  # Step 3: the aggregator's config with the HTTP endpoint and its token file.
  # insecure: the synthetic agents (np_feed) and this script's CLI speak plain TCP; the keys step (4) is
  # checked by packages_test.sh (key made on install) and the CURVE tests (auth_tests, aggregator_cli).
  cat >"$root/etc/netprism/aggregator.toml" <<TOML
listen = "tcp://127.0.0.1:$iport"
query = "tcp://127.0.0.1:$qport"
insecure = true

[http]
listen = "127.0.0.1:$port"
token_file = "/etc/netprism/http.token"
TOML
  head -c 32 /dev/urandom | base64 >"$root/etc/netprism/http.token"
  token=$(cat "$root/etc/netprism/http.token")
  exec_start=$(sed -n 's/^ExecStart=//p' "$root/usr/lib/systemd/system/netprism-aggregator.service")
  # shellcheck disable=SC2086 # ExecStart is a command line
  chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin $exec_start >"$work/aggregator.log" 2>&1 &
  pid=$!
  for i in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics" || true)
    [[ $code == 200 ]] && break
    sleep 0.1
  done
  [[ $code == 200 ]] && echo "ok: deploy: /metrics answers as configured" ||
    { cat "$work/aggregator.log"; fail "deploy: /metrics did not answer (HTTP $code)"; }
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/v1/jobs")
  [[ $code == 401 ]] && echo "ok: deploy: the API wants the token" || fail "deploy: /api/v1/jobs without token: $code"
  # Step 8: the first diagnosis. Agents cannot attach probes in this root, so np_feed (the test suite's
  # synthetic agents, real wire protocol) plays a 4-node data-parallel job into the installed aggregator.
  local q="tcp://127.0.0.1:$qport" job=""
  if "$build/tests/aggregator/np_feed" --endpoint "tcp://127.0.0.1:$iport" --nodes 4 --iterations 20 \
    --step-ms 200 >"$work/feed.log" 2>&1; then
    for i in $(seq 50); do
      job=$(inroot netprism --insecure --aggregator "$q" --json jobs | grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4 ||
        true)
      [[ -n $job ]] && break
      sleep 0.2
    done
  fi
  [[ -n $job ]] && echo "ok: deploy: netprism jobs shows job $job" || fail "deploy: no job recognised"
  inroot netprism --insecure --aggregator "$q" status >/dev/null && echo "ok: deploy: netprism status" ||
    fail "deploy: netprism status"
  inroot netprism --insecure --aggregator "$q" diagnose "$job" >/dev/null && echo "ok: deploy: netprism diagnose $job" ||
    fail "deploy: netprism diagnose"
  curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$port/api/v1/timeline/$job" | grep -q '"iterations"' &&
    echo "ok: deploy: /api/v1/timeline with the token" || fail "deploy: /api/v1/timeline/$job with the token"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # The token is the operator's file, not the package's: purge leaves it (as dpkg does), so remove it here.
  rm -f "$root/etc/netprism/http.token"
  # Step 5: a configured agent passes the configuration stage (exit 0, or 2 naming an environment problem of
  # this build host, never the missing aggregator).
  printf 'aggregator = "tcp://127.0.0.1:%s"\niface = ["lo"]\n' $iport >"$root/etc/netprism/agent.toml"
  local rc=0 out
  out=$(inroot netprism-agent --check --config /etc/netprism/agent.toml 2>&1) || rc=$?
  [[ ($rc == 0 || $rc == 2) && $out != *"no aggregator configured"* ]] && echo "ok: deploy: agent --check (exit $rc)" ||
    fail "deploy: configured agent --check: exit $rc: $out"
}
