//! Which objects one delivery has put on the WEC: those its AppliedManifestWork lists, and those
//! its ManifestWork's status reports applied.
//!
//! OCM's work agent (v1.2) rewrites the AppliedManifestWork's list only when it can read back
//! every manifest: one manifest of a kind the WEC does not serve (its CRD not installed yet) leaves
//! the list as it was (empty for a new ManifestWork) for all the others. The ManifestWork's
//! per-manifest conditions, written in the same pass, still say which manifests were applied, so
//! the agent follows those too: each object of them it finds on the WEC gets its WorkStatus
//! whatever its neighbours do. (An object followed but not on the WEC gets none.)

use std::collections::BTreeSet;

use ks_shared::ocm::{AppliedManifestResourceMeta, ManifestResourceMeta, ManifestWorkStatus};

use crate::objects::{Gvr, ObjectId};

/// The per-manifest condition saying the work agent applied a manifest.
const APPLIED: &str = "Applied";

/// Trims a ManifestWork's status to what [`delivered`] reads, for the agent's cache: the
/// resource of each manifest the work agent reports applied, without conditions or feedback.
pub fn keep_applied(status: &mut Option<ManifestWorkStatus>) {
    let Some(status) = status else { return };
    status.conditions = Vec::new();
    let manifests = &mut status.resource_status.manifests;
    manifests.retain(|m| m.conditions.iter().any(|c| c.type_ == APPLIED && c.status == "True"));
    for manifest in manifests.iter_mut() {
        manifest.conditions = Vec::new();
        manifest.status_feedback = Default::default();
    }
    manifests.shrink_to_fit();
}

/// The objects a delivery put on the WEC: those its AppliedManifestWork `lists`, and the
/// `applied` manifests of its ManifestWork (trimmed by [`keep_applied`]). Entries without a
/// version, resource or name (a kind the WEC could not map) name no object.
pub fn delivered<'a>(
    lists: &[AppliedManifestResourceMeta],
    applied: impl IntoIterator<Item = &'a ManifestResourceMeta>,
) -> BTreeSet<ObjectId> {
    let listed = lists
        .iter()
        .map(|r| (&r.group, &r.version, &r.resource, &r.namespace, &r.name));
    let applied = applied
        .into_iter()
        .map(|m| (&m.group, &m.version, &m.resource, &m.namespace, &m.name));
    listed
        .chain(applied)
        .filter(|(_, version, resource, _, name)| !version.is_empty() && !resource.is_empty() && !name.is_empty())
        .map(|(group, version, resource, namespace, name)| ObjectId {
            gvr: Gvr {
                group: group.clone(),
                version: version.clone(),
                resource: resource.clone(),
            },
            namespace: namespace.clone(),
            name: name.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use ks_shared::ocm::{ManifestCondition, ManifestResourceStatus};
    use serde_json::json;

    use super::*;

    fn meta(group: &str, resource: &str, namespace: &str, name: &str) -> ManifestResourceMeta {
        ManifestResourceMeta {
            group: group.into(),
            version: if resource.is_empty() {
                String::new()
            } else {
                "v1".into()
            },
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn condition(type_: &str, status: &str) -> Condition {
        serde_json::from_value(json!({"type": type_, "status": status, "reason": "r", "message": "m",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}))
        .unwrap()
    }

    fn manifest(meta: ManifestResourceMeta, applied: &str) -> ManifestCondition {
        ManifestCondition {
            resource_meta: meta,
            conditions: vec![condition("Available", "True"), condition(APPLIED, applied)],
            status_feedback: Default::default(),
        }
    }

    /// What OCM reports for a Namespace, a ConfigMap in it, and a Widget whose CRD the WEC
    /// lacks: the AppliedManifestWork lists nothing, the ManifestWork says two were applied.
    fn one_unmapped() -> ManifestWorkStatus {
        ManifestWorkStatus {
            conditions: vec![condition(APPLIED, "False")],
            resource_status: ManifestResourceStatus {
                manifests: vec![
                    manifest(meta("", "namespaces", "", "demo"), "True"),
                    manifest(meta("", "configmaps", "demo", "cm"), "True"),
                    manifest(meta("example.io", "", "", "gadget"), "False"),
                ],
            },
        }
    }

    fn names(objects: &BTreeSet<ObjectId>) -> Vec<String> {
        objects
            .iter()
            .map(|o| format!("{}/{}", o.gvr.resource, o.name))
            .collect()
    }

    #[test]
    fn the_applied_manifests_count_when_the_applied_list_is_empty() {
        let mut status = Some(one_unmapped());
        keep_applied(&mut status);
        let status = status.unwrap();
        assert!(status.conditions.is_empty());
        let applied: Vec<_> = status
            .resource_status
            .manifests
            .iter()
            .map(|m| &m.resource_meta)
            .collect();
        assert_eq!(applied.len(), 2, "the failed manifest is not kept");
        assert!(
            status.resource_status.manifests.iter().all(|m| m.conditions.is_empty()),
            "the cache keeps no conditions"
        );
        let objects = delivered(&[], applied);
        assert_eq!(names(&objects), ["configmaps/cm", "namespaces/demo"]);
        assert_eq!(objects.first().unwrap().namespace, "demo");
    }

    #[test]
    fn both_sources_give_one_object_each() {
        let listed = AppliedManifestResourceMeta {
            version: "v1".into(),
            resource: "configmaps".into(),
            namespace: "demo".into(),
            name: "cm".into(),
            uid: "u1".into(),
            ..Default::default()
        };
        let stale = AppliedManifestResourceMeta {
            name: "removed-from-the-work".into(),
            ..listed.clone()
        };
        let applied = [meta("", "configmaps", "demo", "cm"), meta("", "namespaces", "", "demo")];
        let objects = delivered(&[listed, stale], &applied);
        assert_eq!(
            names(&objects),
            ["configmaps/cm", "configmaps/removed-from-the-work", "namespaces/demo"],
            "what the AppliedManifestWork still lists is still on the WEC until OCM removes it"
        );
    }

    #[test]
    fn entries_naming_no_object_are_skipped() {
        let unnamed = meta("", "configmaps", "demo", "");
        let unmapped = meta("example.io", "", "", "gadget");
        assert!(delivered(&[AppliedManifestResourceMeta::default()], [&unnamed, &unmapped]).is_empty());
    }

    #[test]
    fn no_status_is_nothing_applied() {
        let mut status = None;
        keep_applied(&mut status);
        assert_eq!(status, None);
    }
}
