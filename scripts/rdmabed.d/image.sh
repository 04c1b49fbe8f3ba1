#!/usr/bin/env bash
# Builds (once) the soft-RoCE VM's boot files and prints the directory that holds them:
#   vmlinuz     Debian 12's own kernel (linux-image-6.1.*-amd64, from the Debian archive: the host kernel has
#               no rdma_rxe, this one ships it as a module)
#   initrd.img  busybox + the kernel modules listed below + init + vm-init (a few MB: built in seconds)
#   root/       a debootstrap (minbase) root with rdma-core, perftest, ... and the agent's runtime libraries;
#               every VM mounts it read-only over 9p under a tmpfs overlay, so it is never copied per VM
# Cached under CACHE_DIR (default build/rdmabed-cache) by content: the root by a hash of its package list and
# of this script, the initrd by a hash of the scripts it holds and of the kernel version. A changed input
# builds a new entry; nothing is rebuilt otherwise. Usage: image.sh CACHE_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=$(realpath -m "${1:?usage: image.sh CACHE_DIR}")
mirror=http://deb.debian.org/debian # the Debian archive only: nothing else is downloaded

# What runs in the VM. The agent's runtime libraries come from `ldd netprism-agent` (Debian 12 builds).
root_packages=(
  rdma-core ibverbs-providers ibverbs-utils perftest iproute2 procps kmod bpftool
  libbpf1 libzmq5 libtomlplusplus3 libibverbs1 libelf1 libzstd1 libsqlite3-0
  openmpi-bin python3-mpi4py python3-numpy ucx-utils
) # the last line: the training job over RDMA (issue 16 item 3: train_mpi.py on OpenMPI + UCX; ucx_info)
# Loaded in this order by the initrd (dependencies first, from the kernel's modules.dep). crc32_generic:
# without it `rdma link add ... type rxe` fails with "No such file or directory" (checked here, 6.1).
# sch_ingress/cls_bpf: the agent's clsact qdisc and tc programs. 9p/overlay: the shared read-only root.
# veth: the probe's kernel tests under this kernel (tests/bpf/vm_variants.py).
modules=(virtio_pci virtio_net 9p 9pnet_virtio overlay crc32_generic udp_tunnel ip6_udp_tunnel ib_core
  ib_uverbs rdma_rxe sch_ingress cls_bpf veth)

need() {
  command -v "$1" >/dev/null && return
  echo "rdmabed: missing $1 (Debian package $2; scripts/setup installs it)" >&2
  exit 3
}
need debootstrap debootstrap
need busybox busybox-static
need cpio cpio
need modprobe kmod
need dpkg-deb dpkg
[[ $(id -u) -eq 0 ]] || { echo "rdmabed: building the VM image needs root (debootstrap)" >&2; exit 3; }
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # two runs building at once would debootstrap twice into the same place

hash_of() { sha256sum | cut -c1-16; }
root_key=$( (printf '%s\n' "${root_packages[@]}"; sed -n '/^root_packages=/,/^)/p' "$0"; echo "$mirror") | hash_of)

# --- kernel: the package linux-image-amd64 points at, unpacked (no install: no initramfs-tools run) ---
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6\.1/ && !n++ {print $2}')
[[ -n $kpkg ]] || { echo "rdmabed: apt-cache knows no linux-image-6.1.*-amd64 (run apt-get update)" >&2; exit 3; }
kdir=$cache/kernel-$kpkg
if [[ ! -f $kdir/.done ]]; then
  echo "rdmabed: downloading $kpkg from the Debian archive" >&2
  tmp=$(mktemp -d "$cache/tmp.kernel.XXXXXX")
  (cd "$tmp" && apt-get download -qq "$kpkg" 2>&1 | grep -v "^W: Download is performed unsandboxed" >&2 || true)
  deb=$(ls "$tmp"/*.deb 2>/dev/null | sed -n 1p)
  [[ -n $deb ]] || { rm -rf "$tmp"; echo "rdmabed: could not download $kpkg" >&2; exit 3; }
  dpkg-deb -x "$deb" "$tmp/x"
  rm -rf "$kdir" && mv "$tmp/x" "$kdir" && rm -rf "$tmp"
  touch "$kdir/.done"
fi
kver=$(ls "$kdir/lib/modules" | sed -n 1p)
# The package ships no modules.dep (the installer's depmod makes it): make it for modprobe --show-depends.
[[ -f $kdir/lib/modules/$kver/modules.dep ]] || depmod -b "$kdir" "$kver"

# --- root: debootstrap minbase + packages ---
rootdir=$cache/root-$root_key
if [[ ! -f $rootdir/.done ]]; then
  echo "rdmabed: building the VM root (debootstrap, ~1-2 min, once)" >&2
  tmp=$(mktemp -d "$cache/tmp.root.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  inc=$(IFS=,; echo "${root_packages[*]}")
  if ! debootstrap --variant=minbase --include="$inc" bookworm "$tmp/root" "$mirror" >"$tmp/log" 2>&1; then
    tail -20 "$tmp/log" >&2
    echo "rdmabed: debootstrap failed (log above)" >&2
    exit 3
  fi
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"* || true
  rm -rf "$rootdir" && mv "$tmp/root" "$rootdir" && rm -rf "$tmp"
  trap - EXIT
  touch "$rootdir/.done"
fi

# --- initrd: busybox, the modules in dependency order, init + vm-init ---
initrd_key=$( (cat "$here/init" "$here/vm-init" "$0"; echo "$kver"; busybox 2>&1 | sed -n 1p) | hash_of)
out=$cache/boot-$initrd_key
if [[ ! -f $out/.done ]]; then
  tmp=$(mktemp -d "$cache/tmp.initrd.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  ir=$tmp/ir
  mkdir -p "$ir"/{bin,mods,proc,sys,dev,ro,rw,newroot}
  cp "$(command -v busybox)" "$ir/bin/busybox"
  : >"$ir/modules.order"
  for m in "${modules[@]}"; do
    modprobe -d "$kdir" -S "$kver" --show-depends "$m" >"$tmp/dep" ||
      { echo "rdmabed: module $m not in $kpkg" >&2; exit 3; }
    while read -r kind path _; do
      [[ $kind == insmod ]] || continue # builtin: nothing to load
      name=$(basename "$path")
      name=${name%.xz}
      grep -qx "$name" "$ir/modules.order" && continue
      case $path in
        *.xz) xz -dc "$path" >"$ir/mods/$name" ;;
        *) cp "$path" "$ir/mods/$name" ;;
      esac
      echo "$name" >>"$ir/modules.order"
    done <"$tmp/dep"
  done
  install -m 0755 "$here/init" "$ir/init"
  install -m 0755 "$here/vm-init" "$ir/vm-init"
  (cd "$ir" && find . | cpio -o -H newc --quiet) >"$tmp/initrd.img"
  mkdir -p "$tmp/out"
  mv "$tmp/initrd.img" "$tmp/out/"
  cp "$kdir/boot/vmlinuz-$kver" "$tmp/out/vmlinuz"
  rm -rf "$out" && mv "$tmp/out" "$out" && rm -rf "$tmp"
  trap - EXIT
  touch "$out/.done"
fi
ln -sfn "$rootdir" "$out/root"
# Older entries of this cache (other package lists, scripts, kernels): ~200-300 MB each, never used again.
for d in "$cache"/root-* "$cache"/boot-* "$cache"/kernel-*; do
  [[ $d == "$rootdir" || $d == "$out" || $d == "$kdir" ]] || rm -rf "$d"
done
echo "$out"
