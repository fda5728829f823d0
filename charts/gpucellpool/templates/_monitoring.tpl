{{/* The Secret holding the scraper's bearer token: the user's, else the chart's own. */}}
{{- define "gpucellpool.scrapeTokenSecret" -}}
{{- $name := .Values.monitoring.serviceMonitor.authorization.credentials.name }}
{{- default (printf "%s-metrics-scraper-token" (include "gpucellpool.fullname" .)) $name }}
{{- end }}

{{/*
The PrometheusRule spec: files/prometheus-rules.yaml without the alerts named in
disabledAlerts (an unknown name fails the render: a typo must not silently keep an alert) and
with extraRules appended as the group gpucellpool.extra. Groups left empty are dropped.
*/}}
{{- define "gpucellpool.prometheusRuleSpec" -}}
{{- $pr := .Values.monitoring.prometheusRule }}
{{- $doc := .Files.Get "files/prometheus-rules.yaml" | fromYaml }}
{{- $known := list }}
{{- $groups := list }}
{{- range $doc.groups }}
{{- $kept := list }}
{{- range .rules }}
{{- $known = append $known (.alert | default "") }}
{{- if not (has (.alert | default "") $pr.disabledAlerts) }}
{{- $kept = append $kept . }}
{{- end }}
{{- end }}
{{- if $kept }}
{{- $groups = append $groups (merge (dict "rules" $kept) (omit . "rules")) }}
{{- end }}
{{- end }}
{{- range $pr.disabledAlerts }}
{{- if not (has . $known) }}
{{- fail (printf "monitoring.prometheusRule.disabledAlerts: no alert named %q in the chart" .) }}
{{- end }}
{{- end }}
{{- with $pr.extraRules }}
{{- $groups = append $groups (dict "name" "gpucellpool.extra" "rules" .) }}
{{- end }}
{{- toYaml (dict "groups" $groups) }}
{{- end }}
