{{/* Names and labels shared by every taubot object. */}}

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

{{- define "taubot.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "taubot" -}}
{{- end -}}

{{- define "taubot.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
Environment of both processes. Secrets are files (TAUBOT_*_FILE), never env
values, so they stay out of `kubectl describe` and child processes.
*/}}
{{- define "taubot.env" -}}
- name: TAUBOT_WORKSPACES_DIR
  value: /etc/taubot/workspaces
- name: TAUBOT_IDENTITY_FILE
  value: /etc/taubot/identity/identity.yaml
{{- if .Values.redis.urlSecret.name }}
- name: TAUBOT_REDIS_URL_FILE
  value: /run/secrets/taubot-redis/{{ .Values.redis.urlSecret.key }}
{{- else }}
- name: TAUBOT_REDIS_URL
  value: {{ .Values.redis.url | quote }}
{{- end }}
- name: TAUBOT_SLACK_BOT_TOKEN_FILE
  value: /run/secrets/taubot-slack/{{ .Values.slack.botTokenKey }}
- name: TAUBOT_SLACK_SIGNING_SECRET_FILE
  value: /run/secrets/taubot-slack/{{ .Values.slack.signingSecretKey }}
{{- if .Values.slack.appTokenKey }}
- name: TAUBOT_SLACK_APP_TOKEN_FILE
  value: /run/secrets/taubot-slack/{{ .Values.slack.appTokenKey }}
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
{{- if .Values.redis.urlSecret.name }}
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
    name: {{ .Release.Name }}-workspaces
- name: identity
  configMap:
    name: {{ .Release.Name }}-identity
- name: slack
  secret:
    secretName: {{ .Values.slack.existingSecret }}
    defaultMode: 0400
{{- if .Values.redis.urlSecret.name }}
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

{{- define "taubot.podCommon" -}}
serviceAccountName: {{ include "taubot.serviceAccountName" . }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "taubot.volumes" . | nindent 2 }}
{{- end -}}
