#!/bin/sh
# exec-in-pod.sh POD_DIR COMMAND...: what `kubectl exec` runs in the
# cluster lab. The API server sends the exec to the kubelet API of the pod's
# node, kubelet-api (tests/lab/lab.sh), which finds the pod's folder
# (kept by tests/lab/kubelet.sh) and runs this with the command, on the
# terminal or pipes of the exec's streams.
#
# This enters the pod's network and mount namespaces (its address, its
# resolv.conf and volumes) and runs the command there, from /, with the
# pod's environment only (the `env` file run.sh also reads) and TERM=xterm
# on a terminal, as a container runtime's exec does.
set -eu
dir="$1"
shift
pid="$(cat "$dir/pid" 2>/dev/null)" && kill -0 "$pid" 2>/dev/null || {
    echo "the pod's process is not running (restarting?)" >&2
    exit 126
}
term=
[ ! -t 0 ] || term=TERM=xterm
# shellcheck disable=SC2086 # $term is one word or none
exec nsenter --target "$pid" --mount --net -- \
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root $term \
    sh -c 'cd / && . "$1" && shift && exec "$@"' exec-in-pod "$dir/env" "$@"
