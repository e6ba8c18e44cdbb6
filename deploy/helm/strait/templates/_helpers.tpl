{{/*
Names are fixed, not derived from the release: the gateway, `strait link`
and the admission policy expect them.
*/}}

{{/*
The standard Helm labels, added to every object's metadata.labels (never to
selectors or pod template labels, which stay as in deploy/).
*/}}
{{- define "strait.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The label that selects the gateway pods. */}}
{{- define "strait.selectorLabels" -}}
app.kubernetes.io/name: cluster-edge
{{- end }}

{{/* The labels of the gateway's objects (deploy/*.yaml) and Helm's. */}}
{{- define "strait.labels" -}}
{{ include "strait.selectorLabels" . }}
app.kubernetes.io/part-of: strait
{{ include "strait.helmLabels" . }}
{{- end }}

{{/*
The gateway image: repository@digest when a digest is given (as kustomize's
images entry with a digest), else repository:tag, the tag defaulting to the
chart's appVersion.
*/}}
{{- define "strait.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
Deep-merges the map (index . 1) into the map (index . 0), in place: maps
merge key by key, anything else (lists, scalars, false, 0, "") replaces.
*/}}
{{- define "strait.mergeInto" -}}
{{- $dst := index . 0 -}}
{{- range $key, $value := index . 1 -}}
{{- if and (kindIs "map" $value) (kindIs "map" (index $dst $key)) -}}
{{- include "strait.mergeInto" (list (index $dst $key) $value) -}}
{{- else -}}
{{- $_ := set $dst $key $value -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
gateway.yaml (docs/configuration.md), as YAML text: the values of
.Values.gateway, with gateway.extra deep-merged over them. Every template
that depends on a gateway.yaml setting (listen ports, imports.portRange,
kube.remoteSecretNamespace) reads it from here, so the ConfigMap, the
Deployment, the Services, the NetworkPolicy and the RBAC agree.
*/}}
{{- define "strait.gatewayConfig" -}}
{{- $g := .Values.gateway -}}
{{- $extra := $g.extra | default dict -}}
{{- /* What the chart fixes or takes from elsewhere may not come from extra. */ -}}
{{- range $key := list "gatewayNamespace" "tls" -}}
{{- if hasKey $extra $key -}}
{{- fail (printf "gateway.extra.%s: fixed by the chart (gatewayNamespace strait-system, tls.dir /etc/strait/tls)" $key) -}}
{{- end -}}
{{- end -}}
{{- $extraKube := get $extra "kube" | default dict -}}
{{- range $key := list "writeExportStatus" "manageImports" -}}
{{- if and (kindIs "map" $extraKube) (hasKey $extraKube $key) -}}
{{- fail (printf "gateway.extra.kube.%s: set args.%s instead (it sets the Deployment's flag, gateway.yaml and the RBAC together)" $key $key) -}}
{{- end -}}
{{- end -}}

{{- $listeners := dict "connect" $g.listeners.connect "tunnel" $g.listeners.tunnel "admin" $g.listeners.admin -}}
{{- with $g.listeners.dns -}}
{{- $_ := set $listeners "dns" . -}}
{{- end -}}
{{- $tuning := dict
  "connectTimeout" $g.tuning.connectTimeout
  "idleTimeout" $g.tuning.idleTimeout
  "dialAttempts" $g.tuning.dialAttempts
  "balancer" $g.tuning.balancer
  "locality" $g.tuning.locality
  "localityMinimumHealthy" $g.tuning.localityMinimumHealthy
  "reloadDebounce" $g.tuning.reloadDebounce -}}
{{- with $g.tuning.memoryLimit -}}
{{- $_ := set $tuning "memoryLimit" . -}}
{{- end -}}
{{- $kube := dict
  "staleAfter" $g.kube.staleAfter
  "remoteSecretNamespace" $g.kube.remoteSecretNamespace
  "writeExportStatus" .Values.args.writeExportStatus
  "manageImports" .Values.args.manageImports -}}
{{- with $g.kube.adoptImports -}}
{{- $_ := set $kube "adoptImports" . -}}
{{- end -}}
{{- with $g.kube.peers -}}
{{- $_ := set $kube "peers" (deepCopy .) -}}
{{- end -}}
{{- $config := dict
  "networkProperty" $g.networkProperty
  "gatewayNamespace" "strait-system"
  "listeners" $listeners
  "dns" (dict "zone" $g.dns.zone "ttl" $g.dns.ttl "negativeTtl" $g.dns.negativeTtl)
  "tls" (dict "dir" "/etc/strait/tls")
  "tuning" $tuning
  "allowLoopbackEndpoints" $g.allowLoopbackEndpoints
  "tunnel" (dict "deniedNetworks" (deepCopy ($g.tunnel.deniedNetworks | default list)))
  "kube" $kube
  "imports" (dict "portRange" $g.imports.portRange "releaseGrace" $g.imports.releaseGrace) -}}
{{- with $g.networks -}}
{{- $_ := set $config "networks" (deepCopy .) -}}
{{- end -}}
{{- with $g.routing -}}
{{- $_ := set $config "routing" (deepCopy .) -}}
{{- end -}}
{{- include "strait.mergeInto" (list $config (deepCopy $extra)) -}}
{{- toYaml $config -}}
{{- end }}

{{/*
gateway.yaml as a map, checked: what the other templates read.
*/}}
{{- define "strait.config" -}}
{{- $config := include "strait.gatewayConfig" . | fromYaml -}}
{{- $remotes := $config.kube.remoteSecretNamespace -}}
{{- if not $remotes -}}
{{- fail "gateway.kube.remoteSecretNamespace: required (strait-remotes): the namespace of the remote-cluster Secrets" -}}
{{- end -}}
{{- if eq $remotes "strait-system" -}}
{{- fail "gateway.kube.remoteSecretNamespace: not strait-system, where a CA key may be kept: the gateway may read every Secret of that namespace" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end }}

{{/*
The port of a listen address ("0.0.0.0:15021", "[::]:15021"), as an int;
fails when it has none.
*/}}
{{- define "strait.port" -}}
{{- $port := regexReplaceAll "^.*:" (toString .) "" | atoi -}}
{{- if or (lt $port 1) (gt $port 65535) -}}
{{- fail (printf "gateway.listeners: %q is not an address:port" (toString .)) -}}
{{- end -}}
{{- $port -}}
{{- end }}
