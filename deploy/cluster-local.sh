#!/usr/bin/env bash
# A 3-node termesh cluster on this machine (loopback 127.0.0.1-3), made
# with `termesh cluster init`, for trying the mesh out.
#
#   deploy/cluster-local.sh start [DIR]   # writes DIR (default ./termesh-cluster) once, starts a, b, c
#   deploy/cluster-local.sh status [DIR]  # termesh nodes, from node a
#   deploy/cluster-local.sh stop [DIR]    # stops the nodes it started (by their pid files) and
#                                         # their PTY keepers (the sessions' programs end with them)
#
# TERMESH_BIN names the binary (default: target/release/termesh, else `termesh`).
set -euo pipefail

cmd=${1:-}
dir=${2:-./termesh-cluster}
bin=${TERMESH_BIN:-}
if [ -z "$bin" ]; then
    if [ -x target/release/termesh ]; then bin=target/release/termesh; else bin=termesh; fi
fi
names=(a b c)

case "$cmd" in
start)
    if [ ! -f "$dir/ca.pem" ]; then
        "$bin" cluster init --out "$dir" \
            --node a,quic=127.0.0.1:7521,http=127.0.0.1:7520 \
            --node b,quic=127.0.0.2:7521,http=127.0.0.2:7520 \
            --node c,quic=127.0.0.3:7521,http=127.0.0.3:7520
    fi
    for n in "${names[@]}"; do
        pidfile="$dir/$n/node.pid"
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "node $n runs already (pid $(cat "$pidfile"))"
            continue
        fi
        "$bin" node --config "$dir/$n/termesh.toml" >"$dir/$n/node.out" 2>"$dir/$n/node.log" &
        echo $! >"$pidfile"
        echo "node $n started (pid $!, log $dir/$n/node.log)"
    done
    echo "admin token: $(cat "$dir/admin.token")"
    echo "try: termesh ls --url http://127.0.0.2:7520 --token \$(cat $dir/admin.token)"
    ;;
status)
    "$bin" nodes --url http://127.0.0.1:7520 --token "$(cat "$dir/admin.token")"
    ;;
stop)
    for n in "${names[@]}"; do
        pidfile="$dir/$n/node.pid"
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            echo "node $n stopped"
        fi
        rm -f "$pidfile"
        # The keeper the node started holds its programs across restarts;
        # a stop of the whole trial cluster ends it too.
        kpid=$(cat "$dir/$n/data/keeper.lock" 2>/dev/null || true)
        # Only while it is a keeper (the pid may be another process's now).
        if [ -n "$kpid" ] && grep -qa keeper "/proc/$kpid/cmdline" 2>/dev/null; then
            kill -TERM "$kpid" && echo "node $n's PTY keeper stopped"
        fi
    done
    ;;
*)
    sed -n '2,9p' "$0"
    exit 2
    ;;
esac
