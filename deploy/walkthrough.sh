#!/usr/bin/env bash
# The walkthrough of docs/operations.md ("From nothing to a 3-node
# cluster"), run on one machine, step for step: the three machines are
# 127.0.0.1, .2 and .3, each with its own folder WORK/host-NAME standing for
# its root (/etc/termesh, /var/lib/termesh). Only what needs a real systemd
# differs, and says so: a node is started with the unit's ExecStart line
# instead of `systemctl enable --now`, and `systemctl reload` is the SIGHUP
# that the unit's ExecReload sends. node/tests/walkthrough.rs runs it.
#
#   deploy/walkthrough.sh WORK
#
# TERMESH_BIN names the binary (default target/release/termesh, else
# target/debug/termesh); WALK_HTTP_PORT and WALK_QUIC_PORT the ports
# (default 7520 and 7521). Every step checks what it did; the nodes it
# started are stopped on exit, whatever happens.
set -euo pipefail

work=${1:?usage: deploy/walkthrough.sh WORK}
bin=${TERMESH_BIN:-}
if [ -z "$bin" ]; then
    for b in target/release/termesh target/debug/termesh; do
        if [ -x "$b" ]; then bin=$PWD/$b; break; fi
    done
fi
[ -x "$bin" ] || { echo "no termesh binary: build it or set TERMESH_BIN"; exit 2; }
http_port=${WALK_HTTP_PORT:-7520}
quic_port=${WALK_QUIC_PORT:-7521}
names=(a b c)
declare -A ip=([a]=127.0.0.1 [b]=127.0.0.2 [c]=127.0.0.3)
declare -A pid=()
mkdir -p "$work"
cd "$work"

step() { echo; echo "== $*"; }
fail() { echo "walkthrough failed: $*" >&2; exit 1; }
termesh() { "$bin" "$@"; }
stop_nodes() {
    for n in "${!pid[@]}"; do kill -TERM "${pid[$n]}" 2>/dev/null || true; done
    for n in "${!pid[@]}"; do wait "${pid[$n]}" 2>/dev/null || true; done
    # Each node started its PTY keeper (it outlives the node, as under
    # systemd its own unit does); they go too, and their programs with them.
    for n in "${!pid[@]}"; do
        lock="host-$n/var/lib/termesh/keeper.lock"
        kpid=$(cat "$lock" 2>/dev/null || true)
        # Only while it is a keeper (the pid may be another process's now).
        if [ -n "$kpid" ] && grep -qa keeper "/proc/$kpid/cmdline" 2>/dev/null; then
            kill -TERM "$kpid" 2>/dev/null || true
        fi
    done
}
trap stop_nodes EXIT
# Waits (at most 60 s) until "$@" succeeds.
until_ok() {
    for _ in $(seq 1 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    fail "timed out: $*"
}

step "2. the cluster's files"
termesh cluster init --http-tls --nodes-data-dir ../../var/lib/termesh --out cluster \
    --node "a,quic=${ip[a]}:$quic_port,http=${ip[a]}:$http_port" \
    --node "b,quic=${ip[b]}:$quic_port,http=${ip[b]}:$http_port" \
    --node "c,quic=${ip[c]}:$quic_port,http=${ip[c]}:$http_port"
for n in "${names[@]}"; do termesh config check "cluster/$n/termesh.toml"; done

step "3. each machine: the files in /etc/termesh, a node started"
for n in "${names[@]}"; do
    root=host-$n
    install -d -m 750 "$root/etc/termesh" "$root/var/lib/termesh"
    install -m 640 "cluster/$n"/* "$root/etc/termesh/"
    # systemctl enable --now termesh: the unit's ExecStart (the node
    # starts its keeper itself, under the unit too).
    "$bin" node --config "$root/etc/termesh/termesh.toml" >"$root/node.out" 2>"$root/node.log" &
    pid[$n]=$!
done

step "4. the cluster, seen from the workstation"
export TERMESH_CA=$PWD/cluster/ca.pem
TERMESH_TOKEN=$(cat cluster/admin.token)
export TERMESH_TOKEN
# Every node sees every other up.
all_up() { [ "$(termesh nodes --json --url "https://${ip[$1]}:$http_port" | grep -oE '"state": ?"up"' | wc -l)" -eq 3 ]; }
for n in "${names[@]}"; do until_ok all_up "$n"; done
termesh nodes --url "https://${ip[a]}:$http_port"

step "5. a token for a person, on every node"
termesh token add --role operator --name alice \
    --config cluster/a/termesh.toml --config cluster/b/termesh.toml --config cluster/c/termesh.toml \
    >alice.out
alice=$(sed -n 's/^token: //p' alice.out)
[ -n "$alice" ] || fail "token add printed no token"
for n in "${names[@]}"; do install -m 640 "cluster/$n/termesh.toml" "host-$n/etc/termesh/"; done
termesh config reload --url "https://${ip[a]}:$http_port"
# systemctl reload termesh: the unit's ExecReload.
kill -HUP "${pid[b]}" "${pid[c]}"
for n in "${names[@]}"; do
    until_ok termesh ls --url "https://${ip[$n]}:$http_port" --token "$alice"
done

step "6. sessions, from any node"
id=$(termesh new --url "https://${ip[b]}:$http_port" --token "$alice" --node c --name build \
    -- sh -c 'echo built-on-c; exec sleep 600')
echo "session $id"
termesh ls --url "https://${ip[c]}:$http_port" --token "$alice" | tee ls.out
grep -E "^$id +build +c +running" ls.out >/dev/null || fail "ls does not show build running on c"
until_ok sh -c "'$bin' screen build --url 'https://${ip[a]}:$http_port' --token '$alice' | grep -q built-on-c"
termesh new --url "https://${ip[a]}:$http_port" --token "$alice" --node b --name quick \
    -- sh -c 'echo quick-one; sleep 1; exit 3' >/dev/null
set +e
termesh attach quick --url "https://${ip[c]}:$http_port" --token "$alice" </dev/null >attach.out 2>&1
code=$?
set -e
[ "$code" -eq 3 ] && grep -q quick-one attach.out || fail "attach: exit $code, $(cat attach.out)"
echo "attach showed the session and exited with its code ($code)"

step "7. the console"
curl -fsS --cacert cluster/ca.pem "https://${ip[a]}:$http_port/" | grep -q "<title>termesh console</title>" \
    || fail "no console at https://${ip[a]}:$http_port/"
echo "https://${ip[a]}:$http_port/ serves the console"

step "8. revoke the token"
termesh token revoke alice \
    --config cluster/a/termesh.toml --config cluster/b/termesh.toml --config cluster/c/termesh.toml
for n in "${names[@]}"; do install -m 640 "cluster/$n/termesh.toml" "host-$n/etc/termesh/"; done
termesh config reload --url "https://${ip[a]}:$http_port"
kill -HUP "${pid[b]}" "${pid[c]}"
refused() { ! termesh ls --url "https://${ip[$1]}:$http_port" --token "$alice"; }
for n in "${names[@]}"; do until_ok refused "$n"; done
echo "alice's token is refused by every node"

echo
echo "walkthrough passed"
