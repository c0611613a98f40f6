//! Registration: the hub credential each agent gets, and which certificate requests for it
//! are approved.
//!
//! The ManagedClusterAddOn's `status.registrations` tells the WEC's OCM registration agent what
//! to request: a client certificate from `kubernetes.io/kube-apiserver-client` with the subject
//! below (OCM addon-framework's `agent.DefaultUser` and `agent.DefaultGroups`). The registration
//! agent sends the CSR with its own identity (`system:open-cluster-management:<cluster>:<agent>`)
//! and, once it is approved and signed, writes the `addon-status-hub-kubeconfig` Secret on the WEC.

use std::collections::BTreeSet;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use ks_shared::names::{OCM_ADDON_NAME_LABEL, OCM_CLUSTER_NAME_LABEL, STATUS_ADDON_NAME};
use ks_shared::ocm::{RegistrationConfig, Subject};

/// The signer of Kubernetes API client certificates.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The agent name in the certificate user. Fixed, unlike upstream's random name per controller
/// start, so a controller restart does not make every WEC request a new certificate.
pub const AGENT_NAME: &str = "addon-status-agent";
/// The key usages the registration agent asks for; `client auth` is the one that matters.
const ALLOWED_USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
/// The longest certificate lifetime approved (a year, the signer's default); OCM rotates the
/// certificate well before it ends.
const MAX_EXPIRATION_SECONDS: i32 = 365 * 24 * 3600;

/// The group every certificate for this add-on on `cluster` carries; the hub Role is bound to it.
pub fn cluster_addon_group(cluster: &str) -> String {
    format!("system:open-cluster-management:cluster:{cluster}:addon:{STATUS_ADDON_NAME}")
}

/// The certificate user of the agent on `cluster`.
pub fn agent_user(cluster: &str) -> String {
    format!("{}:agent:{AGENT_NAME}", cluster_addon_group(cluster))
}

/// The certificate groups of the agent on `cluster`, in addon-framework's order.
pub fn agent_groups(cluster: &str) -> Vec<String> {
    vec![
        cluster_addon_group(cluster),
        format!("system:open-cluster-management:addon:{STATUS_ADDON_NAME}"),
        "system:authenticated".into(),
    ]
}

/// The registration to declare on `cluster`'s ManagedClusterAddOn.
pub fn registration(cluster: &str) -> RegistrationConfig {
    RegistrationConfig {
        signer_name: CLIENT_SIGNER.into(),
        subject: Subject {
            user: agent_user(cluster),
            groups: agent_groups(cluster),
            organization_unit: Vec::new(),
        },
    }
}

/// What the approver does with a CSR.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Approve it for `cluster`.
    Approve { cluster: String },
    /// Leave it alone: not ours, already decided, or not what our agent may get.
    Skip(String),
}

/// What the approver knows about the cluster a CSR names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterState {
    /// The ManagedCluster exists.
    pub cluster_exists: bool,
    /// The cluster's `addon-status` ManagedClusterAddOn exists and is not being deleted.
    pub addon_enabled: bool,
}

/// The cluster a CSR claims to be for, if it is labelled as an `addon-status` request.
pub fn claimed_cluster(csr: &CertificateSigningRequest) -> Option<&str> {
    let labels = csr.metadata.labels.as_ref()?;
    if labels.get(OCM_ADDON_NAME_LABEL).map(String::as_str) != Some(STATUS_ADDON_NAME) {
        return None;
    }
    labels
        .get(OCM_CLUSTER_NAME_LABEL)
        .map(String::as_str)
        .filter(|c| !c.is_empty())
}

/// True once anyone approved, denied or failed the CSR.
pub fn is_decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// Decides a CSR: approve exactly what the cluster's registration agent requests for our agent.
pub fn decide(csr: &CertificateSigningRequest, state: ClusterState) -> Verdict {
    let skip = |why: String| Verdict::Skip(why);
    let Some(cluster) = claimed_cluster(csr) else {
        return skip("not labelled as an addon-status request".into());
    };
    if is_decided(csr) {
        return skip("already decided".into());
    }
    if !state.cluster_exists {
        return skip(format!("no ManagedCluster {cluster}"));
    }
    if !state.addon_enabled {
        return skip(format!("add-on not enabled on {cluster}"));
    }
    let spec = &csr.spec;
    if spec.signer_name != CLIENT_SIGNER {
        return skip(format!("signer {} is not {CLIENT_SIGNER}", spec.signer_name));
    }
    // Only the cluster's own registration agent may ask; the trailing colon keeps cluster1's
    // agent from asking for cluster10.
    let requester = spec.username.as_deref().unwrap_or_default();
    if !requester.starts_with(&format!("system:open-cluster-management:{cluster}:")) {
        return skip(format!("requester {requester:?} is not {cluster}'s registration agent"));
    }
    // The prefix alone also matches other clusters' add-on agents when a cluster is named
    // `cluster` (their users are `system:open-cluster-management:cluster:<name>:addon:…`), so
    // the requester must also be in the cluster's own group, as its registration agent is.
    let own_group = format!("system:open-cluster-management:{cluster}");
    if !spec.groups.iter().flatten().any(|g| *g == own_group) {
        return skip(format!(
            "requester {requester:?} is not in {cluster}'s group {own_group:?}"
        ));
    }
    if let Some(seconds) = spec.expiration_seconds
        && seconds > MAX_EXPIRATION_SECONDS
    {
        return skip(format!("expirationSeconds {seconds} is more than a year"));
    }
    let usages = spec.usages.as_deref().unwrap_or_default();
    if !usages.iter().any(|u| u == "client auth") || usages.iter().any(|u| !ALLOWED_USAGES.contains(&u.as_str())) {
        return skip(format!("usages {usages:?} are not client-only"));
    }
    match requested_subject(&spec.request.0) {
        Err(why) => skip(why),
        Ok((user, groups)) => {
            let expected: BTreeSet<String> = agent_groups(cluster).into_iter().collect();
            if user != agent_user(cluster) {
                skip(format!("subject user {user:?} is not {:?}", agent_user(cluster)))
            } else if groups != expected {
                skip(format!("subject groups {groups:?} are not {expected:?}"))
            } else {
                Verdict::Approve {
                    cluster: cluster.to_string(),
                }
            }
        }
    }
}

/// The common name and organizations of a PEM certificate request.
fn requested_subject(pem: &[u8]) -> Result<(String, BTreeSet<String>), String> {
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::prelude::FromDer;

    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| format!("request is not PEM: {e}"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(format!("PEM block is {:?}, not CERTIFICATE REQUEST", pem.label));
    }
    let (_, request) =
        X509CertificationRequest::from_der(&pem.contents).map_err(|e| format!("unreadable request: {e}"))?;
    let subject = &request.certification_request_info.subject;
    let names: Vec<&str> = subject.iter_common_name().filter_map(|a| a.as_str().ok()).collect();
    let [user] = names.as_slice() else {
        return Err(format!("{} common names, want one", names.len()));
    };
    let groups = subject
        .iter_organization()
        .map(|a| a.as_str().map(str::to_string))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("unreadable organization: {e}"))?;
    Ok((user.to_string(), groups))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use kube::api::ObjectMeta;

    const ENABLED: ClusterState = ClusterState {
        cluster_exists: true,
        addon_enabled: true,
    };

    // Requests made as Go's x509 makes them (one organization per RDN), with the
    // addon-framework subject for cluster1 and variants of it. Made with Python's
    // `cryptography`, since openssl refuses the conventional names, longer than 64 characters.
    const AGENT_CLUSTER1: &[u8] = include_bytes!("testdata/agent-cluster1.csr.pem");
    const FOREIGN_USER: &[u8] = include_bytes!("testdata/foreign-user.csr.pem");
    const EXTRA_GROUP: &[u8] = include_bytes!("testdata/extra-group.csr.pem");
    const TWO_GROUPS: &[u8] = include_bytes!("testdata/two-groups.csr.pem");
    const REQUESTER: &str = "system:open-cluster-management:cluster1:x7k2p";

    fn csr(cluster: &str, requester: &str, pem: Vec<u8>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some("addon-cluster1-addon-status-abcde".into()),
                labels: Some(
                    [
                        (OCM_CLUSTER_NAME_LABEL.to_string(), cluster.to_string()),
                        (OCM_ADDON_NAME_LABEL.to_string(), STATUS_ADDON_NAME.to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem),
                signer_name: CLIENT_SIGNER.into(),
                username: Some(requester.into()),
                groups: Some(vec![
                    format!("system:open-cluster-management:{cluster}"),
                    "system:open-cluster-management:managed-clusters".into(),
                    "system:authenticated".into(),
                ]),
                usages: Some(ALLOWED_USAGES.iter().map(|u| u.to_string()).collect()),
                ..Default::default()
            },
            status: None,
        }
    }

    /// cluster1's registration agent's request for its agent certificate, as OCM makes it.
    pub(crate) fn good() -> CertificateSigningRequest {
        csr("cluster1", REQUESTER, AGENT_CLUSTER1.to_vec())
    }

    /// An add-on whose stored registration lost its fields (`{}`) is read, not refused (which
    /// stopped the list of every add-on), and reads as not ours: ks-addon applies its own again.
    #[test]
    fn a_registration_stored_empty_is_read_and_is_not_ours() {
        let addon: ks_shared::ocm::ManagedClusterAddOn = serde_json::from_value(serde_json::json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
            "metadata": {"name": "addon-status", "namespace": "cluster1"},
            "spec": {}, "status": {"registrations": [{}]}}))
        .expect("read leniently");
        let stored = addon.status.unwrap_or_default().registrations;
        assert_eq!(stored.len(), 1);
        assert_ne!(stored, vec![registration("cluster1")]);
    }

    #[test]
    fn conventions_match_the_addon_framework() {
        assert_eq!(
            agent_user("cluster1"),
            "system:open-cluster-management:cluster:cluster1:addon:addon-status:agent:addon-status-agent"
        );
        assert_eq!(
            agent_groups("cluster1"),
            [
                "system:open-cluster-management:cluster:cluster1:addon:addon-status",
                "system:open-cluster-management:addon:addon-status",
                "system:authenticated"
            ]
        );
        assert_eq!(registration("c").signer_name, CLIENT_SIGNER);
    }

    #[test]
    fn approves_the_registration_agents_request() {
        assert_eq!(
            decide(&good(), ENABLED),
            Verdict::Approve {
                cluster: "cluster1".into()
            }
        );
    }

    fn skipped(csr: &CertificateSigningRequest, state: ClusterState) -> bool {
        matches!(decide(csr, state), Verdict::Skip(_))
    }

    #[test]
    fn skips_unknown_clusters_disabled_addons_and_decided_requests() {
        let csr = good();
        assert!(skipped(
            &csr,
            ClusterState {
                cluster_exists: false,
                ..ENABLED
            }
        ));
        assert!(skipped(
            &csr,
            ClusterState {
                addon_enabled: false,
                ..ENABLED
            }
        ));
        let mut decided = csr.clone();
        decided.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Denied".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(skipped(&decided, ENABLED));
        let mut other_addon = csr;
        other_addon
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(OCM_ADDON_NAME_LABEL.into(), "other".into());
        assert!(skipped(&other_addon, ENABLED));
    }

    #[test]
    fn skips_requests_from_anyone_but_the_clusters_agent() {
        for requester in [
            "system:open-cluster-management:cluster10:x7k2p",
            "system:open-cluster-management:cluster2:x7k2p",
            "system:serviceaccount:default:builder",
            "",
        ] {
            assert!(
                skipped(&csr("cluster1", requester, AGENT_CLUSTER1.to_vec()), ENABLED),
                "{requester}"
            );
        }
        // The right request labelled for another cluster is that cluster's agent's business.
        assert!(skipped(&csr("cluster2", REQUESTER, AGENT_CLUSTER1.to_vec()), ENABLED));
    }

    #[test]
    fn skips_a_requester_outside_the_clusters_group() {
        // As another cluster's add-on agent asking for a cluster named `cluster` would be: the
        // user has the registration agent's prefix, the groups are not the cluster's.
        let mut outsider = good();
        outsider.spec.groups = Some(vec![
            "system:open-cluster-management:addon:addon-status".into(),
            "system:authenticated".into(),
        ]);
        let Verdict::Skip(why) = decide(&outsider, ENABLED) else {
            panic!("approved a requester outside the cluster's group");
        };
        assert!(why.contains("system:open-cluster-management:cluster1\""), "{why}");
        outsider.spec.groups = None;
        assert!(skipped(&outsider, ENABLED));
    }

    #[test]
    fn skips_certificates_longer_than_a_year() {
        let mut long = good();
        long.spec.expiration_seconds = Some(MAX_EXPIRATION_SECONDS + 1);
        assert!(skipped(&long, ENABLED));
        long.spec.expiration_seconds = Some(3600);
        assert!(!skipped(&long, ENABLED), "a short certificate is fine");
    }

    #[test]
    fn skips_other_subjects_signers_and_usages() {
        for pem in [FOREIGN_USER, EXTRA_GROUP, TWO_GROUPS] {
            assert!(skipped(&csr("cluster1", REQUESTER, pem.to_vec()), ENABLED));
        }
        let mut signer = good();
        signer.spec.signer_name = "kubernetes.io/kubelet-serving".into();
        assert!(skipped(&signer, ENABLED));
        let mut usages = good();
        usages.spec.usages = Some(vec!["server auth".into(), "client auth".into()]);
        assert!(skipped(&usages, ENABLED));
        usages.spec.usages = None;
        assert!(skipped(&usages, ENABLED));
    }

    #[test]
    fn garbage_requests_are_skipped_not_panics() {
        for pem in [
            b"".to_vec(),
            b"not pem".to_vec(),
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n".to_vec(),
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
        ] {
            assert!(skipped(&csr("cluster1", REQUESTER, pem), ENABLED));
        }
    }
}
