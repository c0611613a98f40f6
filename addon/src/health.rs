//! Health: the add-on is Available when the work agent reports the agent Deployment has a ready
//! replica (status feedback `ReadyReplicas` of the WellKnownStatus rule), as OCM's work-based
//! health prober decides it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use ks_shared::names::STATUS_AGENT_DEPLOYMENT;
use ks_shared::ocm::ManifestWorkStatus;

/// The ManagedClusterAddOn condition type that `kubectl get managedclusteraddons` shows.
pub const AVAILABLE: &str = "Available";
pub const REASON_AVAILABLE: &str = "ProbeAvailable";
pub const REASON_UNAVAILABLE: &str = "ProbeUnavailable";
pub const REASON_INVALID_CONFIG: &str = "InvalidDeploymentConfig";
/// An object the add-on writes exists under its name, and another wrote it.
pub const REASON_NAME_TAKEN: &str = "NameTaken";

/// A condition's status, reason and message, before timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// The add-on's health from its ManifestWork's status (`None` when the work or its status is
/// not there yet).
pub fn health(work_status: Option<&ManifestWorkStatus>, install_namespace: &str) -> Health {
    let unknown = |message: String| Health {
        status: "Unknown",
        reason: REASON_UNAVAILABLE,
        message,
    };
    let deployment = format!("{install_namespace}/{STATUS_AGENT_DEPLOYMENT}");
    let manifest = work_status
        .into_iter()
        .flat_map(|s| &s.resource_status.manifests)
        .find(|m| {
            let meta = &m.resource_meta;
            meta.group == "apps"
                && meta.resource == "deployments"
                && meta.name == STATUS_AGENT_DEPLOYMENT
                && meta.namespace == install_namespace
        });
    let Some(manifest) = manifest.filter(|m| !m.status_feedback.values.is_empty()) else {
        return unknown(format!("no values are probed for deployment {deployment}"));
    };
    let ready = manifest
        .status_feedback
        .values
        .iter()
        .find(|v| v.name == "ReadyReplicas")
        .and_then(|v| v.field_value.integer);
    match ready {
        None => unknown(format!("readyReplicas is not probed for deployment {deployment}")),
        Some(n) if n >= 1 => Health {
            status: "True",
            reason: REASON_AVAILABLE,
            message: format!("{n} ready replica(s) of deployment {deployment}"),
        },
        Some(n) => Health {
            status: "False",
            reason: REASON_UNAVAILABLE,
            message: format!("readyReplicas is {n} for deployment {deployment}"),
        },
    }
}

/// The Available condition for `health`, keeping the previous transition time when the status
/// has not changed (so an unchanged condition is not a change at all).
pub fn available_condition(
    health: Health,
    previous: Option<&Condition>,
    now: Time,
    generation: Option<i64>,
) -> Condition {
    let last_transition_time = previous
        .filter(|p| p.status == health.status)
        .map(|p| p.last_transition_time.clone())
        .unwrap_or(now);
    Condition {
        type_: AVAILABLE.into(),
        status: health.status.into(),
        reason: health.reason.into(),
        message: health.message,
        last_transition_time,
        observed_generation: generation,
    }
}

/// True when `a` and `b` say the same thing (timestamps aside).
pub fn same_condition(a: &Condition, b: &Condition) -> bool {
    (&a.type_, &a.status, &a.reason, &a.message, a.observed_generation)
        == (&b.type_, &b.status, &b.reason, &b.message, b.observed_generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use ks_shared::ocm::{
        FeedbackValue, FieldValue, ManifestCondition, ManifestResourceMeta, ManifestResourceStatus, StatusFeedback,
    };

    const NS: &str = "open-cluster-management-agent-addon";

    fn status(values: Vec<(&str, i64)>) -> ManifestWorkStatus {
        ManifestWorkStatus {
            conditions: Vec::new(),
            resource_status: ManifestResourceStatus {
                manifests: vec![ManifestCondition {
                    resource_meta: ManifestResourceMeta {
                        group: "apps".into(),
                        resource: "deployments".into(),
                        name: STATUS_AGENT_DEPLOYMENT.into(),
                        namespace: NS.into(),
                        ..Default::default()
                    },
                    conditions: Vec::new(),
                    status_feedback: StatusFeedback {
                        values: values
                            .into_iter()
                            .map(|(name, n)| FeedbackValue {
                                name: name.into(),
                                field_value: FieldValue {
                                    type_: "Integer".into(),
                                    integer: Some(n),
                                    ..Default::default()
                                },
                            })
                            .collect(),
                    },
                }],
            },
        }
    }

    #[test]
    fn ready_replica_means_available() {
        let health = health(Some(&status(vec![("Replicas", 1), ("ReadyReplicas", 1)])), NS);
        assert_eq!((health.status, health.reason), ("True", REASON_AVAILABLE));
    }

    #[test]
    fn no_ready_replica_means_unavailable() {
        let health = health(Some(&status(vec![("ReadyReplicas", 0)])), NS);
        assert_eq!(health.status, "False");
        assert!(health.message.contains("readyReplicas is 0"), "{}", health.message);
    }

    #[test]
    fn missing_feedback_is_unknown() {
        assert_eq!(health(None, NS).status, "Unknown");
        assert_eq!(health(Some(&status(vec![])), NS).status, "Unknown");
        assert_eq!(health(Some(&status(vec![("Replicas", 1)])), NS).status, "Unknown");
        // Feedback for a Deployment in another namespace does not count.
        assert_eq!(
            health(Some(&status(vec![("ReadyReplicas", 1)])), "elsewhere").status,
            "Unknown"
        );
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let then = Time(Timestamp::from_second(1_000).unwrap());
        let now = Time(Timestamp::from_second(2_000).unwrap());
        let available = || Health {
            status: "True",
            reason: REASON_AVAILABLE,
            message: "ok".into(),
        };
        let first = available_condition(available(), None, then.clone(), Some(1));
        let same = available_condition(available(), Some(&first), now.clone(), Some(1));
        assert_eq!(same.last_transition_time, then);
        assert!(same_condition(&first, &same));
        let down = Health {
            status: "False",
            reason: REASON_UNAVAILABLE,
            message: "down".into(),
        };
        let changed = available_condition(down, Some(&first), now.clone(), Some(1));
        assert_eq!(changed.last_transition_time, now);
        assert!(!same_condition(&first, &changed));
    }
}
