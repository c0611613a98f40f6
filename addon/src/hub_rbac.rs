//! The agent's permissions on the hub: its own cluster namespace (the mailbox) only, and a quota
//! on what it keeps there.
//!
//! Bound to the group every certificate issued for this add-on on this cluster carries, so an
//! agent holding cluster1's credential can do nothing in cluster2's namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use ks_shared::names::STATUS_ADDON_HUB_ROLE;
use kube::api::ObjectMeta;

use crate::digest::{CONTENT_DIGEST_ANNOTATION, digest};
use crate::registration::cluster_addon_group;

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// The ResourceQuota's key for the number of WorkStatuses in a namespace.
pub const WORK_STATUS_COUNT: &str = "count/workstatuses.control.kubestellar.io";

/// The ResourceQuota's name (a DNS subdomain: no colons, unlike the Role's).
pub const MAILBOX_QUOTA: &str = "addon-status-workstatuses";

fn meta(name: &str, cluster: &str, owner: OwnerReference, digest: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(cluster.into()),
        annotations: Some(BTreeMap::from([(CONTENT_DIGEST_ANNOTATION.into(), digest)])),
        owner_references: Some(vec![owner]),
        ..Default::default()
    }
}

/// The Role in `cluster`'s namespace: WorkStatuses read-write, ManifestWorks and the add-on read-only.
pub fn role(cluster: &str, owner: OwnerReference) -> Role {
    let read_write = ["create", "update", "patch", "delete", "get", "list", "watch"];
    let read_only = ["get", "list", "watch"];
    let rules = vec![
        rule(
            "control.kubestellar.io",
            &["workstatuses", "workstatuses/status"],
            &read_write,
        ),
        rule("work.open-cluster-management.io", &["manifestworks"], &read_only),
        rule(
            "addon.open-cluster-management.io",
            &["managedclusteraddons"],
            &read_only,
        ),
    ];
    Role {
        metadata: meta(STATUS_ADDON_HUB_ROLE, cluster, owner, digest(&rules)),
        rules: Some(rules),
    }
}

/// The RoleBinding giving the Role to the agent's certificate group for `cluster`.
pub fn role_binding(cluster: &str, owner: OwnerReference) -> RoleBinding {
    let role_ref = RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: "Role".into(),
        name: STATUS_ADDON_HUB_ROLE.into(),
    };
    let subjects = vec![Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Group".into(),
        name: cluster_addon_group(cluster),
        namespace: None,
    }];
    RoleBinding {
        metadata: meta(STATUS_ADDON_HUB_ROLE, cluster, owner, digest(&(&role_ref, &subjects))),
        role_ref,
        subjects: Some(subjects),
    }
}

/// How many WorkStatuses the agent keeps in a mailbox it may fill: one per object delivered there
/// (`--max-work-statuses`), sized from the deliveries (`auto`) or fixed, or no quota.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WorkStatusQuota {
    /// Sized from what is delivered to the mailbox ([`sized_from`]).
    Auto,
    /// At most this many; 0: no quota.
    Fixed(u64),
}

impl std::str::FromStr for WorkStatusQuota {
    type Err = String;

    fn from_str(text: &str) -> Result<WorkStatusQuota, String> {
        match text {
            "auto" => Ok(WorkStatusQuota::Auto),
            count => count
                .parse()
                .map(WorkStatusQuota::Fixed)
                .map_err(|_| format!("{count:?} is neither auto nor a number of WorkStatuses (0: no quota)")),
        }
    }
}

impl WorkStatusQuota {
    /// The most WorkStatuses for a mailbox that `objects` are delivered to; `None`: no quota.
    pub fn for_mailbox(self, objects: usize) -> Option<u64> {
        match self {
            WorkStatusQuota::Auto => Some(sized_from(objects)),
            WorkStatusQuota::Fixed(0) => None,
            WorkStatusQuota::Fixed(max) => Some(max),
        }
    }
}

/// The quota for a mailbox that `objects` are delivered to: twice as many (a report of each of
/// an object's two incarnations, for a moment) and 64 more, rounded up to a power of two and at
/// least 128, so that it changes only when the deliveries double or halve (not with a WEC's
/// first object) and never lags just behind them.
pub fn sized_from(objects: usize) -> u64 {
    (2 * objects as u64 + 64).next_power_of_two().max(MIN_QUOTA)
}

/// The smallest quota [`sized_from`] gives.
const MIN_QUOTA: u64 = 128;

/// The ResourceQuota in `cluster`'s namespace: at most `max` WorkStatuses, so one WEC's agent
/// cannot fill the hub's etcd.
pub fn mailbox_quota(cluster: &str, owner: OwnerReference, max: u64) -> ResourceQuota {
    let hard = BTreeMap::from([(WORK_STATUS_COUNT.to_string(), Quantity(max.to_string()))]);
    ResourceQuota {
        metadata: meta(MAILBOX_QUOTA, cluster, owner, digest(&hard)),
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_is_namespaced_to_the_mailbox_and_has_no_cluster_wide_grant() {
        let role = role("cluster1", OwnerReference::default());
        assert_eq!(role.metadata.namespace.as_deref(), Some("cluster1"));
        let rules = role.rules.unwrap();
        let workstatus = &rules[0];
        assert!(workstatus.verbs.contains(&"create".to_string()));
        for rule in &rules[1..] {
            assert_eq!(rule.verbs, ["get", "list", "watch"]);
        }
        for rule in &rules {
            assert!(!rule.api_groups.iter().flatten().any(|g| g == "*"));
            assert!(!rule.resources.iter().flatten().any(|r| r == "*"));
        }
    }

    #[test]
    fn the_quota_is_sized_from_the_deliveries_or_fixed() {
        assert_eq!(
            [0, 1, 32, 33, 100, 5_000].map(sized_from),
            [128, 128, 128, 256, 512, 16_384]
        );
        assert_eq!(WorkStatusQuota::Auto.for_mailbox(100), Some(512));
        assert_eq!(WorkStatusQuota::Fixed(7).for_mailbox(100), Some(7));
        assert_eq!(WorkStatusQuota::Fixed(0).for_mailbox(100), None);
        assert_eq!("auto".parse(), Ok(WorkStatusQuota::Auto));
        assert_eq!("0".parse(), Ok(WorkStatusQuota::Fixed(0)));
        assert_eq!(
            "lots".parse::<WorkStatusQuota>(),
            Err(r#""lots" is neither auto nor a number of WorkStatuses (0: no quota)"#.to_string())
        );
    }

    #[test]
    fn quota_counts_workstatuses_in_the_mailbox() {
        let quota = mailbox_quota("cluster1", OwnerReference::default(), 7);
        assert_eq!(quota.metadata.namespace.as_deref(), Some("cluster1"));
        let hard = quota.spec.unwrap().hard.unwrap();
        assert_eq!(hard[WORK_STATUS_COUNT], Quantity("7".into()));
        assert_eq!(hard.len(), 1);
    }

    #[test]
    fn binding_names_the_clusters_addon_group() {
        let binding = role_binding("cluster2", OwnerReference::default());
        let subjects = binding.subjects.unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "Group");
        assert_eq!(
            subjects[0].name,
            "system:open-cluster-management:cluster:cluster2:addon:addon-status"
        );
        assert_eq!(binding.role_ref.name, STATUS_ADDON_HUB_ROLE);
    }
}
