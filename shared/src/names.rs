//! Well-known names shared with upstream KubeStellar: labels, annotations, finalizers,
//! namespaces, object names and field managers. Changing any of these breaks compatibility.

/// Finalizer the binding controller puts on every BindingPolicy.
pub const BINDING_POLICY_FINALIZER: &str = "bindingpolicy.kubestellar.io/kscontroller";
/// Finalizer the transport controller puts on every Binding.
pub const TRANSPORT_FINALIZER: &str = "transport.kubestellar.io/object-cleanup";

/// Label on a ManifestWork (copied to WorkStatus): the name of the Binding it comes from.
pub const ORIGIN_BINDING_LABEL: &str = "transport.kubestellar.io/originOwnerReferenceBindingKey";
/// Label on a ManifestWork (copied to WorkStatus): the name of the WDS it comes from.
pub const ORIGIN_WDS_LABEL: &str = "transport.kubestellar.io/originWdsName";
/// Annotation on a ManifestWork: the Binding generation it was rendered from.
pub const ORIGIN_BINDING_GENERATION_ANNOTATION: &str = "transport.kubestellar.io/originOwnerReferenceBindingGeneration";

/// kubectl's annotation on an object it applied client-side: the whole object as last applied.
/// Neither delivered to WECs nor kept in the hub's caches.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Annotation on a ManifestWork: a digest of what the transport asked for (our labels, the
/// manifests without trace annotations, the manifest configs). The apiserver normalises what it
/// stores (empty maps dropped, `creationTimestamp: null` added, numbers re-encoded), so comparing
/// a wanted ManifestWork with the stored one can never be exact; comparing digests of what we
/// sent is. Not an upstream name.
pub const CONTENT_DIGEST_ANNOTATION: &str = "transport.kubestellar.io/content-digest";

/// Annotation on a ManifestWork: the API groups of the objects it holds, other than the core
/// group, sorted and comma-separated. The status add-on grants its WEC agent read access to
/// these groups (and no wider), reading only the ManifestWorks' metadata. Not an upstream name.
pub const API_GROUPS_ANNOTATION: &str = "transport.kubestellar.io/api-groups";

/// Annotation on a ManifestWork: how many objects it holds, in decimal. The status add-on sizes
/// each WEC's quota on WorkStatuses from the sum over its mailbox. Not an upstream name.
pub const OBJECT_COUNT_ANNOTATION: &str = "transport.kubestellar.io/object-count";

/// Annotation the transport puts on each object it wraps in a ManifestWork: the object's
/// `metadata.generation` in the WDS, in decimal. It reaches the WEC with the object, and the
/// status agent reports it as `WorkStatus.statusDetails.lastGeneration` (0 when absent).
/// Not an upstream name: upstream never maintains `statusDetails`.
pub const WDS_GENERATION_ANNOTATION: &str = "transport.kubestellar.io/wds-generation";

/// Annotation the transport puts, in place of [`WDS_GENERATION_ANNOTATION`], on each object it
/// wraps whose resource has no status subresource: a digest of the WDS object's content (all but
/// its metadata and status). There a write of `.status` (the status returned from a WEC) raises
/// the generation, which would deliver the object again, and OCM's update of a custom resource
/// replaces the WEC object whole, wiping the status its controller wrote. It reaches the WEC
/// with the object, and the status agent puts it on the object's WorkStatus, so that the status
/// controller can tell whether the WEC runs the WDS object's current content. Not an upstream
/// name.
pub const WDS_CONTENT_ANNOTATION: &str = "transport.kubestellar.io/wds-content";

/// Annotation the transport puts on each object it wraps in a ManifestWork: the object's
/// `metadata.uid` in the WDS. It reaches the WEC with the object, and the status agent puts it on
/// the object's WorkStatus, so that the status controller returns only a report on the
/// incarnation the WDS holds now (an object deleted and made again under its name has a new
/// UID). A WorkStatus without it (from an agent before this) is taken as it is. Not an upstream
/// name.
pub const WDS_UID_ANNOTATION: &str = "transport.kubestellar.io/wds-uid";

/// Label value meaning "requested" on the two status-request labels below.
pub const LABEL_TRUE: &str = "true";
/// On a WDS object (copied to its WorkStatus): singleton status return is requested.
pub const SINGLETON_STATUS_LABEL: &str = "managed-by.kubestellar.io/singletonstatus";
/// On a WDS object: multi-WEC status return is requested.
pub const MULTI_WEC_STATUS_LABEL: &str = "managed-by.kubestellar.io/multiwecstatus";
/// Label key prefixes that mark a ManifestWork as KubeStellar's (current and legacy).
pub const KUBESTELLAR_LABEL_PREFIXES: [&str; 2] = ["transport.kubestellar.io/", "managed-by.kubestellar.io/"];

/// Labels on a CombinedStatus naming the object and policy it summarises.
pub mod combined_status_label {
    pub const API_GROUP: &str = "status.kubestellar.io/api-group";
    pub const RESOURCE: &str = "status.kubestellar.io/resource";
    pub const NAMESPACE: &str = "status.kubestellar.io/namespace";
    pub const NAME: &str = "status.kubestellar.io/name";
    pub const BINDING_POLICY: &str = "status.kubestellar.io/binding-policy";
}

/// Annotation whose value `"true"` turns on per-WEC template expansion of an object.
pub const EXPAND_TEMPLATES_ANNOTATION: &str = "control.kubestellar.io/expand-templates";
/// Annotation whose value `nodeport` keeps a Service's `nodePort`s.
pub const PRESERVE_ANNOTATION: &str = "control.kubestellar.io/preserve";
/// The value of [`PRESERVE_ANNOTATION`] that keeps node ports.
pub const PRESERVE_NODEPORT: &str = "nodeport";

/// Trace context annotations (Kubernetes KEP-5915). Never a change on their own.
pub const TRACEPARENT_ANNOTATION: &str = "tracing.k8s.io/traceparent";
pub const TRACESTATE_ANNOTATION: &str = "tracing.k8s.io/tracestate";
/// The common prefix of the trace context annotations.
pub const TRACE_ANNOTATION_PREFIX: &str = "tracing.k8s.io/";

/// Label on KubeFlex ControlPlanes and PostCreateHooks: `wds` or `its`.
pub const KUBEFLEX_CP_TYPE_LABEL: &str = "kflex.kubestellar.io/cptype";
pub const CP_TYPE_WDS: &str = "wds";
pub const CP_TYPE_ITS: &str = "its";

/// The agent's leader-election Lease, in its install namespace on the WEC.
pub const AGENT_LEASE: &str = "ks-status-agent";

/// ITS namespace holding one `customization-properties` ConfigMap per WEC.
pub const CUSTOMIZATION_PROPERTIES_NAMESPACE: &str = "customization-properties";
/// WDS namespace holding CombinedStatuses of cluster-scoped objects.
pub const REPORT_NAMESPACE: &str = "kubestellar-report";
/// ITS namespace of the status add-on controller.
pub const ADDON_CONTROLLER_NAMESPACE: &str = "open-cluster-management";
/// Default WEC namespace of the status add-on agent.
pub const AGENT_INSTALL_NAMESPACE: &str = "open-cluster-management-agent-addon";

/// The status add-on's name in OCM.
pub const STATUS_ADDON_NAME: &str = "addon-status";
/// The ManifestWork, in each cluster namespace, that delivers the status agent.
pub const STATUS_ADDON_MANIFESTWORK: &str = "addon-addon-status-deploy-0";
/// The Secret on each WEC holding the agent's hub kubeconfig.
pub const STATUS_ADDON_HUB_SECRET: &str = "addon-status-hub-kubeconfig";
/// The agent Deployment on each WEC.
pub const STATUS_AGENT_DEPLOYMENT: &str = "status-agent";
/// The agent's ServiceAccount on each WEC (upstream's name).
pub const STATUS_AGENT_SERVICE_ACCOUNT: &str = "status-agent-sa";
/// The hub Role and RoleBinding, in each cluster namespace, granting the agent its mailbox.
pub const STATUS_ADDON_HUB_ROLE: &str = "open-cluster-management:addon-status:agent";
/// The reason on the Approved condition of the agent CSRs that ks-addon approves.
pub const STATUS_ADDON_CSR_APPROVAL_REASON: &str = "AutoApprovedByKubeStellarStatusAddOn";
/// OCM labels on an add-on's CSRs (set by the registration agent) and on its ManifestWorks.
pub const OCM_CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";
pub const OCM_ADDON_NAME_LABEL: &str = "open-cluster-management.io/addon-name";

/// Field managers, as upstream names them.
pub mod field_manager {
    /// The binding controller.
    pub const BINDING: &str = "Binding";
    /// The status controller.
    pub const STATUS: &str = "Status";
    /// The transport controller, writing status in its WDS.
    pub const TRANSPORT: &str = "transport-controller";
    /// The status add-on controller.
    pub const ADDON: &str = "ks-addon";
    /// The status agent: every write it makes.
    pub const AGENT: &str = "ks-agent";

    /// The transport controller of the WDS `wds`, writing ManifestWorks in the ITS: one manager
    /// per WDS, so that no hub's forced apply takes fields another hub's holds (every hub wrote
    /// them as [`TRANSPORT`] before). A WDS name is a label value, at most 63 characters, so this
    /// stays within the apiserver's 128.
    pub fn transport_of(wds: &str) -> String {
        format!("{TRANSPORT}-{wds}")
    }
}

/// True when a label key marks a ManifestWork as KubeStellar's.
pub fn is_kubestellar_label(key: &str) -> bool {
    KUBESTELLAR_LABEL_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// True for the trace context annotations, which never count as a change.
pub fn is_trace_annotation(key: &str) -> bool {
    key.starts_with(TRACE_ANNOTATION_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubestellar_labels_by_prefix() {
        assert!(is_kubestellar_label(ORIGIN_WDS_LABEL));
        assert!(is_kubestellar_label(SINGLETON_STATUS_LABEL));
        assert!(!is_kubestellar_label("app.kubernetes.io/name"));
        assert!(!is_kubestellar_label("transport.kubestellar.io"));
    }

    #[test]
    fn one_transport_field_manager_per_wds_within_the_apiservers_limit() {
        assert_eq!(field_manager::transport_of("wds1"), "transport-controller-wds1");
        assert_ne!(field_manager::transport_of("a-b"), field_manager::transport_of("b"));
        assert!(field_manager::transport_of(&"w".repeat(63)).len() <= 128);
    }

    #[test]
    fn trace_annotations_by_prefix() {
        assert!(is_trace_annotation(TRACEPARENT_ANNOTATION));
        assert!(is_trace_annotation(TRACESTATE_ANNOTATION));
        assert!(!is_trace_annotation(EXPAND_TEMPLATES_ANNOTATION));
    }
}
