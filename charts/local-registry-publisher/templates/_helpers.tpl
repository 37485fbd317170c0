{{/* The chart's name, or nameOverride. */}}
{{- define "lrp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, at most 63 characters: fullnameOverride, else <release>-<name> (or just the release
name when it already contains the name). */}}
{{- define "lrp.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "lrp.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of the controller's objects (component "controller"). */}}
{{- define "lrp.labels" -}}
{{ include "lrp.commonLabels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* Labels every object of the release carries, without a component. */}}
{{- define "lrp.commonLabels" -}}
{{ include "lrp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: local-registry-publisher
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- range $key, $value := .Values.commonLabels }}
{{- if or (hasPrefix "app.kubernetes.io/" $key) (hasPrefix "helm.sh/" $key) }}
{{- fail (printf "commonLabels.%s: the chart sets the app.kubernetes.io/ and helm.sh/ labels itself (selectors depend on them); use a key of your own" $key) }}
{{- end }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* The Deployment's selector: fixed for a release's life, so it carries no component or version. */}}
{{- define "lrp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lrp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The node agent's selector: a name of its own, so neither the Deployment's selector nor anything that finds
the controller's pods by its labels ever takes an agent's pod. */}}
{{- define "lrp.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-node-agent" (include "lrp.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The node agents' name: their DaemonSet, ServiceAccount and NetworkPolicy. */}}
{{- define "lrp.agentName" -}}
{{- printf "%s-node-agent" (include "lrp.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* repository:tag, or repository@digest when image.digest is set (the tag is then ignored). */}}
{{- define "lrp.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "lrp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lrp.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* What the controller watches: in every namespace, or only in those it was told to watch. */}}
{{- define "lrp.watchRules" }}
  - apiGroups: [""]
    resources: [services, pods]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
  - apiGroups: [apps]
    resources: [deployments, statefulsets, daemonsets]
    verbs: [list, watch]
  # Events on the registry Services it reports on.
  - apiGroups: [events.k8s.io]
    resources: [events]
    verbs: [create]
{{- end }}

{{- /*
The distribution's defaults (values.yaml `distribution`; README "Per cluster"), filled into the values a user left
empty: registry.nodeAddress, configMap.takeOver, nodeAgent.configPath, nodeAgent.runtimeConfig,
registry.helpUrl. For kind and k3d the registry is a container beside the cluster: the chart describes it with an
ExternalName Service in the release namespace (templates/registry-container.yaml), which this release then allows
to name the registry. Every template
that reads those values includes this first; filling in is idempotent, so the order templates render in does not
matter.
*/ -}}
{{- define "lrp.applyDistribution" -}}
{{- $containerd := "/etc/containerd/certs.d" -}}
{{- $config := "/etc/containerd/config.toml" -}}
{{- $k3s := "/var/lib/rancher/k3s/agent/etc/containerd" -}}
{{- $presets := dict
  "plain" (dict "nodeAddress" "localhost" "takeOver" false "configPath" $containerd "runtimeConfig" $config
    "helpUrl" "")
  "kind" (dict "nodeAddress" "localhost" "takeOver" true "configPath" $containerd "runtimeConfig" $config
    "helpUrl" "https://kind.sigs.k8s.io/docs/user/local-registry/" "container" "kind-registry" "hostPort" 5001)
  "k3d" (dict "nodeAddress" "localhost" "takeOver" true "configPath" (printf "%s/certs.d" $k3s)
    "runtimeConfig" (printf "%s/config.toml" $k3s)
    "helpUrl" "https://k3d.io/stable/usage/registries/" "container" "k3d-registry" "hostPort" 5111)
  "minikube" (dict "nodeAddress" "internal-ip" "takeOver" false "configPath" $containerd "runtimeConfig" $config
    "helpUrl" "")
  "microk8s" (dict "nodeAddress" "localhost" "takeOver" true "configPath" "/var/snap/microk8s/current/args/certs.d"
    "runtimeConfig" "/var/snap/microk8s/current/args/containerd.toml" "helpUrl" "")
-}}
{{- $preset := get $presets .Values.distribution -}}
{{- if not .Values.registry.nodeAddress }}{{ $_ := set .Values.registry "nodeAddress" $preset.nodeAddress }}{{ end -}}
{{- if kindIs "invalid" .Values.configMap.takeOver }}{{ $_ := set .Values.configMap "takeOver" $preset.takeOver }}{{ end -}}
{{- /* CRI-O reads /etc/containers (registries.conf.d, certs.d) and /etc/crio/crio.conf on every distribution. */ -}}
{{- if eq .Values.nodeAgent.runtime "crio" }}{{ $preset = merge (dict "configPath" "/etc/containers" "runtimeConfig" "/etc/crio/crio.conf") $preset }}{{ end -}}
{{- if not .Values.nodeAgent.configPath }}{{ $_ := set .Values.nodeAgent "configPath" $preset.configPath }}{{ end -}}
{{- if not .Values.nodeAgent.runtimeConfig }}{{ $_ := set .Values.nodeAgent "runtimeConfig" $preset.runtimeConfig }}{{ end -}}
{{- if not .Values.registry.helpUrl }}{{ $_ := set .Values.registry "helpUrl" $preset.helpUrl }}{{ end -}}
{{- with $preset.container }}
{{- $container := $.Values.registryContainer -}}
{{- if not $container.name }}{{ $_ := set $container "name" . }}{{ end -}}
{{- if not (int $container.hostPort) }}{{ $_ := set $container "hostPort" $preset.hostPort }}{{ end -}}
{{- if not (has $.Release.Namespace $.Values.registry.allowedNamespaces) }}
{{- $_ := set $.Values.registry "allowedNamespaces" (append $.Values.registry.allowedNamespaces $.Release.Namespace) -}}
{{- end -}}
{{- if and $.Values.registry.watchNamespaces (not (has $.Release.Namespace $.Values.registry.watchNamespaces)) }}
{{- $_ := set $.Values.registry "watchNamespaces" (append $.Values.registry.watchNamespaces $.Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
The addresses besides each registry's own that node files may be written for (--node-allowed-addresses),
comma-separated: nodeAgent.allowedAddresses, and for kind and k3d the addresses of the registry container the chart
describes (the release's own ExternalName Service), which the admin chose by installing with that distribution.
*/ -}}
{{- define "lrp.nodeAllowedAddresses" -}}
{{- include "lrp.applyDistribution" . -}}
{{- $allowed := .Values.nodeAgent.allowedAddresses | default list -}}
{{- $container := .Values.registryContainer -}}
{{- if and (has .Values.distribution (list "kind" "k3d")) $container.name -}}
{{- $allowed = append $allowed (printf "%s:%d" $container.name (int $container.port)) -}}
{{- if eq .Values.distribution "k3d" -}}
{{- $allowed = append $allowed (printf "%s.localhost:%d" $container.name (int $container.hostPort)) -}}
{{- else -}}
{{- $allowed = append $allowed (printf "localhost:%d" (int $container.hostPort)) -}}
{{- end -}}
{{- end -}}
{{- range $allowed }}
{{- if not (regexMatch "^(\\*\\.)?[a-z0-9.:\\[\\]-]+$" .) }}
{{- fail (printf "nodeAgent.allowedAddresses: %q is not host[:port] (lowercase), optionally with \"*.\" before a DNS name, like registry.example:5000 or *.corp.example" .) }}
{{- end }}
{{- end }}
{{- join "," (uniq $allowed) -}}
{{- end -}}

{{- /*
The mirrors of public registries (--node-mirrors), comma-separated UPSTREAM=service:NAMESPACE/NAME:PORT or
UPSTREAM=ENDPOINT; fails on an entry with neither or both, and on a second mirror for one upstream.
*/ -}}
{{- define "lrp.nodeMirrors" -}}
{{- $mirrors := list -}}
{{- $upstreams := list -}}
{{- range .Values.nodeAgent.mirrors }}
{{- if has .upstream $upstreams }}
{{- fail (printf "nodeAgent.mirrors: %q has two mirrors; one mirror per upstream" .upstream) }}
{{- end }}
{{- $upstreams = append $upstreams .upstream -}}
{{- if and .service .endpoint }}
{{- fail (printf "nodeAgent.mirrors: the mirror of %q has both a service and an endpoint; give one" .upstream) }}
{{- else if .service }}
{{- $mirrors = append $mirrors (printf "%s=service:%s/%s:%d" .upstream .service.namespace .service.name (int .service.port)) -}}
{{- else if .endpoint }}
{{- $mirrors = append $mirrors (printf "%s=%s" .upstream .endpoint) -}}
{{- else }}
{{- fail (printf "nodeAgent.mirrors: the mirror of %q needs a service ({namespace, name, port}) or an endpoint (http://host:port)" .upstream) }}
{{- end }}
{{- end }}
{{- join "," $mirrors -}}
{{- end -}}

{{/* The registries the agents relay, as --node-relays takes them (NAMESPACE/NAME=PORT,...): one port and one entry
per registry, the agents' own port excluded; empty unless nodeAgent.relay.enabled. */}}
{{- define "lrp.nodeRelays" -}}
{{- if .Values.nodeAgent.relay.enabled }}
{{- $relays := list -}}
{{- $ports := list -}}
{{- $services := list -}}
{{- range .Values.nodeAgent.relay.registries }}
{{- $service := printf "%s/%s" .service.namespace .service.name -}}
{{- $port := int .port -}}
{{- if has $service $services }}
{{- fail (printf "nodeAgent.relay.registries: %s is relayed twice; one port per registry" $service) }}
{{- end }}
{{- if has $port $ports }}
{{- fail (printf "nodeAgent.relay.registries: port %d is given to two registries; one registry per port" $port) }}
{{- end }}
{{- if eq $port (int $.Values.nodeAgent.httpPort) }}
{{- fail (printf "nodeAgent.relay.registries: port %d of %s is nodeAgent.httpPort, the agents' own port on every node" $port $service) }}
{{- end }}
{{- $services = append $services $service -}}
{{- $ports = append $ports $port -}}
{{- $relays = append $relays (printf "%s=%d" $service $port) -}}
{{- end }}
{{- join "," $relays -}}
{{- end }}
{{- end -}}

{{/* What the ServiceMonitor's and the PodMonitor's endpoints share besides the interval. */}}
{{- define "lrp.scrapeSettings" -}}
{{- with .Values.serviceMonitor.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .Values.serviceMonitor.relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.serviceMonitor.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The Secret holding the controller's serving certificate when its port speaks HTTPS (metricsAuth with
     metricsTLS.enabled); empty when it speaks HTTP. */}}
{{- define "lrp.metricsTLSSecret" -}}
{{- if and .Values.metricsAuth .Values.metricsTLS.enabled -}}
{{- .Values.metricsTLS.secretName | default (printf "%s-metrics-tls" (include "lrp.fullname" .) | trunc 63 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{/* The name the metrics Service is reached by, which the serving certificate must hold. */}}
{{- define "lrp.metricsServerName" -}}
{{- printf "%s-metrics.%s.svc" (include "lrp.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The egress rule to the API server: networkPolicy.apiServer, with what it leaves empty read from the
EndpointSlices of default/kubernetes (pods reach the API server there once the Service is translated). */}}
{{- define "lrp.apiServerEgress" -}}
{{- $given := .Values.networkPolicy.apiServer }}
{{- $cidrs := $given.cidrs | default list }}
{{- $ports := $given.ports | default list }}
{{- if or (not $cidrs) (not $ports) }}
{{- $found := list }}
{{- $foundPorts := list }}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" }}
{{- range ($slices.items | default list) }}
{{- /* Only the API server's own slice, named after its Service, and its https port: another slice labelled for the
Service (anyone who may write EndpointSlices in default could add one) opens nothing. */}}
{{- if and (eq .metadata.name "kubernetes") (eq (get (.metadata.labels | default dict) "kubernetes.io/service-name") "kubernetes") }}
{{- range (.endpoints | default list) }}
{{- range .addresses }}
{{- $found = append $found (ternary (printf "%s/128" .) (printf "%s/32" .) (contains ":" .)) }}
{{- end }}
{{- end }}
{{- range (.ports | default list) }}
{{- if eq (.name | default "") "https" }}
{{- $foundPorts = append $foundPorts (int .port) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $cidrs }}{{ $cidrs = $found | uniq }}{{ end }}
{{- if not $ports }}{{ $ports = $foundPorts | uniq }}{{ end }}
{{- if or (not $cidrs) (not $ports) }}
{{- fail "networkPolicy.enabled: helm found no EndpointSlice of default/kubernetes to read the API server's addresses and port from (helm template and --dry-run=client cannot read the cluster); set networkPolicy.apiServer.cidrs and .ports to what `kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes` shows" }}
{{- end }}
{{- end }}
- to:
    {{- range $cidrs }}
    - ipBlock:
        cidr: {{ . | quote }}
    {{- end }}
  ports:
    {{- range $ports }}
    - protocol: TCP
      port: {{ int . }}
    {{- end }}
{{- end -}}

{{/* The controller's arguments but the plan stamp, one list item a line. */}}
{{- define "lrp.controllerArgs" -}}
- {{ printf "--registry-selector=%s" .Values.registry.selector | quote }}
{{- if not .Values.registry.builtin }}
- --no-builtin-registries
{{- end }}
{{- with .Values.registry.watchNamespaces }}
- {{ printf "--watch-namespaces=%s" (join "," .) | quote }}
{{- end }}
{{- with .Values.registry.allowedNamespaces }}
- {{ printf "--allowed-namespaces=%s" (join "," .) | quote }}
{{- end }}
- {{ printf "--node-address=%s" .Values.registry.nodeAddress | quote }}
- {{ printf "--cluster-domain=%s" .Values.registry.clusterDomain | quote }}
{{- with .Values.registry.helpUrl }}
- {{ printf "--help-url=%s" . | quote }}
{{- end }}
- {{ printf "--grace-period=%s" .Values.registry.gracePeriod | quote }}
- {{ printf "--kube-proxy-configmap=%s" .Values.registry.kubeProxyConfigMap | quote }}
- {{ printf "--configmap-namespace=%s" .Values.configMap.namespace | quote }}
- {{ printf "--configmap-name=%s" .Values.configMap.name | quote }}
{{- if .Values.configMap.takeOver }}
- --take-over
{{- end }}
{{- if .Values.pullSecrets.enabled }}
- --pull-secrets
- {{ printf "--pull-secret-name=%s" .Values.pullSecrets.name | quote }}
{{- with .Values.pullSecrets.serviceAccounts }}
- {{ printf "--pull-secret-service-accounts=%s" (join "," .) | quote }}
{{- end }}
{{- end }}
{{- if .Values.nodeAgent.enabled }}
- {{ printf "--node-plan-configmap=%s" (printf "%s-node-plan" (include "lrp.fullname" .) | trunc 63 | trimSuffix "-") | quote }}
{{- with include "lrp.nodeAllowedAddresses" . }}
- {{ printf "--node-allowed-addresses=%s" . | quote }}
{{- end }}
{{- with include "lrp.nodeMirrors" . }}
- {{ printf "--node-mirrors=%s" . | quote }}
{{- end }}
{{- with include "lrp.nodeRelays" . }}
- {{ printf "--node-relays=%s" . | quote }}
{{- end }}
{{- end }}
{{- if .Values.leaderElection.enabled }}
- --leader-elect
- {{ printf "--leader-elect-resource-name=%s" (include "lrp.fullname" .) | quote }}
- {{ printf "--leader-elect-lease-duration=%s" .Values.leaderElection.leaseDuration | quote }}
{{- end }}
- {{ printf "--log-format=%s" .Values.logging.format | quote }}
- {{ printf "--log-level=%s" .Values.logging.level | quote }}
- --http-address=0.0.0.0:{{ .Values.httpPort }}
{{- if .Values.metricsAuth }}
- --metrics-auth
{{- end }}
{{- if include "lrp.metricsTLSSecret" . }}
- --tls-cert-file=/etc/local-registry-publisher/metrics-tls/tls.crt
- --tls-private-key-file=/etc/local-registry-publisher/metrics-tls/tls.key
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The stamp of the controller's configuration (its arguments and image): the controller writes it into the node
plan, and the plan's ConfigMap carries it as an annotation, so an agent knows whether the plan it reads is this
release's or one the previous controller wrote (PlanPending until then). The same values give the same stamp, so an
upgrade that changes nothing of the controller leaves the plan current. */}}
{{- define "lrp.planStamp" -}}
{{- printf "%s\n%s" (include "lrp.controllerArgs" .) (include "lrp.image" .) | sha256sum | trunc 16 -}}
{{- end -}}

{{/* The uninstall hook's own ServiceAccount and Roles: made just before its Job (a lower weight), deleted with it. */}}
{{- define "lrp.hookRbacAnnotations" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: "-5"
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
