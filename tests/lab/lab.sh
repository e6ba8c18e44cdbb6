#!/usr/bin/env bash
# The cluster lab: three real Kubernetes control planes on two networks, in
# network namespaces, with Strait installed the way a user installs it.
#
#   tests/lab/lab.sh up      start it (about a minute warm) and print each
#                            cluster's kubeconfig
#   tests/lab/lab.sh down    stop every process and remove every namespace
#   tests/lab/lab.sh env     print `export KUBECONFIG_C1=...` lines
#   tests/lab/lab.sh wall on|off
#                            wall each cluster's node and pods off from the
#                            other clusters' API servers, or take the wall
#                            down
#   tests/lab/lab.sh exec CLUSTER NAMESPACE POD COMMAND...
#                            run COMMAND in the pod's network and mount
#                            namespaces (its resolv.conf), without the API
#                            server (kubectl exec works too: kubelet-api
#                            serves each node's kubelet API)
#
# Needs root, `ip`, `iptables`, `openssl`, `jq`, `curl`, the components of
# tests/lab/build.sh (built on first use) and a release build of strait
# (STRAIT_BIN, default target/release/strait). The topology and what stands
# in for what are in tests/lab/README.md. LAB_TOPOLOGY=flat puts all three
# clusters on one network. The clusters are linked by feed (`strait link`),
# and each node and its pods are walled off from the other clusters' API
# servers (`wall on|off`); LAB_LINKS=api links them through their API
# servers instead (`strait link --api`), with no wall.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
state="${STRAIT_LAB_DIR:-/tmp/strait-lab}"
topology="${LAB_TOPOLOGY:-multinetwork}"
links="${LAB_LINKS:-feed}"
# The cluster whose Strait is installed with the Helm chart
# (deploy/helm/strait); the others get `kubectl apply -k deploy/`.
helm_cluster=c2
clusterset=clusterset.lab
clusters=(c1 c2 c3)
hub=stlab-hub
mgmt_host=10.250.0.1
etcd_port=23791

log() { printf '[lab] %s\n' "$*" >&2; }
die() { printf '[lab] error: %s\n' "$*" >&2; exit 1; }

# Per-cluster plan: index, network, node addresses, pod CIDR.
index_of() { echo "${1#c}"; }
network_of() {
    if [ "$topology" = flat ] || [ "$1" != c3 ]; then echo net-a; else echo net-b; fi
}
bridge_of() { [ "$(network_of "$1")" = net-a ] && echo neta || echo netb; }
# Node address on its cluster's network (flat L3 between the nodes of one network).
node_net_ip() { [ "$(network_of "$1")" = net-a ] && echo "10.200.0.1$(index_of "$1")" || echo "10.201.0.1$(index_of "$1")"; }
node_mgmt_ip() { echo "10.250.0.1$(index_of "$1")"; }
# The WAN address; it is also the gateway Service's load-balancer address.
node_wan_ip() { echo "172.31.100.1$(index_of "$1")"; }
# c3's pods reuse c1's CIDR across networks: the overlap is the point.
pod_cidr_prefix() {
    if [ "$1" = c3 ] && [ "$topology" != flat ]; then echo 10.244.1; else echo "10.244.$(index_of "$1")"; fi
}
api_port() { echo "644$(index_of "$1")"; }
kcm_port() { echo "1025$(index_of "$1")"; }
# The kubelet API's port, where kubelet-api listens on the node's InternalIP.
kubelet_port=10250
node_ns() { echo "stlab-$1-node"; }
kubeconfig() { echo "$state/$1/admin.kubeconfig"; }
kc() { local c="$1"; shift; "$bin/kubectl" --kubeconfig "$(kubeconfig "$c")" "$@"; }

components() {
    bin="$(bash "$here/build.sh" | tail -1)"
    [ -x "$bin/kube-apiserver" ] || die "build.sh did not produce the components"
    helm="$(bash "$here/build-helm.sh" | tail -1)"
    [ -x "$helm" ] || die "build-helm.sh did not produce helm"
}

# ---------------------------------------------------------------- network

netns_add() { ip netns add "$1"; ip -n "$1" link set lo up; }

network_up() {
    netns_add "$hub"
    for br in mgmt neta netb wan; do
        ip -n "$hub" link add "$br" type bridge
        ip -n "$hub" link set "$br" up
    done
    # The host reaches the API servers over mgmt; nodes reach them too.
    ip link add stlab0 type veth peer name stlab0h netns "$hub"
    ip -n "$hub" link set stlab0h master mgmt up
    ip addr add "$mgmt_host/24" dev stlab0
    ip link set stlab0 up
    for c in "${clusters[@]}"; do
        local ns i
        ns="$(node_ns "$c")"
        i="$(index_of "$c")"
        netns_add "$ns"
        ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
        for leg in mgmt:"$(node_mgmt_ip "$c")" "$(bridge_of "$c")":"$(node_net_ip "$c")" wan:"$(node_wan_ip "$c")"; do
            local br="${leg%%:*}" addr="${leg#*:}"
            ip link add "n$i$br" netns "$ns" type veth peer name "h$i$br" netns "$hub"
            ip -n "$hub" link set "h$i$br" master "$br" up
            ip -n "$ns" link set "n$i$br" name "$br"
            ip -n "$ns" addr add "$addr/24" dev "$br"
            ip -n "$ns" link set "$br" up
        done
        # What a cloud's NAT does: pod traffic that leaves for the API
        # servers or the WAN goes out with the node's address (pod CIDRs
        # overlap across networks, so nothing may route back to them).
        ip netns exec "$ns" iptables -t nat -A POSTROUTING -s "$(pod_cidr_prefix "$c").0/24" -o mgmt -j MASQUERADE
        ip netns exec "$ns" iptables -t nat -A POSTROUTING -s "$(pod_cidr_prefix "$c").0/24" -o wan -j MASQUERADE
        mkdir -p "$state/$c"
        printf 'pod_prefix=%s\nnode_ip=%s\nwan_ip=%s\ndns_ip=10.96.0.10\n' \
            "$(pod_cidr_prefix "$c")" "$(node_net_ip "$c")" "$(node_wan_ip "$c")" > "$state/$c/plan"
    done
    # The API servers reach each node's kubelet API (kubelet-api) at its
    # InternalIP, as a control plane does: the host routes it through the
    # node's leg on the management bridge.
    for c in "${clusters[@]}"; do
        ip route add "$(node_net_ip "$c")/32" via "$(node_mgmt_ip "$c")" dev stlab0
    done
    # A flat network: each node routes the pod CIDRs of the other nodes of
    # its network to them, unmasqueraded.
    for c in "${clusters[@]}"; do
        for peer in "${clusters[@]}"; do
            [ "$c" != "$peer" ] && [ "$(network_of "$c")" = "$(network_of "$peer")" ] || continue
            ip -n "$(node_ns "$c")" route add "$(pod_cidr_prefix "$peer").0/24" via "$(node_net_ip "$peer")"
        done
    done
}

network_down() {
    ip link del stlab0 2>/dev/null || true
    for ns in $(ip netns list | awk '{print $1}' | grep '^stlab-' || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
}

# ---------------------------------------------------------------- PKI

pki() {
    local d="$state/pki"
    mkdir -p "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
        -subj "/CN=strait-lab-ca" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    for c in "${clusters[@]}"; do
        mkdir -p "$state/$c"
        # Serving certificate: the host-side address and the in-cluster
        # `kubernetes` Service address pods dial.
        leaf "$d" "$state/$c/apiserver" "/CN=kube-apiserver-$c" \
            "subjectAltName=IP:$mgmt_host,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" serverAuth
        # The node's kubelet serving certificate (kubelet-api's): the API
        # server checks it against the lab's CA when it dials the InternalIP.
        leaf "$d" "$state/$c/kubelet" "/O=system:nodes/CN=system:node:$c-node" \
            "subjectAltName=IP:$(node_net_ip "$c"),DNS:$c-node" serverAuth
        openssl ecparam -name prime256v1 -genkey -noout -out "$state/$c/sa.key" 2>/dev/null
        openssl ec -in "$state/$c/sa.key" -pubout -out "$state/$c/sa.pub" 2>/dev/null
    done
    # One admin (group system:masters) for every cluster.
    leaf "$d" "$d/admin" "/O=system:masters/CN=lab-admin" "" clientAuth
    leaf "$d" "$d/kube-proxy" "/CN=system:kube-proxy" "" clientAuth
    # The API servers' client certificate towards the kubelets, as kubeadm
    # makes it; kubelet-api accepts no other client.
    leaf "$d" "$d/apiserver-kubelet-client" "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client" "" clientAuth
}

leaf() {
    local d="$1" out="$2" subj="$3" san="$4" usage="$5"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$subj" \
        -keyout "$out.key" -out "$out.csr" 2>/dev/null
    {
        echo "extendedKeyUsage=$usage"
        [ -z "$san" ] || echo "$san"
    } > "$out.ext"
    openssl x509 -req -in "$out.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 30 -extfile "$out.ext" -out "$out.crt" 2>/dev/null
}

write_kubeconfig() {
    local c="$1" user="$2" out="$3"
    cat > "$out" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $c
  cluster:
    server: https://$mgmt_host:$(api_port "$c")
    certificate-authority: $state/pki/ca.crt
users:
- name: $user
  user:
    client-certificate: $state/pki/$user.crt
    client-key: $state/pki/$user.key
contexts:
- name: $c
  context: {cluster: $c, user: $user}
current-context: $c
EOF
}

# ---------------------------------------------------------------- processes

# Starts a long-running process with its output in $state/logs/<name>.log.
spawn() {
    local name="$1"; shift
    mkdir -p "$state/logs" "$state/pids"
    setsid "$@" > "$state/logs/$name.log" 2>&1 < /dev/null &
    echo $! > "$state/pids/$name"
}

# retry TIMES COMMAND...: runs it until it succeeds, a second apart.
retry() {
    local times="$1" i
    shift
    for i in $(seq "$times"); do
        if "$@" 2>"$state/logs/retry.err"; then return 0; fi
        sleep 1
    done
    die "$* kept failing: $(cat "$state/logs/retry.err")"
}

wait_for() {
    local what="$1" tries="$2"; shift 2
    for _ in $(seq "$tries"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    die "$what did not come up (logs in $state/logs)"
}

control_planes_up() {
    spawn etcd "$bin/etcd" --name lab --data-dir "$state/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls http://127.0.0.1:23801 --initial-advertise-peer-urls http://127.0.0.1:23801 \
        --initial-cluster lab=http://127.0.0.1:23801 --unsafe-no-fsync=true --log-level warn
    wait_for etcd 60 curl -sf "http://127.0.0.1:$etcd_port/health"
    for c in "${clusters[@]}"; do
        write_kubeconfig "$c" admin "$(kubeconfig "$c")"
        write_kubeconfig "$c" kube-proxy "$state/$c/kube-proxy.kubeconfig"
        spawn "$c-apiserver" "$bin/kube-apiserver" \
            --etcd-servers "http://127.0.0.1:$etcd_port" --etcd-prefix "/$c" \
            --bind-address "$mgmt_host" --advertise-address "$mgmt_host" --secure-port "$(api_port "$c")" \
            --tls-cert-file "$state/$c/apiserver.crt" --tls-private-key-file "$state/$c/apiserver.key" \
            --client-ca-file "$state/pki/ca.crt" \
            --authorization-mode RBAC \
            --service-account-issuer "https://$c.$clusterset" \
            --service-account-key-file "$state/$c/sa.pub" \
            --service-account-signing-key-file "$state/$c/sa.key" \
            --service-cluster-ip-range 10.96.0.0/16 \
            --allow-privileged=true \
            --kubelet-preferred-address-types InternalIP,ExternalIP,Hostname \
            --kubelet-certificate-authority "$state/pki/ca.crt" \
            --kubelet-client-certificate "$state/pki/apiserver-kubelet-client.crt" \
            --kubelet-client-key "$state/pki/apiserver-kubelet-client.key" \
            --audit-policy-file "$here/manifests/audit-policy.yaml" \
            --audit-log-path "$state/$c/audit.log" --audit-log-format json
    done
    # One kubeconfig with a context per cluster, for suites that take a
    # list of contexts (the mcs-api conformance suite's --contexts).
    KUBECONFIG="$(kubeconfig c1):$(kubeconfig c2):$(kubeconfig c3)" \
        "$bin/kubectl" config view --flatten > "$state/all.kubeconfig"
    for c in "${clusters[@]}"; do
        wait_for "$c's kube-apiserver" 180 kc "$c" get --raw /readyz
        spawn "$c-controller-manager" "$bin/kube-controller-manager" \
            --kubeconfig "$(kubeconfig "$c")" --leader-elect=false \
            --bind-address 127.0.0.1 --secure-port "$(kcm_port "$c")" \
            --service-account-private-key-file "$state/$c/sa.key" \
            --root-ca-file "$state/pki/ca.crt" \
            --controllers endpointslice-controller,endpointslice-mirroring-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,deployment-controller,replicaset-controller,statefulset-controller,clusterrole-aggregation-controller,root-ca-certificate-publisher-controller
        # kube-proxy's own identity, as kubeadm binds it.
        kc "$c" create clusterrolebinding lab-kube-proxy --clusterrole system:node-proxier --user system:kube-proxy >/dev/null
        node_object "$c" | kc "$c" apply -f - >/dev/null
        node_status "$c"
        spawn "$c-kube-proxy" ip netns exec "$(node_ns "$c")" "$bin/kube-proxy" \
            --kubeconfig "$state/$c/kube-proxy.kubeconfig" --hostname-override "$c-node" \
            --proxy-mode iptables --cluster-cidr "$(pod_cidr_prefix "$c").0/24" \
            --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
            --metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256
        kubelet_api_up "$c"
    done
}

# The node's kubelet API, for kubectl exec: kubelet-api (build.sh), in the
# node's namespace on its InternalIP, where the API server dials a kubelet.
# It serves exec only, with the kubelet's stream handling, and runs each
# command through exec-in-pod.sh in the pod's network and mount namespaces.
kubelet_api_up() {
    local c="$1" addr
    addr="$(node_net_ip "$c"):$kubelet_port"
    mkdir -p "$state/$c/pods"
    spawn "$c-kubelet-api" ip netns exec "$(node_ns "$c")" "$bin/kubelet-api" \
        --listen "$addr" --pods "$state/$c/pods" --exec-helper "$here/exec-in-pod.sh" \
        --tls-cert-file "$state/$c/kubelet.crt" --tls-private-key-file "$state/$c/kubelet.key" \
        --client-ca-file "$state/pki/ca.crt"
    wait_for "$c's kubelet API" 40 curl -sf --cacert "$state/pki/ca.crt" \
        --cert "$state/pki/apiserver-kubelet-client.crt" --key "$state/pki/apiserver-kubelet-client.key" "https://$addr/healthz"
}

node_object() {
    local c="$1"
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $c-node
  labels:
    kubernetes.io/hostname: $c-node
    kubernetes.io/os: linux
    topology.kubernetes.io/zone: $c-zone
spec:
  podCIDR: $(pod_cidr_prefix "$c").0/24
EOF
}

node_status() {
    local c="$1"
    local now
    now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    kc "$c" patch node "$c-node" --subresource status --type merge -p "$(jq -cn \
        --arg ip "$(node_net_ip "$c")" --arg now "$now" '{status: {
            addresses: [{type: "InternalIP", address: $ip}, {type: "Hostname", address: "'"$c-node"'"}],
            daemonEndpoints: {kubeletEndpoint: {Port: '"$kubelet_port"'}},
            conditions: [{type: "Ready", status: "True", reason: "LabKubelet", lastHeartbeatTime: $now, lastTransitionTime: $now}]}}')" >/dev/null
}

# ---------------------------------------------------------------- install

install_strait() {
    local strait_bin
    strait_bin="$(cat "$state/strait-bin")"
    local args=()
    for c in "${clusters[@]}"; do args+=(--cluster "$c"); done
    "$strait_bin" certs --out "$state/certs" --clusterset "$clusterset" "${args[@]}" >/dev/null
    for c in "${clusters[@]}"; do
        kc "$c" apply -k "$repo/deploy/crds/" >/dev/null
        kc "$c" wait --for condition=Established crd --all --timeout 60s >/dev/null
        kc "$c" apply -f "$repo/deploy/namespace.yaml" >/dev/null
        kc "$c" -n strait-system create secret generic cluster-edge-tls \
            --from-file="$state/certs/$c/tls.crt" --from-file="$state/certs/$c/tls.key" \
            --from-file="$state/certs/$c/ca.crt" >/dev/null
        sed -e "s/value: cluster-a/value: $c/" -e "s/value: clusterset.example/value: $clusterset/" \
            -e "s/value: net-a/value: $(network_of "$c")/" "$repo/deploy/examples/clusterproperties.yaml" |
            kc "$c" apply -f - >/dev/null
        # Just after start the API server may not allocate node ports yet
        # ("cannot allocate resources of type servicenodeportallocations at
        # this time"): a transient refusal, retried as a user would.
        if [ "$c" = "$helm_cluster" ]; then
            # As docs/kubernetes.md's Helm path says, with the namespaces
            # made above (they hold the TLS Secret already).
            retry 20 "$helm" upgrade --install strait "$repo/deploy/helm/strait" \
                --kubeconfig "$(kubeconfig "$c")" --namespace strait-system --set namespaces.create=false >/dev/null
        else
            retry 20 kc "$c" apply -k "$repo/deploy/" >/dev/null
        fi
    done
    if [ "$links" = api ]; then
        for c in "${clusters[@]}"; do
            for peer in "${clusters[@]}"; do
                [ "$c" != "$peer" ] || continue
                "$strait_bin" link --api --kubeconfig "$(kubeconfig "$peer")" --local-kubeconfig "$(kubeconfig "$c")" --apply \
                    > "$state/logs/link-$c-$peer.log" 2>&1 || die "strait link --api $c -> $peer failed: $(cat "$state/logs/link-$c-$peer.log")"
            done
        done
        return
    fi
    # A peer document names its gateway Service's load-balancer address,
    # which the lab's kubelet gives it within a few seconds.
    for c in "${clusters[@]}"; do
        wait_for "$c's gateway address" 240 gateway_address "$c"
    done
    local i j
    for ((i = 0; i < ${#clusters[@]}; i++)); do
        for ((j = i + 1; j < ${#clusters[@]}; j++)); do
            local c="${clusters[$i]}" peer="${clusters[$j]}"
            "$strait_bin" link --kubeconfig "$(kubeconfig "$peer")" --local-kubeconfig "$(kubeconfig "$c")" --apply \
                > "$state/logs/link-$c-$peer.log" 2>&1 || die "strait link $c <-> $peer failed: $(cat "$state/logs/link-$c-$peer.log")"
        done
    done
    wall on
}

# Succeeds once the gateway Service of cluster $1 has its load-balancer address.
gateway_address() {
    [ -n "$(kc "$1" -n strait-system get service cluster-edge -o jsonpath='{.status.loadBalancer.ingress[0].ip}')" ]
}

# Each cluster's node (and so its pods, routed through it) may reach its own
# API server and no other: private clusters, which learn of each other only
# through their gateways' feeds. The admin's host reaches every one.
wall() {
    local verb flag c other
    verb="$1"
    case "$verb" in on) flag=-I ;; off) flag=-D ;; *) die "wall on|off" ;; esac
    for c in "${clusters[@]}"; do
        for other in "${clusters[@]}"; do
            [ "$c" != "$other" ] || continue
            for chain in FORWARD OUTPUT; do
                local rule=("$chain" -o mgmt -d "$mgmt_host" -p tcp --dport "$(api_port "$other")" -j REJECT)
                if [ "$verb" = on ]; then
                    ip netns exec "$(node_ns "$c")" iptables -C "${rule[@]}" 2>/dev/null ||
                        ip netns exec "$(node_ns "$c")" iptables "$flag" "${rule[@]}"
                else
                    while ip netns exec "$(node_ns "$c")" iptables -C "${rule[@]}" 2>/dev/null; do
                        ip netns exec "$(node_ns "$c")" iptables "$flag" "${rule[@]}"
                    done
                fi
            done
        done
    done
}

install_coredns() {
    for c in "${clusters[@]}"; do
        local dns_ip
        dns_ip="$(kc "$c" -n strait-system get service cluster-edge-dns -o jsonpath='{.spec.clusterIP}')"
        # The stock Corefile with the clusterset.local block of
        # deploy/examples/coredns/, as docs/kubernetes.md says to add it.
        local corefile
        corefile="$(sed -n '/^  Corefile: |$/,$p' "$repo/deploy/examples/coredns/coredns-patch.yaml" | tail -n +2 |
            sed -e 's/^    //' -e "s/CLUSTER_EDGE_DNS_IP/$dns_ip/")"
        kc "$c" -n kube-system create configmap coredns --from-literal=Corefile="$corefile" \
            --dry-run=client -o yaml | kc "$c" apply -f - >/dev/null
        kc "$c" apply -f "$here/manifests/coredns.yaml" >/dev/null
    done
}

# ---------------------------------------------------------------- commands

up() {
    [ "$(id -u)" = 0 ] || die "the lab needs root (network namespaces, iptables)"
    for t in ip iptables openssl jq curl setsid unshare; do
        command -v "$t" >/dev/null || die "the lab needs $t"
    done
    # Whatever an earlier run left, finished or not.
    down
    components
    rm -rf "$state"
    mkdir -p "$state"
    echo "$bin" > "$state/bin"
    echo "$helm" > "$state/helm"
    local strait_bin="${STRAIT_BIN:-$repo/target/release/strait}"
    [ -x "$strait_bin" ] || die "no strait binary at $strait_bin (cargo build --release, or set STRAIT_BIN)"
    echo "$strait_bin" > "$state/strait-bin"
    echo "$topology" > "$state/topology"
    log "components: $bin"
    network_up
    pki
    control_planes_up
    for c in "${clusters[@]}"; do
        spawn "$c-kubelet" "$here/kubelet.sh" "$c"
    done
    install_strait
    install_coredns
    for c in "${clusters[@]}"; do
        kc "$c" -n strait-system rollout status deployment/cluster-edge --timeout 120s >/dev/null ||
            die "$c's cluster-edge did not become ready (logs in $state/logs)"
        kc "$c" -n kube-system rollout status deployment/coredns --timeout 120s >/dev/null ||
            die "$c's CoreDNS did not become ready (logs in $state/logs)"
    done
    touch "$state/up"
    env_lines
}

env_lines() {
    for c in "${clusters[@]}"; do
        echo "export KUBECONFIG_${c^^}=$(kubeconfig "$c")"
    done
    echo "# every cluster, a context each (c1, c2, c3): $state/all.kubeconfig"
}

# Whether process $1 is still one of the lab's: a pid file outlives its
# process, and the number may since name another (a test runner's group).
lab_process() {
    [ -r "/proc/$1/cmdline" ] &&
        tr '\0' ' ' < "/proc/$1/cmdline" | grep -q -e "$state" -e "strait-lab" -e "$here"
}

down() {
    if [ -d "$state/pids" ]; then
        for f in "$state"/pids/*; do
            [ -e "$f" ] || continue
            pid="$(cat "$f")"
            lab_process "$pid" || continue
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        done
        sleep 1
        for f in "$state"/pids/*; do
            [ -e "$f" ] || continue
            pid="$(cat "$f")"
            lab_process "$pid" || continue
            kill -KILL -- "-$pid" 2>/dev/null || true
        done
        rm -f "$state"/pids/*
    fi
    # Anything an interrupted run left: every lab process names the state
    # folder in its arguments (the kubelets their script).
    pkill -KILL -f -- "$here/kubelet.sh" 2>/dev/null || true
    pkill -KILL -f -- "$state/" 2>/dev/null || true
    network_down
    rm -f "$state/up"
}

# Runs a command inside a pod: its network namespace and its mounts.
pod_exec() {
    local c="$1" ns="$2" pod="$3" dir="" name
    shift 3
    # Another pod's folder may go while this looks (a pod deleted
    # meanwhile): a `grep` over them would then fail the whole command
    # (set -e, pipefail) with no word of why.
    for name in "$state/$c"/pods/*/name; do
        if [ "$(cat "$name" 2>/dev/null)" = "$ns/$pod" ]; then
            dir="$(dirname "$name")"
            break
        fi
    done
    [ -n "$dir" ] || die "no pod $ns/$pod runs in $c"
    exec nsenter -t "$(cat "$dir/pid")" -m -n -- "$@"
}

case "${1:-}" in
up) up ;;
down) down ;;
env) env_lines ;;
wall) shift; wall "${1:-}" ;;
exec) shift; [ $# -ge 4 ] || die "usage: $0 exec CLUSTER NAMESPACE POD COMMAND..."; pod_exec "$@" ;;
*) echo "usage: $0 up|down|env|wall on|off|exec" >&2; exit 2 ;;
esac
