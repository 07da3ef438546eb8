{{/* Names and labels shared by every taubot object. */}}

{{- define "taubot.fullname" -}}
{{- if contains "taubot" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-taubot" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "taubot.labels" -}}
app.kubernetes.io/name: taubot
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end -}}

{{- define "taubot.selectorLabels" -}}
app.kubernetes.io/name: taubot
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ServiceAccount of a component: (dict "root" $ "component" "worker"). */}}
{{- define "taubot.serviceAccountName" -}}
{{- printf "%s-%s" (include "taubot.fullname" .root) .component -}}
{{- end -}}

{{- define "taubot.image" -}}
{{- $repo := required "image.repository is required: build the image from the Dockerfile and push it (see the README, Install on a cluster)" .Values.image.repository -}}
{{ $repo }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The namespaces the descriptors name (spec.namespace), plus rbac.monitor.extraNamespaces. */}}
{{- define "taubot.workspaceNamespaces" -}}
{{- $names := list -}}
{{- range $file, $text := .Values.workspaces -}}
{{- $doc := fromYaml $text -}}
{{- with $doc.spec -}}{{- with .namespace -}}{{- $names = append $names . -}}{{- end -}}{{- end -}}
{{- end -}}
{{- range .Values.rbac.monitor.extraNamespaces -}}{{- $names = append $names . -}}{{- end -}}
{{- $names | uniq | sortAlpha | join "," -}}
{{- end -}}

{{/*
Environment of every process. Secrets are files (TAUBOT_*_FILE), not env values, so they
stay out of `kubectl describe` and child processes; the Redis password alone is an env
value (from a secretKeyRef), expanded into TAUBOT_REDIS_URL.
*/}}
{{- define "taubot.env" -}}
- name: TAUBOT_WORKSPACES_DIR
  value: /etc/taubot/workspaces
- name: TAUBOT_IDENTITY_FILE
  value: /etc/taubot/identity/identity.yaml
- name: TAUBOT_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: TAUBOT_METRICS_PORT
  value: {{ .Values.metrics.port | quote }}
# /healthz, /readyz and /metrics bind every address of the pod: the kubelet's probes and
# Prometheus come from outside it (the NetworkPolicy admits them on the metrics port only).
- name: TAUBOT_METRICS_HOST
  value: "0.0.0.0"
{{- $redisAuth := include "taubot.redisAuth" . }}{{/* also refuses auth.existingSecret beside urlSecret */}}
{{- if and (not .Values.redis.enabled) .Values.redis.urlSecret.name }}
- name: TAUBOT_REDIS_URL_FILE
  value: /run/secrets/taubot-redis/{{ .Values.redis.urlSecret.key }}
{{- else }}
{{- if $redisAuth }}
# The one secret in the environment: Kubernetes expands $(TAUBOT_REDIS_PASSWORD) into the URL
# below, so `kubectl describe` shows only the reference.
- name: TAUBOT_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "taubot.redisSecretName" . }}
      key: {{ include "taubot.redisSecretKey" . }}
{{- end }}
- name: TAUBOT_REDIS_URL
  value: {{ include "taubot.redisUrl" . | quote }}
{{- end }}
- name: TAUBOT_SLACK_BOT_TOKEN_FILE
  value: /run/secrets/taubot-slack/{{ .Values.slack.botTokenKey }}
{{- if eq .Values.bot.mode "socket" }}
- name: TAUBOT_SLACK_APP_TOKEN_FILE
  value: /run/secrets/taubot-slack/{{ .Values.slack.appTokenKey | default "app-token" }}
{{- else }}
- name: TAUBOT_SLACK_SIGNING_SECRET_FILE
  value: /run/secrets/taubot-slack/{{ required "slack.signingSecretKey is required with bot.mode: http (Slack signs every request)" .Values.slack.signingSecretKey }}
{{- if .Values.slack.appTokenKey }}
- name: TAUBOT_SLACK_APP_TOKEN_FILE
  value: /run/secrets/taubot-slack/{{ .Values.slack.appTokenKey }}
{{- end }}
{{- end }}
{{- $buttonKey := .Values.slack.buttonSigningKeyKey | default (ternary "button-signing-key" "" (eq .Values.bot.mode "socket")) }}
{{- if and $buttonKey (not (hasKey .Values.config "TAUBOT_BUTTON_SIGNING_KEY_FILE")) (not (hasKey .Values.config "TAUBOT_BUTTON_SIGNING_KEY")) }}
# Signs the cards' button values (HMAC); without it (and without a signing secret, as in Socket
# Mode) cards would carry no buttons.
- name: TAUBOT_BUTTON_SIGNING_KEY_FILE
  value: /run/secrets/taubot-slack/{{ $buttonKey }}
{{- end }}
{{- if .Values.slack.apiUrl }}
- name: TAUBOT_SLACK_API_URL
  value: {{ .Values.slack.apiUrl | quote }}
{{- end }}
{{- range $name, $value := .Values.config }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "taubot.volumeMounts" -}}
- name: workspaces
  mountPath: /etc/taubot/workspaces
  readOnly: true
- name: identity
  mountPath: /etc/taubot/identity
  readOnly: true
- name: slack
  mountPath: /run/secrets/taubot-slack
  readOnly: true
{{- if and (not .Values.redis.enabled) .Values.redis.urlSecret.name }}
- name: redis
  mountPath: /run/secrets/taubot-redis
  readOnly: true
{{- end }}
- name: tmp
  mountPath: /tmp
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Descriptors and the identity file are two ConfigMaps, not one: the workspaces
directory is read as "every *.yaml is a descriptor", so identity.yaml must not
appear in it.
*/}}
{{- define "taubot.volumes" -}}
- name: workspaces
  configMap:
    name: {{ include "taubot.fullname" . }}-workspaces
- name: identity
  configMap:
    name: {{ include "taubot.fullname" . }}-identity
- name: slack
  secret:
    secretName: {{ .Values.slack.existingSecret }}
    defaultMode: 0400
{{- if and (not .Values.redis.enabled) .Values.redis.urlSecret.name }}
- name: redis
  secret:
    secretName: {{ .Values.redis.urlSecret.name }}
    defaultMode: 0400
{{- end }}
- name: tmp
  emptyDir: {}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod spec shared by the three Deployments: (dict "root" $ "component" "bot"). */}}
{{- define "taubot.podCommon" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "taubot.serviceAccountName" . }}
automountServiceAccountToken: {{ ne .component "bot" }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "taubot.volumes" $root | nindent 2 }}
{{- if and (eq .component "worker") (include "taubot.mlflowKeys" $root) }}
  - name: mlflow
    secret:
      secretName: {{ $root.Values.mlflow.existingSecret }}
      defaultMode: 0400
{{- end }}
{{- end -}}

{{/*
MLflow credentials, for the worker only (it alone reads experiment records): each key of
mlflow.existingSecret a file under /run/secrets/taubot-mlflow, named by TAUBOT_MLFLOW_*_FILE.
"taubot.mlflowKeys" is empty when none is configured, and refuses half a configuration.
*/}}
{{- define "taubot.mlflowKeys" -}}
{{- $m := .Values.mlflow | default dict -}}
{{- $keys := dict -}}
{{- with $m.usernameKey }}{{ $_ := set $keys "TAUBOT_MLFLOW_USERNAME_FILE" . }}{{ end -}}
{{- with $m.passwordKey }}{{ $_ := set $keys "TAUBOT_MLFLOW_PASSWORD_FILE" . }}{{ end -}}
{{- with $m.tokenKey }}{{ $_ := set $keys "TAUBOT_MLFLOW_TOKEN_FILE" . }}{{ end -}}
{{- if ne (empty $m.usernameKey) (empty $m.passwordKey) -}}
{{- fail "mlflow.usernameKey and mlflow.passwordKey go together (HTTP Basic needs both)" -}}
{{- end -}}
{{- if and $keys (not $m.existingSecret) -}}
{{- fail "mlflow.existingSecret is required with mlflow.usernameKey/passwordKey/tokenKey" -}}
{{- end -}}
{{- if and $m.existingSecret (not $keys) -}}
{{- fail "mlflow.existingSecret needs mlflow.usernameKey and passwordKey, or tokenKey" -}}
{{- end -}}
{{- if $keys }}{{ toJson $keys }}{{ end -}}
{{- end -}}

{{- define "taubot.mlflowEnv" -}}
{{- range $name, $key := (include "taubot.mlflowKeys" . | fromJson) }}
- name: {{ $name }}
  value: /run/secrets/taubot-mlflow/{{ $key }}
{{- end }}
{{- end -}}

{{- define "taubot.checksum" -}}
checksum/config: {{ printf "%v%v%v" .Values.workspaces .Values.identity .Values.config | sha256sum }}
{{- end -}}

{{/* Probes on a named port: liveness = the process answers, readiness = Redis answers. */}}
{{- define "taubot.probes" -}}
readinessProbe:
  httpGet: {path: /readyz, port: {{ . }}}
  periodSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet: {path: /healthz, port: {{ . }}}
  initialDelaySeconds: 10
  periodSeconds: 20
  failureThreshold: 3
{{- end -}}

{{/*
Who the worker may impersonate, as a JSON list: rbac.impersonate.users/groups, or else the
users and groups the identity values name. Empty means nothing was named: rbac.yaml then
refuses the install unless rbac.impersonate.unbounded is true. A `system:` name is refused
here whatever its source (the schema refuses it in rbac.impersonate; this also covers the
identity values, whose schema the chart does not repeat).
*/}}
{{- define "taubot.impersonateUsers" -}}
{{- $names := .Values.rbac.impersonate.users -}}
{{- if not $names -}}
{{- range $slack, $entry := .Values.identity.users -}}{{- with $entry.user -}}{{- $names = append $names . -}}{{- end -}}{{- end -}}
{{- end -}}
{{- range $names -}}{{- if hasPrefix "system:" . -}}{{- fail (printf "impersonating %q is refused: a system: user is never impersonated" .) -}}{{- end -}}{{- end -}}
{{- $names | uniq | sortAlpha | toJson -}}
{{- end -}}

{{- define "taubot.impersonateGroups" -}}
{{- $names := .Values.rbac.impersonate.groups -}}
{{- if not $names -}}
{{- range $slack, $entry := .Values.identity.users -}}{{- range $entry.groups -}}{{- $names = append $names . -}}{{- end -}}{{- end -}}
{{- range $slack, $group := .Values.identity.usergroups -}}{{- $names = append $names $group -}}{{- end -}}
{{- end -}}
{{- range $names -}}{{- if hasPrefix "system:" . -}}{{- fail (printf "impersonating group %q is refused: a system: group is never impersonated (system:masters bypasses RBAC)" .) -}}{{- end -}}{{- end -}}
{{- $names | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/*
The Redis URL every process uses: the bundled StatefulSet's Service, or redis.url. With a
password (always for the bundled Redis; redis.auth.existingSecret for the platform's) it
carries $(TAUBOT_REDIS_PASSWORD), which Kubernetes expands from the Secret.
*/}}
{{- define "taubot.redisUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://:$(TAUBOT_REDIS_PASSWORD)@%s-redis.%s.svc:6379/0" (include "taubot.fullname" .) .Release.Namespace -}}
{{- else if include "taubot.redisAuth" . -}}
{{- $url := .Values.redis.url -}}
{{- if not (regexMatch "^rediss?://[^@/]+(/.*)?$" $url) -}}
{{- fail "redis.auth.existingSecret needs redis.url as redis://host:port/db or rediss://host:port/db with no password in it (the chart adds the Secret's)" -}}
{{- end -}}
{{- $parts := splitn "://" 2 $url -}}
{{- printf "%s://:$(TAUBOT_REDIS_PASSWORD)@%s" $parts._0 $parts._1 -}}
{{- else -}}
{{- .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{/* Non-empty when the processes get a Redis password from a Secret. */}}
{{- define "taubot.redisAuth" -}}
{{- $auth := .Values.redis.auth | default dict -}}
{{- if .Values.redis.enabled -}}
true
{{- else if $auth.existingSecret -}}
{{- if .Values.redis.urlSecret.name -}}
{{- fail "redis.auth.existingSecret and redis.urlSecret are exclusive: a URL from a Secret carries its own password" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret holding the Redis password: redis.auth.existingSecret, or the one the chart generates. */}}
{{- define "taubot.redisSecretName" -}}
{{- $auth := .Values.redis.auth | default dict -}}
{{- $auth.existingSecret | default (printf "%s-redis" (include "taubot.fullname" .)) -}}
{{- end -}}

{{- define "taubot.redisSecretKey" -}}
{{- $auth := .Values.redis.auth | default dict -}}
{{- if $auth.existingSecret -}}{{- $auth.existingSecretPasswordKey | default "password" -}}{{- else -}}password{{- end -}}
{{- end -}}

{{- define "taubot.redisSelectorLabels" -}}
app.kubernetes.io/name: redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{/*
Egress to the API server (worker and monitor), as JSON {to, ports, source}: the CIDRs the values
name ("values"); else the `kubernetes` EndpointSlice's addresses and port read at install
("lookup": a NetworkPolicy sees the endpoint kubernetes.default.svc translates to, not the
Service's address); else, where nothing could be read (helm template, GitOps, no right to read
default's EndpointSlices), the private ranges ("private"), which the install notes point out.
*/}}
{{- define "taubot.apiServerEgress" -}}
{{- $api := .Values.networkPolicy.egress.apiServer -}}
{{- $to := list -}}
{{- $ports := list -}}
{{- $source := "values" -}}
{{- range $api.cidrs }}{{ $to = append $to (dict "ipBlock" (dict "cidr" .)) }}{{ end -}}
{{- range $api.ports }}{{ $ports = append $ports (int .) }}{{ end -}}
{{- if not $to -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" | default dict -}}
{{- $bits := ternary "128" "32" (eq ($slice.addressType | default "") "IPv6") -}}
{{- range ($slice.endpoints | default list) }}{{ range (.addresses | default list) }}{{ $to = append $to (dict "ipBlock" (dict "cidr" (printf "%s/%s" . $bits))) }}{{ end }}{{ end -}}
{{- if $to -}}
{{- $source = "lookup" -}}
{{- if not $ports }}{{ range ($slice.ports | default list) }}{{ $ports = append $ports (int .port) }}{{ end }}{{ end -}}
{{- else -}}
{{- $source = "private" -}}
{{- range list "10.0.0.0/8" "172.16.0.0/12" "192.168.0.0/16" "100.64.0.0/10" "fc00::/7" }}{{ $to = append $to (dict "ipBlock" (dict "cidr" .)) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- if not $ports }}{{ $ports = list 443 6443 }}{{ end -}}
{{- toJson (dict "to" ($to | uniq) "ports" ($ports | uniq) "source" $source) -}}
{{- end -}}

{{/*
The endpoints taubot calls besides the in-cluster API server, as a JSON list of {url, port,
inCluster, bot}: slack.apiUrl (every component) and the descriptors' MLflow, Kusto and other
clusters' servers (the worker and the monitor). Their ports join the internet rule; an
in-cluster one (a *.svc or *.cluster.local host, or one with no dot) is not on the internet:
the install notes ask for a networkPolicy.egress.extra rule instead.
*/}}
{{- define "taubot.endpoints" -}}
{{- $urls := list -}}
{{- with .Values.slack.apiUrl }}{{ $urls = append $urls (dict "url" . "bot" true) }}{{ end -}}
{{- range $file, $text := .Values.workspaces -}}
{{- $spec := (fromYaml $text).spec | default dict -}}
{{- $urls = append $urls (dict "url" (dig "experiments" "mlflow" "uri" "" $spec) "bot" false) -}}
{{- $urls = append $urls (dict "url" (dig "logs" "kusto" "endpoint" "" $spec) "bot" false) -}}
{{- $server := dig "cluster" "server" "" $spec -}}
{{- if not (regexMatch "^https://kubernetes\\.default(\\.svc(\\.cluster\\.local)?)?(:443)?/?$" $server) }}{{ $urls = append $urls (dict "url" $server "bot" false) }}{{ end -}}
{{- end -}}
{{- $found := list -}}
{{- range $urls }}{{ if .url -}}
{{- $u := urlParse .url -}}
{{- $hostname := regexReplaceAll ":[0-9]+$" $u.host "" -}}
{{- $port := regexFind ":[0-9]+$" $u.host | trimPrefix ":" | default (ternary "80" "443" (eq $u.scheme "http")) -}}
{{- $inCluster := regexMatch "(\\.svc|\\.cluster\\.local|^[^.]+)$" $hostname -}}
{{- $found = append $found (dict "url" .url "port" (atoi $port) "inCluster" $inCluster "bot" .bot) -}}
{{- end }}{{ end -}}
{{- toJson $found -}}
{{- end -}}

{{/*
The internet rule, as JSON {to, ports, botPorts}: the CIDRs the values name, else everything
but `except`; on internet.ports plus the ports of the endpoints above (the bot's: Slack's only).
*/}}
{{- define "taubot.internetEgress" -}}
{{- $net := .Values.networkPolicy.egress.internet -}}
{{- $to := list -}}
{{- if $net.cidrs -}}
{{- range $net.cidrs }}{{ $to = append $to (dict "ipBlock" (dict "cidr" .)) }}{{ end -}}
{{- else -}}
{{- $v4 := list -}}
{{- $v6 := list -}}
{{- range $net.except }}{{ if contains ":" . }}{{ $v6 = append $v6 . }}{{ else }}{{ $v4 = append $v4 . }}{{ end }}{{ end -}}
{{- $to = list (dict "ipBlock" (dict "cidr" "0.0.0.0/0" "except" $v4)) (dict "ipBlock" (dict "cidr" "::/0" "except" $v6)) -}}
{{- end -}}
{{- $ports := list -}}
{{- range $net.ports }}{{ $ports = append $ports (int .) }}{{ end -}}
{{- $botPorts := $ports -}}
{{- range (include "taubot.endpoints" . | fromJsonArray) }}{{ if not .inCluster -}}
{{- $ports = append $ports (int .port) -}}
{{- if .bot }}{{ $botPorts = append $botPorts (int .port) }}{{ end -}}
{{- end }}{{ end -}}
{{- toJson (dict "to" $to "ports" ($ports | uniq) "botPorts" ($botPorts | uniq)) -}}
{{- end -}}

{{/* Egress to taubot's Redis: the bundled one's pods by label, else the peers the values name. */}}
{{- define "taubot.redisEgress" -}}
{{- $r := .Values.networkPolicy.egress.redis -}}
{{- if .Values.redis.enabled -}}
{{- toJson (dict "to" (list (dict "podSelector" (dict "matchLabels" (include "taubot.redisSelectorLabels" . | fromYaml)))) "port" 6379) -}}
{{- else -}}
{{- $host := (urlParse (.Values.redis.url | default "redis://x")).host -}}
{{- $port := regexFind ":[0-9]+$" $host | trimPrefix ":" | default (toString $r.port) -}}
{{- if not $r.peers }}{{ fail "networkPolicy.egress.redis.peers is required with redis.enabled: false: where the platform's Redis is (an ipBlock, or a namespaceSelector and podSelector)" }}{{ end -}}
{{- toJson (dict "to" $r.peers "port" (atoi $port)) -}}
{{- end -}}
{{- end -}}
