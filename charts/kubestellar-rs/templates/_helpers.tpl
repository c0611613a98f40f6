{{/* Labels of every object of this chart, including those KubeFlex creates from the hooks. */}}
{{- define "kubestellar-rs.baseLabels" -}}
app.kubernetes.io/part-of: kubestellar-rs
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels of the objects of the release itself. */}}
{{- define "kubestellar-rs.labels" -}}
{{ include "kubestellar-rs.baseLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Checks the values every template relies on; fails with a message naming the bad entry. */}}
{{- define "kubestellar-rs.validate" -}}
{{- if not (has .Values.mode (list "kubeflex" "direct")) -}}
{{- fail "mode must be kubeflex or direct" -}}
{{- end -}}
{{- if not (has .Values.hub.logFormat (list "text" "json")) -}}
{{- fail "hub.logFormat must be text or json" -}}
{{- end -}}
{{- range .Values.ITSes -}}
{{- if not .name }}{{ fail "every ITSes entry needs a name" }}{{ end -}}
{{- if not (has (.type | default "vcluster") (list "host" "vcluster" "external")) -}}
{{- fail (printf "ITSes %s: type must be host, vcluster or external" .name) -}}
{{- end -}}
{{- end -}}
{{- range .Values.WDSes -}}
{{- if not .name }}{{ fail "every WDSes entry needs a name" }}{{ end -}}
{{- if not (has (.type | default "k8s") (list "host" "k8s" "external")) -}}
{{- fail (printf "WDSes %s: type must be host, k8s or external" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The bootstrapSecretRef of an `external` ControlPlane (argument: list $ space): KubeFlex adopts the
existing cluster whose kubeconfig the Secret holds, then deletes the Secret.
*/}}
{{- define "kubestellar-rs.bootstrapSecretRef" -}}
{{- $root := index . 0 -}}
{{- $space := index . 1 -}}
bootstrapSecretRef:
  name: {{ ($space.bootstrapSecret).name | default (printf "%s-bootstrap" $space.name) }}
  namespace: {{ ($space.bootstrapSecret).namespace | default $root.Release.Namespace }}
  inClusterKey: {{ ($space.bootstrapSecret).key | default "kubeconfig-incluster" }}
{{- end -}}

{{/*
The ITS of a WDS (argument: list $ wds): its ITSName, else the only ITS of this release. Never
empty, so that ks-hub always gets an ITS name to look for.
*/}}
{{- define "kubestellar-rs.itsOf" -}}
{{- $root := index . 0 -}}
{{- $wds := index . 1 -}}
{{- $itses := $root.Values.ITSes | default list -}}
{{- if $wds.ITSName -}}
{{- $wds.ITSName -}}
{{- else if eq (len $itses) 1 -}}
{{- (index $itses 0).name -}}
{{- else -}}
{{- fail (printf "WDSes %s: set ITSName (this release has %d ITSes)" $wds.name (len $itses)) -}}
{{- end -}}
{{- end -}}

{{/*
The ServiceAccounts of this release's hubs whose WDS uses an ITS (argument: list $ itsName), as
RBAC subjects in JSON: each WDS's ks-hub in <wds>-system, where KubeFlex runs its hook.
*/}}
{{- define "kubestellar-rs.hubSubjects" -}}
{{- $root := index . 0 -}}
{{- $itsName := index . 1 -}}
{{- $subjects := list -}}
{{- range $wds := $root.Values.WDSes -}}
{{- if eq (include "kubestellar-rs.itsOf" (list $root $wds)) $itsName -}}
{{- $subjects = append $subjects (dict "kind" "ServiceAccount" "name" "ks-hub" "namespace" (printf "%s-system" $wds.name)) -}}
{{- end -}}
{{- end -}}
{{- toJson $subjects -}}
{{- end -}}

{{/*
A Role reading only KubeFlex's kubeconfig Secrets of one namespace, and its RoleBinding, as a YAML
list. Argument: a dict with root: $; name; namespace (omitted in a PostCreateHook: KubeFlex puts
them in the control plane's namespace); subjects: the RoleBinding's subjects, as YAML text (in a
hook it may hold KubeFlex variables).
*/}}
{{- define "kubestellar-rs.kubeconfigReader" -}}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: Role
  metadata:
    name: {{ .name }}
    {{- with .namespace }}
    namespace: {{ . }}
    labels:
      {{- include "kubestellar-rs.labels" $.root | nindent 6 }}
    {{- end }}
  rules:
    - apiGroups: [""]
      resources: [secrets]
      resourceNames: {{ toJson .root.Values.kubeconfigSecretNames }}
      verbs: [get]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata:
    name: {{ .name }}
    {{- with .namespace }}
    namespace: {{ . }}
    labels:
      {{- include "kubestellar-rs.labels" $.root | nindent 6 }}
    {{- end }}
  roleRef:
    apiGroup: rbac.authorization.k8s.io
    kind: Role
    name: {{ .name }}
  subjects: {{ .subjects }}
{{- end -}}

{{/* The labels selecting a ks-hub Deployment's Pods (argument: as for hubDeployment). */}}
{{- define "kubestellar-rs.hubSelector" -}}
app.kubernetes.io/name: ks-hub
{{- with .instance }}
app.kubernetes.io/instance: {{ . }}
{{- end }}
{{- end -}}

{{/*
A ks-hub Deployment; both modes use it. Argument: a dict with
  root: $; name; namespace (omitted in a PostCreateHook: KubeFlex puts it in the control plane's
  namespace); instance: the WDS name, telling apart the Deployments of one namespace (omitted in
  a PostCreateHook, where each WDS has its namespace and labels cannot use KubeFlex variables);
  serviceAccount; automountToken: does ks-hub talk to the cluster it runs in; args: the mode's
  flags; secrets: list of {volume, secret}, each mounted at /etc/ks/<volume>.
*/}}
{{- define "kubestellar-rs.hubDeployment" -}}
{{- $hub := .root.Values.hub -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  {{- with .namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- include "kubestellar-rs.hubSelector" . | nindent 4 }}
    {{- include "kubestellar-rs.baseLabels" .root | nindent 4 }}
spec:
  replicas: {{ $hub.replicas }}
  selector:
    matchLabels:
      {{- include "kubestellar-rs.hubSelector" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "kubestellar-rs.hubSelector" . | nindent 8 }}
        {{- with $hub.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $hub.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ .serviceAccount }}
      automountServiceAccountToken: {{ .automountToken }}
      {{- with $hub.priorityClassName }}
      priorityClassName: {{ . | quote }}
      {{- end }}
      {{- with $hub.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $hub.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: ks-hub
          image: {{ printf "%s:%s" $hub.image.repository ($hub.image.tag | default .root.Chart.AppVersion) }}
          imagePullPolicy: {{ $hub.image.pullPolicy }}
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            - --http-address=0.0.0.0:{{ $hub.port }}
            - --log-format={{ $hub.logFormat }}
            - --wds-qps={{ $hub.wdsQPS }}
            - --wds-burst={{ $hub.wdsBurst }}
            - --its-qps={{ $hub.itsQPS }}
            - --its-burst={{ $hub.itsBurst }}
            {{- if $hub.leaderElection.enabled }}
            - --leader-elect
            - --leader-elect-namespace={{ $hub.leaderElection.namespace }}
            - --leader-elect-lease-duration={{ $hub.leaderElection.leaseDurationSeconds }}
            {{- end }}
            {{- range $hub.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: RUST_LOG
              value: {{ $hub.logLevel | quote }}
            {{- with $hub.otlpEndpoint }}
            - name: OTEL_EXPORTER_OTLP_ENDPOINT
              value: {{ . | quote }}
            {{- end }}
            {{- with $hub.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: http
              containerPort: {{ $hub.port }}
          livenessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 20
          # Ready once both spaces answer and the caches have synced.
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            periodSeconds: 10
          resources:
            {{- toYaml $hub.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
          {{- with .secrets }}
          volumeMounts:
            {{- range . }}
            - name: {{ .volume }}
              mountPath: /etc/ks/{{ .volume }}
              readOnly: true
            {{- end }}
          {{- end }}
      {{- with .secrets }}
      volumes:
        {{- range . }}
        - name: {{ .volume }}
          secret:
            secretName: {{ .secret }}
        {{- end }}
      {{- end }}
      {{- with $hub.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $hub.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $hub.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* A Service in front of one ks-hub's /metrics, /healthz and /readyz (port http): for
     Prometheus, and for `helm test`, which asks /readyz through the apiserver's service proxy. */}}
{{- define "kubestellar-rs.hubService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  {{- with .namespace }}
  namespace: {{ . }}
  {{- end }}
  labels:
    {{- include "kubestellar-rs.hubSelector" . | nindent 4 }}
    {{- include "kubestellar-rs.baseLabels" .root | nindent 4 }}
spec:
  selector:
    {{- include "kubestellar-rs.hubSelector" . | nindent 4 }}
  ports:
    - name: http
      port: {{ .root.Values.hub.port }}
      targetPort: http
{{- end -}}
