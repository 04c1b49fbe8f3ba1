#!/usr/bin/env bash
# Exit-code conventions of contracts.md for netprism, netprism-agent and netprism-aggregator.
set -u
fails=0
expect() {  # expect CODE CMD...
  local want=$1; shift
  local out err rc
  err=$("$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc != "$want" ]]; then
    echo "FAIL: '$*' exited $rc, expected $want (stderr: $err)"; fails=$((fails + 1))
  elif [[ $want == 2 && $(printf '%s\n' "$err" | grep -c .) != 1 ]]; then
    echo "FAIL: '$*' should print exactly one line on stderr, printed: $err"; fails=$((fails + 1))
  else
    echo "ok: '$*' -> $rc"
  fi
}
for bin in "$@"; do
  expect 0 "$bin" --version
  expect 0 "$bin" --help
  expect 2 "$bin" --no-such-flag
  v=$("$bin" --version)
  [[ $v == *0.* ]] || { echo "FAIL: $bin --version printed '$v'"; fails=$((fails + 1)); }
done
cli=$1
expect 2 "$cli" status --no-such-flag
expect 2 "$cli" --aggregator
expect 2 "$cli" no-such-command
expect 0 "$cli" status --help
expect 2 "$2" --mode bogus
((fails == 0)) && echo "all CLI convention checks passed" || exit 1
