#!/usr/bin/env bash
# Runs the test suite (the README's test command). First installs, when
# missing, what the tests drive besides the Rust toolchain: programs run in
# real PTYs (bash, coreutils, vim and htop: the console is compared with
# the node's screen on them), tmux (an independent terminal that snapshots
# are checked against), bindfs with FUSE (a mount whose daemon the test
# stops, as a dead network mount), asciinema (plays exported casts) and
# curl (the shipped agent hook command posts with it), iproute2 (network
# namespaces as separate hosts), setpriv (runs a node as another user),
# systemd with systemd-nspawn (boots this host's system in a container to
# run deploy/termesh.service under a real systemd), QEMU with a Debian
# kernel and a static busybox (boots it in a virtual machine on cgroup
# v2, which this project's hosts do not run),
# Chromium with chromedriver (the console is tested in a real browser
# over WebDriver), and Python's `mcp` package in a venv beside the build
# (`<target>/py-mcp`: a real MCP client drives `termesh mcp`; with
# websockets and msgpack for the Python example of docs/agents.md).
# The suite runs as root, as CI does: it mounts FUSE and steers pid
# allocation (/proc/sys/kernel/ns_last_pid).
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need bash bash
need stty coreutils
need tmux tmux
need vim vim
need htop htop
need bindfs bindfs
need fusermount3 fuse3
need asciinema asciinema
need curl curl
need ip iproute2
need setpriv util-linux
need fincore util-linux-extra
need systemctl systemd
need systemd-nspawn systemd-container
# The virtual machine's parts, without what they recommend (a GUI, firmware).
lean=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || lean+=(qemu-system-x86)
compgen -G '/lib/modules/*/modules.dep' >/dev/null && compgen -G '/boot/vmlinuz-*' >/dev/null \
  || lean+=(linux-image-amd64)
command -v mkfs.ext4 >/dev/null 2>&1 || lean+=(e2fsprogs)
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || lean+=(busybox-static)
need useradd passwd
need chromium chromium
need chromedriver chromium-driver
need python3 python3
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ $((${#missing[@]} + ${#lean[@]})) -gt 0 ]; then
  echo "installing ${missing[*]} ${lean[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  install="$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq"
  [ ${#missing[@]} -eq 0 ] || $install "${missing[@]}" >/dev/null
  [ ${#lean[@]} -eq 0 ] || $install --no-install-recommends "${lean[@]}" >/dev/null
fi

# The MCP client and what the guide's Python example uses, pinned, once
# per target dir.
venv="${CARGO_TARGET_DIR:-target}/py-mcp"
if ! "$venv/bin/python" -c 'import mcp, websockets, msgpack' 2>/dev/null; then
  echo "installing Python's mcp package in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.0' 'websockets==17.4' 'msgpack==1.2.4'
fi

exec cargo test --workspace "$@"
