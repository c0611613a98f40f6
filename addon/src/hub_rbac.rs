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

use crate::manifests::{CONTENT_DIGEST_ANNOTATION, digest};
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

/// The ResourceQuota in `cluster`'s namespace: at most `max` WorkStatuses, so one WEC's agent
/// cannot fill the hub's etcd.
pub fn mailbox_quota(cluster: &str, owner: OwnerReference, max: u32) -> ResourceQuota {
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
