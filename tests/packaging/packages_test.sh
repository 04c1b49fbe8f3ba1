#!/usr/bin/env bash
# Packaging acceptance (issues 10, 19): cpack makes the .debs and .rpms of netprism-agent, netprism-aggregator and
# netprism-cli with the contract's names; lintian reports no errors; rpm -qlp lists the expected files; the .debs
# install with apt into a clean Debian 12 minbase root (debootstrap), where `netprism --version` and
# `netprism-agent --check` run and the units verify; docs/deploy.md's configuration steps work there
# (deploy_steps.sh); purge leaves nothing behind.
# usage: packages_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (debootstrap, chroot)"; [[ ${CI:-} == true ]] && exit 1; exit 0; }

work=$(mktemp -d /tmp/np-pkg.XXXXXX)
root=$work/root
cleanup() {
  for m in proc sys dev; do umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
[[ -n $version ]] || { echo "FAIL: no version in CPackConfig.cmake"; exit 1; }
arch=$(dpkg --print-architecture)
rarch=$(uname -m)

echo "== cpack"
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log"; exit 1; }
for f in "netprism-agent_${version}_${arch}.deb" "netprism-aggregator_${version}_${arch}.deb" \
         "netprism-cli_${version}_${arch}.deb" "netprism-agent-${version}-1.${rarch}.rpm" \
         "netprism-aggregator-${version}-1.${rarch}.rpm" "netprism-cli-${version}-1.${rarch}.rpm"; do
  [[ -f $work/out/$f ]] && echo "ok: $f" || fail "missing package $f (have: $(ls "$work/out"))"
done

echo "== lintian"
for d in "$work"/out/*.deb; do
  out=$(lintian --tag-display-limit 0 "$d" 2>&1 | grep -v 'root privileges' || true)
  echo "$out"
  grep -q '^E:' <<<"$out" && fail "lintian errors in $(basename "$d")"
done

echo "== rpm -qlp"
expect_rpm() {  # rpm file...
  local rpm=$1; shift
  local list; list=$(rpm -qlp "$rpm")
  for f in "$@"; do grep -qx "$f" <<<"$list" && echo "ok: $(basename "$rpm") has $f" || fail "$(basename "$rpm") lacks $f"; done
  # The daemons' packages carry their config; the CLI has none.
  [[ $rpm == */netprism-cli-* ]] || rpm -qp --configfiles "$rpm" | grep -q '^/etc/netprism/' ||
    fail "$(basename "$rpm") has no %config file"
}
expect_rpm "$work/out/netprism-agent-${version}-1.${rarch}.rpm" /usr/bin/netprism-agent \
  /usr/lib/systemd/system/netprism-agent.service /etc/netprism/agent.toml /usr/share/man/man1/netprism-agent.1.gz
expect_rpm "$work/out/netprism-aggregator-${version}-1.${rarch}.rpm" /usr/bin/netprism-aggregator \
  /usr/lib/systemd/system/netprism-aggregator.service /etc/netprism/aggregator.toml \
  /usr/share/man/man1/netprism-aggregator.1.gz
expect_rpm "$work/out/netprism-cli-${version}-1.${rarch}.rpm" /usr/bin/netprism /usr/share/man/man1/netprism.1.gz \
  /usr/share/bash-completion/completions/netprism
rpm -qp --requires "$work/out/netprism-aggregator-${version}-1.${rarch}.rpm" | grep -q '^netprism-cli = ' &&
  echo "ok: the aggregator rpm requires netprism-cli" || fail "the aggregator rpm does not require netprism-cli"

echo "== clean Debian 12 root"
# A pristine minbase root is cached as a tarball: debootstrap costs ~30 s and the network, the copy is cheap.
cache=/var/cache/netprism-tests/bookworm-minbase.tar
if [[ ! -f $cache ]]; then
  mkdir -p "$(dirname "$cache")" "$work/boot"
  debootstrap --variant=minbase bookworm "$work/boot" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; exit 1; }
  tar -C "$work/boot" -cf "$cache.tmp" . && mv "$cache.tmp" "$cache"
  rm -rf "$work/boot"
fi
mkdir -p "$root" && tar -C "$root" -xf "$cache"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
cp "$work"/out/*.deb "$root/tmp/"
inroot() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
source "$(dirname "$0")/deploy_steps.sh"
inroot apt-get update -qq >"$work/apt.log" 2>&1 || { tail "$work/apt.log"; exit 1; }
if inroot sh -c 'apt-get install -y -qq /tmp/netprism-*.deb' >>"$work/apt.log" 2>&1; then
  echo "ok: apt installed the packages"
else
  tail -30 "$work/apt.log"; fail "apt could not install the packages"
fi
inroot netprism --version && echo "ok: netprism --version" || fail "netprism --version in the clean root"
# As packaged the agent has no aggregator endpoint: it says what to set and exits 2 (which its unit does not
# restart on) instead of spooling towards 127.0.0.1.
rc=0; out=$(inroot netprism-agent --check 2>&1) || rc=$?
[[ $rc == 2 && $out == *"no aggregator configured"* ]] && echo "ok: unconfigured agent: $out" ||
  fail "unconfigured netprism-agent --check: exit $rc: $out"
grep -q '^RestartPreventExitStatus=2' "$root/usr/lib/systemd/system/netprism-agent.service" &&
  echo "ok: agent unit does not restart on exit 2" || fail "agent unit restarts on a configuration error"
grep -q -- '--data-dir' "$root/usr/lib/systemd/system/netprism-aggregator.service" &&
  fail "the aggregator unit overrides data_dir" || echo "ok: aggregator unit leaves data_dir to the config"
# The aggregator's CURVE key: made on install (0640, service group), never shipped in the package.
st=$(inroot stat -c '%a %G' /etc/netprism/aggregator.key 2>&1)
[[ $st == "640 netprism" ]] && echo "ok: aggregator key created on install" || fail "aggregator key: $st"
dpkg-deb -c "$work"/out/netprism-aggregator_*.deb | grep -q 'aggregator\.key' && fail "a key is in the package" ||
  echo "ok: no key in the package"
deploy_steps
for u in netprism-agent netprism; do inroot getent passwd "$u" >/dev/null && echo "ok: user $u" || fail "no user $u"; done
for p in netprism-agent netprism-aggregator; do
  inroot dpkg-query -W -f='${Conffiles}\n' "$p" | grep -q /etc/netprism/ && echo "ok: $p conffile" ||
    fail "$p has no conffile"
done
# PID 1 is not systemd here and the minbase root has no systemd: verify the installed units with the host's
# systemd-analyze, their ExecStart pointed into the root so the binaries' existence is checked too.
mkdir -p "$work/units"
for u in netprism-agent netprism-aggregator; do
  sed "s#/usr/bin/#$root/usr/bin/#g" "$root/usr/lib/systemd/system/$u.service" >"$work/units/$u.service"
done
out=$(systemd-analyze verify "$work"/units/*.service 2>&1) && [[ -z $out ]] && echo "ok: systemd-analyze verify" ||
  { echo "$out"; fail "systemd-analyze verify"; }
inroot apt-get purge -y -qq netprism-agent netprism-aggregator netprism-cli >>"$work/apt.log" 2>&1 || fail "purge"
left=$(cd "$root" && ls -d etc/netprism var/lib/netprism usr/bin/netprism* 2>/dev/null || true)
[[ -z $left ]] && echo "ok: purge left nothing" || fail "purge left: $left"

((fails == 0)) && echo "packaging: all checks passed" || { echo "packaging: $fails check(s) failed"; exit 1; }
