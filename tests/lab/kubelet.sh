#!/usr/bin/env bash
# The lab's stand-in for a kubelet, a scheduler and a cloud's load balancer,
# for one cluster's one node (tests/lab/lab.sh starts one per cluster):
#
# - binds every unscheduled pod to the node (a one-node cluster);
# - runs each pod on the node as a network namespace (its own address from
#   the node's pod CIDR, routed by the node, whose kube-proxy rules it
#   passes through) and a process: the container's image names which local
#   program (README.md, "Images");
# - mounts its ConfigMap, Secret and projected ServiceAccount-token volumes
#   (the token from the real TokenRequest API, bound to the pod) and writes
#   the resolv.conf its dnsPolicy asks for, inside the pod's mount namespace;
# - keeps the pod's folder (its name, process id and environment) where
#   the node's kubelet API (lab.sh's kubelet-api) finds it for exec;
# - writes the pod's status as a kubelet does (Running, podIP, Ready from
#   the readiness probe) and, when the pod is deleted, stops it and removes
#   the object (there is no grace period to honour beyond SIGTERM);
# - gives every LoadBalancer Service the node's WAN address as its ingress.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
c="$1"
state="${STRAIT_LAB_DIR:-/tmp/strait-lab}"
bin="$(cat "$state/bin")"
strait_bin="$(cat "$state/strait-bin")"
node="$c-node"
node_ns="stlab-$c-node"
pods="$state/$c/pods"
mkdir -p "$pods"
# shellcheck source=/dev/null
. "$state/$c/plan"  # pod_prefix, node_ip, wan_ip, dns_ip

kc() { "$bin/kubectl" --kubeconfig "$state/$c/admin.kubeconfig" "$@"; }
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

alloc_ip() {
    local uid="$1" octet
    mkdir -p "$state/$c/ips"
    for octet in $(seq 10 250); do
        if mkdir "$state/$c/ips/$octet" 2>/dev/null; then
            echo "$uid" > "$state/$c/ips/$octet/uid"
            echo "$octet"
            return 0
        fi
    done
    return 1
}

# Writes one volume's files into $2.
volume() {
    local pod="$1" vol="$2" dir="$3" ns name uid
    ns="$(jq -r .metadata.namespace <<<"$pod")"
    name="$(jq -r .metadata.name <<<"$pod")"
    uid="$(jq -r .metadata.uid <<<"$pod")"
    mkdir -p "$dir"
    if jq -e .configMap >/dev/null <<<"$vol"; then
        local cm
        cm="$(kc -n "$ns" get configmap "$(jq -r .configMap.name <<<"$vol")" -o json)" || return 1
        jq -c '.data // {} | to_entries[]' <<<"$cm" | while read -r e; do
            jq -r .value <<<"$e" > "$dir/$(jq -r .key <<<"$e")"
        done
    elif jq -e .secret >/dev/null <<<"$vol"; then
        local secret
        secret="$(kc -n "$ns" get secret "$(jq -r .secret.secretName <<<"$vol")" -o json)" || return 1
        jq -c '.data // {} | to_entries[]' <<<"$secret" | while read -r e; do
            jq -r .value <<<"$e" | base64 -d > "$dir/$(jq -r .key <<<"$e")"
        done
    elif jq -e .projected >/dev/null <<<"$vol"; then
        local src
        while read -r src; do
            if jq -e .serviceAccountToken >/dev/null <<<"$src"; then
                kc -n "$ns" create token "$(jq -r '.spec.serviceAccountName // "default"' <<<"$pod")" \
                    --bound-object-kind Pod --bound-object-name "$name" --bound-object-uid "$uid" \
                    --duration 2h > "$dir/$(jq -r .serviceAccountToken.path <<<"$src")" || return 1
            elif jq -e .configMap >/dev/null <<<"$src"; then
                local cm
                cm="$(kc -n "$ns" get configmap "$(jq -r .configMap.name <<<"$src")" -o json)" || return 1
                jq -c '.configMap.items[]' <<<"$src" | while read -r item; do
                    jq -r --arg k "$(jq -r .key <<<"$item")" '.data[$k]' <<<"$cm" > "$dir/$(jq -r .path <<<"$item")"
                done
            elif jq -e .downwardAPI >/dev/null <<<"$src"; then
                jq -c '.downwardAPI.items[]' <<<"$src" | while read -r item; do
                    field "$pod" "$(jq -r .fieldRef.fieldPath <<<"$item")" > "$dir/$(jq -r .path <<<"$item")"
                done
            fi
        done < <(jq -c '.projected.sources[]' <<<"$vol")
    fi
}

# A downward-API field of the pod.
field() {
    local pod="$1" path="$2"
    case "$path" in
    metadata.name | metadata.namespace | metadata.uid | spec.nodeName | spec.serviceAccountName)
        jq -r ".$path" <<<"$pod" ;;
    status.podIP | status.podIPs) cat "$pods/$(jq -r .metadata.uid <<<"$pod")/ip" ;;
    status.hostIP) echo "$node_ip" ;;
    *) echo "" ;;
    esac
}

# The program an image stands for, given the container (JSON); prints the
# argv as shell words.
program() {
    local container="$1" dir="$2" image
    image="$(jq -r .image <<<"$container")"
    case "$image" in
    strait | strait:* | */strait | */strait:* | */strait@*)
        printf '%q ' "$strait_bin"
        jq -r '(.args // []) | @sh' <<<"$container" ;;
    coredns | coredns:* | */coredns | */coredns:*)
        printf '%q ' "$bin/coredns"
        jq -r '(.args // []) | @sh' <<<"$container" ;;
    lab/http-echo | lab/http-echo:*)
        # Answers GET / with the pod's name and address.
        local port
        port="$(jq -r '.ports[0].containerPort // 8080' <<<"$container")"
        mkdir -p "$dir/www"
        printf '%s %s\n' "$(cat "$dir/name")" "$(cat "$dir/ip")" > "$dir/www/index.html"
        printf 'python3 -m http.server %q --bind 0.0.0.0 --directory %q' "$port" "$dir/www" ;;
    lab/sleep | lab/sleep:*)
        echo 'sleep infinity' ;;
    *)
        # Anything else runs its command and arguments as a local program,
        # if the first word names one (`/bin/sh -c …`, say).
        local exe
        exe="$(jq -r '((.command // []) + (.args // []))[0] // ""' <<<"$container")"
        [ -n "$exe" ] && command -v "$exe" >/dev/null || return 1
        jq -r '((.command // []) + (.args // [])) | @sh' <<<"$container" ;;
    esac
}

start_pod() {
    local pod="$1" uid ns name octet ip podns dir container argv
    uid="$(jq -r .metadata.uid <<<"$pod")"
    ns="$(jq -r .metadata.namespace <<<"$pod")"
    name="$(jq -r .metadata.name <<<"$pod")"
    dir="$pods/$uid"
    mkdir -p "$dir"
    printf '%s\n' "$ns/$name" > "$dir/name"
    # Volumes first: a ConfigMap or Secret that is not there yet keeps the
    # pod waiting, as a kubelet's mount does, and the next round retries.
    local vol
    while read -r vol; do
        [ -n "$vol" ] || continue
        if ! volume "$pod" "$vol" "$dir/volumes/$(jq -r .name <<<"$vol")"; then
            rm -rf "$dir"
            return 1
        fi
    done < <(jq -c '.spec.volumes // [] | .[]' <<<"$pod")
    octet="$(alloc_ip "$uid")" || { log "no address left for $ns/$name"; return 1; }
    ip="$pod_prefix.$octet"
    echo "$ip" > "$dir/ip"
    podns="stlab-$c-p$octet"
    echo "$podns" > "$dir/netns"
    ip netns add "$podns"
    ip -n "$podns" link set lo up
    ip link add "p$octet" netns "$node_ns" type veth peer name eth0 netns "$podns"
    ip -n "$podns" addr add "$ip/32" dev eth0
    ip -n "$podns" link set eth0 up
    ip -n "$podns" route add 169.254.1.1 dev eth0
    ip -n "$podns" route add default via 169.254.1.1 dev eth0
    ip -n "$node_ns" addr add 169.254.1.1/32 dev "p$octet"
    ip -n "$node_ns" link set "p$octet" up
    ip -n "$node_ns" route add "$ip/32" dev "p$octet"

    container="$(jq -c '.spec.containers[0]' <<<"$pod")"
    if ! argv="$(program "$container" "$dir")"; then
        log "$ns/$name: no local program for image $(jq -r .image <<<"$container")"
        status "$pod" false Failed ImageUnknownToLab
        return 0
    fi
    {
        echo '#!/bin/sh'
        echo 'set -e'
        # Mount in path order so that a nested mount lands inside its parent.
        jq -c '.volumeMounts // [] | sort_by(.mountPath) | .[]' <<<"$container" | while read -r m; do
            local src target
            src="$dir/volumes/$(jq -r .name <<<"$m")"
            target="$(jq -r .mountPath <<<"$m")"
            printf 'mkdir -p %q && mount --bind %q %q\n' "$target" "$src" "$target"
        done
        case "$(jq -r '.spec.dnsPolicy // "ClusterFirst"' <<<"$pod")" in
        ClusterFirst)
            printf 'nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n' \
                "$dns_ip" "$ns" > "$dir/resolv.conf"
            printf 'mount --bind %q /etc/resolv.conf\n' "$dir/resolv.conf" ;;
        esac
        printf '. %q\n' "$dir/env"
        echo "exec $argv"
    } > "$dir/run.sh"
    # The container's environment, in a file of its own: `kubectl exec`
    # (exec-in-pod.sh) gives it to the commands it runs, as a runtime does.
    {
        printf 'export KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 HOSTNAME=%q\n' "$name"
        jq -c '.env // [] | .[]' <<<"$container" | while read -r e; do
            local value
            if jq -e '.valueFrom.fieldRef' >/dev/null <<<"$e"; then
                value="$(field "$pod" "$(jq -r .valueFrom.fieldRef.fieldPath <<<"$e")")"
            else
                value="$(jq -r '.value // ""' <<<"$e")"
            fi
            printf 'export %s=%q\n' "$(jq -r .name <<<"$e")" "$value"
        done
    } > "$dir/env"
    run_container "$dir"
    log "started $ns/$name at $ip"
    status "$pod" false
}

run_container() {
    local dir="$1"
    setsid ip netns exec "$(cat "$dir/netns")" sh "$dir/run.sh" >> "$dir/log" 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/started"
}

stop_pod() {
    local dir="$1" pid podns octet ip
    if [ -e "$dir/pid" ]; then
        pid="$(cat "$dir/pid")"
        kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    if [ -e "$dir/netns" ]; then
        podns="$(cat "$dir/netns")"
        octet="${podns##*-p}"
        ip netns del "$podns" 2>/dev/null || true
        ip=$(cat "$dir/ip")
        ip -n "$node_ns" route del "$ip/32" 2>/dev/null || true
        rm -rf "$state/$c/ips/$octet"
    fi
    rm -rf "$dir"
}

# Is the container ready: its readiness probe (httpGet or tcpSocket, asked
# from the node as a kubelet does) or, without one, its process alive.
ready() {
    local pod="$1" dir="$2" container probe port ip
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || return 1
    container="$(jq -c '.spec.containers[0]' <<<"$pod")"
    probe="$(jq -c '.readinessProbe // empty' <<<"$container")"
    [ -n "$probe" ] || return 0
    ip="$(cat "$dir/ip")"
    port="$(jq -r '(.httpGet.port // .tcpSocket.port)' <<<"$probe")"
    if ! [[ "$port" =~ ^[0-9]+$ ]]; then
        port="$(jq -r --arg n "$port" '.ports[] | select(.name == $n) | .containerPort' <<<"$container" | head -1)"
    fi
    if jq -e .httpGet >/dev/null <<<"$probe"; then
        ip netns exec "$node_ns" curl -sf -m 2 -o /dev/null "http://$ip:$port$(jq -r '.httpGet.path // "/"' <<<"$probe")"
    else
        ip netns exec "$node_ns" bash -c "exec 3<>/dev/tcp/$ip/$port" 2>/dev/null
    fi
}

# Writes the pod's status: status POD READY [PHASE REASON].
status() {
    local pod="$1" is_ready="$2" phase="${3:-Running}" reason="${4:-}" dir uid restarts
    uid="$(jq -r .metadata.uid <<<"$pod")"
    dir="$pods/$uid"
    restarts="$(cat "$dir/restarts" 2>/dev/null || echo 0)"
    local r=False
    [ "$is_ready" = true ] && r=True
    kc -n "$(jq -r .metadata.namespace <<<"$pod")" patch pod "$(jq -r .metadata.name <<<"$pod")" \
        --subresource status --type merge -p "$(jq -cn --arg phase "$phase" --arg ip "$(cat "$dir/ip" 2>/dev/null)" \
        --arg host "$node_ip" --arg r "$r" --arg now "$(now)" --arg started "$(cat "$dir/started" 2>/dev/null || now)" \
        --arg reason "$reason" --argjson restarts "$restarts" --argjson ready "$is_ready" \
        --arg cname "$(jq -r '.spec.containers[0].name' <<<"$pod")" --arg image "$(jq -r '.spec.containers[0].image' <<<"$pod")" \
        '{status: ({phase: $phase, hostIP: $host, hostIPs: [{ip: $host}], startTime: $started,
           conditions: [
             {type: "PodReadyToStartContainers", status: "True", lastTransitionTime: $started},
             {type: "Initialized", status: "True", lastTransitionTime: $started},
             {type: "PodScheduled", status: "True", lastTransitionTime: $started},
             {type: "ContainersReady", status: $r, lastTransitionTime: $now},
             {type: "Ready", status: $r, lastTransitionTime: $now}],
           containerStatuses: [{name: $cname, image: $image, imageID: "", containerID: ("lab://" + $cname),
             ready: $ready, started: ($phase == "Running"), restartCount: $restarts,
             state: (if $phase == "Running" then {running: {startedAt: $started}} else {terminated: {exitCode: 127, reason: $reason}} end)}]}
           + (if $ip == "" then {} else {podIP: $ip, podIPs: [{ip: $ip}]} end)
           + (if $reason == "" then {} else {reason: $reason} end))}')" >/dev/null
    echo "$is_ready" > "$dir/ready"
}

sync_once() {
    local all
    all="$(kc get pods -A -o json)" || return 0
    # Schedule: the one node takes every pod.
    jq -r '.items[] | select(.spec.nodeName == null and .metadata.deletionTimestamp == null)
           | "\(.metadata.namespace) \(.metadata.name)"' <<<"$all" | while read -r ns name; do
        kc -n "$ns" create -f - >/dev/null 2>&1 <<EOF || true
{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "$name", "namespace": "$ns"},
 "target": {"apiVersion": "v1", "kind": "Node", "name": "$node"}}
EOF
    done
    local seen=" "
    while read -r pod; do
        [ -n "$pod" ] || continue
        local uid dir
        uid="$(jq -r .metadata.uid <<<"$pod")"
        seen+="$uid "
        dir="$pods/$uid"
        if jq -e .metadata.deletionTimestamp >/dev/null <<<"$pod"; then
            [ -d "$dir" ] && stop_pod "$dir" && log "stopped $(jq -r '.metadata.namespace + "/" + .metadata.name' <<<"$pod")"
            kc -n "$(jq -r .metadata.namespace <<<"$pod")" delete pod "$(jq -r .metadata.name <<<"$pod")" \
                --grace-period 0 --force >/dev/null 2>&1 || true
            continue
        fi
        if [ ! -d "$dir" ]; then
            start_pod "$pod" || log "could not start $(jq -r .metadata.name <<<"$pod")"
            continue
        fi
        [ -e "$dir/pid" ] || continue
        if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
            # restartPolicy Always: run it again, after a back-off that
            # doubles with each restart (up to 30 s), and count it.
            local restarts exited
            restarts="$(cat "$dir/restarts" 2>/dev/null || echo 0)"
            [ -e "$dir/exited" ] || date +%s > "$dir/exited"
            exited="$(cat "$dir/exited")"
            if [ $(( $(date +%s) - exited )) -ge $(( restarts < 5 ? 1 << restarts : 30 )) ]; then
                echo $(( restarts + 1 )) > "$dir/restarts"
                rm -f "$dir/exited"
                log "restarting $(jq -r .metadata.name <<<"$pod") (it exited; $(tail -1 "$dir/log"))"
                run_container "$dir"
            fi
        fi
        local now_ready=false
        ready "$pod" "$dir" && now_ready=true
        if [ "$now_ready" != "$(cat "$dir/ready" 2>/dev/null)" ]; then
            status "$pod" "$now_ready"
            log "$(jq -r .metadata.name <<<"$pod") ready=$now_ready"
        fi
    done < <(jq -c --arg node "$node" '.items[] | select(.spec.nodeName == $node)' <<<"$all")
    # Pods removed behind the kubelet's back (force-deleted): stop them.
    for dir in "$pods"/*; do
        [ -d "$dir" ] || continue
        case "$seen" in *" $(basename "$dir") "*) ;; *) stop_pod "$dir"; log "stopped a removed pod" ;; esac
    done
    # Load balancers: the node's WAN address for every LoadBalancer Service.
    kc get services -A -o json | jq -r '.items[] | select(.spec.type == "LoadBalancer" and (.status.loadBalancer.ingress // []) == [])
        | "\(.metadata.namespace) \(.metadata.name)"' | while read -r ns name; do
        kc -n "$ns" patch service "$name" --subresource status --type merge \
            -p "{\"status\":{\"loadBalancer\":{\"ingress\":[{\"ip\":\"$wan_ip\"}]}}}" >/dev/null
    done
}

trap 'for d in "$pods"/*; do [ -d "$d" ] && stop_pod "$d"; done; exit 0' TERM INT
while true; do
    sync_once
    sleep 0.5
done
