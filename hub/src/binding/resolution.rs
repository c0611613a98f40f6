//! The desired Binding spec for what a policy selected, and the comparison that lets the
//! controller write a Binding only when its content changes
//! (docs/upstream-behaviour.md#the-binding).

use ks_shared::api::{
    BindingSpec, ClusterScopeDownsyncClause, ClusterScopeDownsyncObject, Destination, DownsyncModulation,
    DownsyncObjectClauses, NamespaceScopeDownsyncClause, NamespaceScopeDownsyncObject,
};

use super::selection::normalize_modulation;
use super::workload::ListedObject;

/// The Binding spec for the selected objects (each with its folded modulation) and WEC names.
///
/// Cluster-scoped objects go to `workload.clusterScope`, the rest to `workload.namespaceScope`;
/// entries are sorted by group, version, resource, then namespace and name; destinations are
/// sorted by `clusterId` and StatusCollector names sorted, so equal inputs give equal specs.
pub fn desired_binding_spec<'o, 'w>(
    selected: impl IntoIterator<Item = (&'o ListedObject, &'o DownsyncModulation)>,
    wec_names: impl IntoIterator<Item = &'w str>,
) -> BindingSpec {
    let mut spec = BindingSpec::default();
    for (object, modulation) in selected {
        push_entry(&mut spec.workload, object, modulation.clone());
    }
    spec.destinations = wec_names
        .into_iter()
        .map(|name| Destination {
            cluster_id: name.to_string(),
        })
        .collect();
    normalize(&mut spec);
    spec
}

/// Carries into `desired` what `existing` lists of the resources whose objects are not known
/// (`unknown(group, resource)`: their cache is not filled). Those objects are absent from the
/// caches, not deleted: a Binding, and so the WECs, lose them only once the cache says so.
pub fn keep_unknown(desired: &mut BindingSpec, existing: &BindingSpec, unknown: impl Fn(&str, &str) -> bool) {
    let workload = &mut desired.workload;
    workload
        .cluster_scope
        .retain(|e| !unknown(&e.object.group, &e.object.resource));
    workload
        .namespace_scope
        .retain(|e| !unknown(&e.object.group, &e.object.resource));
    let kept = &existing.workload;
    workload.cluster_scope.extend(
        kept.cluster_scope
            .iter()
            .filter(|e| unknown(&e.object.group, &e.object.resource))
            .cloned(),
    );
    workload.namespace_scope.extend(
        kept.namespace_scope
            .iter()
            .filter(|e| unknown(&e.object.group, &e.object.resource))
            .cloned(),
    );
    normalize(desired);
}

/// Whether `existing` says something other than `desired`: destinations compared as sets, the
/// workload as a map from object to resourceVersion and modulation. List order never counts, so
/// a Binding written by another implementation is not rewritten just to reorder it.
pub fn binding_spec_differs(existing: &BindingSpec, desired: &BindingSpec) -> bool {
    let (mut existing, mut desired) = (existing.clone(), desired.clone());
    normalize(&mut existing);
    normalize(&mut desired);
    existing != desired
}

fn push_entry(workload: &mut DownsyncObjectClauses, object: &ListedObject, modulation: DownsyncModulation) {
    let id = object.identity.clone();
    if id.is_cluster_scoped() {
        workload.cluster_scope.push(ClusterScopeDownsyncClause {
            object: ClusterScopeDownsyncObject {
                group: id.group,
                version: id.version,
                resource: id.resource,
                name: id.name,
                resource_version: object.resource_version.clone(),
            },
            modulation,
        });
    } else {
        workload.namespace_scope.push(NamespaceScopeDownsyncClause {
            object: NamespaceScopeDownsyncObject {
                group: id.group,
                version: id.version,
                resource: id.resource,
                namespace: id.namespace,
                name: id.name,
                resource_version: object.resource_version.clone(),
            },
            modulation,
        });
    }
}

/// Puts a spec in its one canonical form: every list sorted and without duplicates.
fn normalize(spec: &mut BindingSpec) {
    normalize_entries(&mut spec.workload.cluster_scope, |e| &e.object, |e| &mut e.modulation);
    normalize_entries(&mut spec.workload.namespace_scope, |e| &e.object, |e| &mut e.modulation);
    spec.destinations.sort();
    spec.destinations.dedup();
}

/// Normalizes the entries of `workload.clusterScope` or `workload.namespaceScope`: sorted by
/// `object` (the object at its resourceVersion), StatusCollector names sorted, duplicates dropped.
fn normalize_entries<E: PartialEq, O: Ord>(
    entries: &mut Vec<E>,
    object: impl Fn(&E) -> &O,
    modulation: impl Fn(&mut E) -> &mut DownsyncModulation,
) {
    entries
        .iter_mut()
        .for_each(|entry| normalize_modulation(modulation(entry)));
    entries.sort_by(|a, b| object(a).cmp(object(b)));
    entries.dedup();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::WorkloadObject;
    use crate::binding::testing::*;

    fn collecting(names: &[&str]) -> DownsyncModulation {
        DownsyncModulation {
            status_collectors: strings(names),
            ..Default::default()
        }
    }

    fn at_version(object: WorkloadObject, resource_version: &str) -> ListedObject {
        ListedObject {
            resource_version: resource_version.into(),
            ..object.listed()
        }
    }

    /// A spec with one namespaced and one cluster-scoped object and two WECs, for comparisons.
    fn sample_spec() -> BindingSpec {
        let objects = [deployment("ns1", "web"), namespace("ns1")].map(|o| o.listed());
        let modulation = collecting(&["a", "b"]);
        desired_binding_spec(objects.iter().map(|o| (o, &modulation)), ["cluster1", "cluster2"])
    }

    #[test]
    fn objects_of_unknown_resources_are_kept_as_the_binding_lists_them() {
        let modulation = collecting(&[]);
        let before = [deployment("ns1", "web"), deployment("ns1", "api"), namespace("ns1")].map(|o| o.listed());
        let existing = desired_binding_spec(before.iter().map(|o| (o, &modulation)), ["cluster1"]);
        // The Deployments' cache is empty while it fills: only the Namespace is known.
        let now = [namespace("ns1").listed()];
        let mut desired = desired_binding_spec(now.iter().map(|o| (o, &modulation)), ["cluster1"]);
        keep_unknown(&mut desired, &existing, |group, resource| {
            (group, resource) == ("apps", "deployments")
        });
        assert!(!binding_spec_differs(&existing, &desired));
        // Once known, the cache rules: a Deployment gone from it leaves the Binding.
        let mut desired = desired_binding_spec(now.iter().map(|o| (o, &modulation)), ["cluster1"]);
        keep_unknown(&mut desired, &existing, |_, _| false);
        assert_eq!(desired.workload.namespace_scope.len(), 0);
        assert_eq!(desired.workload.cluster_scope.len(), 1);
    }

    #[test]
    fn objects_go_to_their_scope_with_version_and_modulation() {
        let web = at_version(deployment("ns1", "web"), "13");
        let ns = at_version(namespace("ns1"), "12");
        let create_only = DownsyncModulation {
            create_only: true,
            ..Default::default()
        };
        let collect = collecting(&["replicas"]);
        let spec = desired_binding_spec([(&web, &collect), (&ns, &create_only)], ["cluster1"]);
        assert_eq!(
            spec.workload.cluster_scope,
            [ClusterScopeDownsyncClause {
                object: ClusterScopeDownsyncObject {
                    group: "".into(),
                    version: "v1".into(),
                    resource: "namespaces".into(),
                    name: "ns1".into(),
                    resource_version: "12".into(),
                },
                modulation: create_only,
            }]
        );
        assert_eq!(
            spec.workload.namespace_scope,
            [NamespaceScopeDownsyncClause {
                object: NamespaceScopeDownsyncObject {
                    group: "apps".into(),
                    version: "v1".into(),
                    resource: "deployments".into(),
                    namespace: "ns1".into(),
                    name: "web".into(),
                    resource_version: "13".into(),
                },
                modulation: collect,
            }]
        );
    }

    #[test]
    fn entries_are_sorted_by_group_version_resource_then_namespace_and_name() {
        let objects = [
            deployment("ns2", "a"),
            config_map("ns2", "a"),
            deployment("ns1", "b"),
            config_map("ns1", "z"),
            deployment("ns1", "a"),
        ]
        .map(|o| o.listed());
        let none = DownsyncModulation::default();
        let spec = desired_binding_spec(objects.iter().map(|o| (o, &none)), []);
        let listed: Vec<(&str, &str, &str)> = spec
            .workload
            .namespace_scope
            .iter()
            .map(|e| {
                (
                    e.object.resource.as_str(),
                    e.object.namespace.as_str(),
                    e.object.name.as_str(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("configmaps", "ns1", "z"),
                ("configmaps", "ns2", "a"),
                ("deployments", "ns1", "a"),
                ("deployments", "ns1", "b"),
                ("deployments", "ns2", "a"),
            ]
        );
    }

    #[test]
    fn destinations_are_sorted_once_each_and_status_collectors_sorted() {
        let web = deployment("ns1", "web").listed();
        let modulation = collecting(&["c", "a", "c"]);
        let spec = desired_binding_spec([(&web, &modulation)], ["cluster2", "cluster1", "cluster2"]);
        let ids: Vec<&str> = spec.destinations.iter().map(|d| d.cluster_id.as_str()).collect();
        assert_eq!(ids, ["cluster1", "cluster2"]);
        assert_eq!(
            spec.workload.namespace_scope[0].modulation.status_collectors,
            ["a", "c"]
        );
    }

    #[test]
    fn nothing_selected_gives_an_empty_spec() {
        assert_eq!(desired_binding_spec([], []), BindingSpec::default());
    }

    #[test]
    fn list_order_is_not_a_difference() {
        let desired = sample_spec();
        let mut reordered = desired.clone();
        reordered.destinations.reverse();
        reordered.workload.cluster_scope.reverse();
        for entry in &mut reordered.workload.namespace_scope {
            entry.modulation.status_collectors.reverse();
        }
        assert!(!binding_spec_differs(&reordered, &desired));
        assert!(!binding_spec_differs(&desired, &desired));
    }

    #[test]
    fn content_changes_are_differences() {
        let desired = sample_spec();
        let changes: [fn(&mut BindingSpec); 6] = [
            |s| s.workload.namespace_scope[0].object.resource_version = "2".into(),
            |s| s.workload.cluster_scope[0].modulation.create_only = true,
            |s| s.workload.namespace_scope[0].modulation.status_collectors.truncate(1),
            |s| s.workload.cluster_scope.clear(),
            |s| s.destinations.truncate(1),
            |s| s.destinations[0].cluster_id = "cluster3".into(),
        ];
        for (index, change) in changes.iter().enumerate() {
            let mut existing = desired.clone();
            change(&mut existing);
            assert!(
                binding_spec_differs(&existing, &desired),
                "change {index} went unnoticed"
            );
        }
    }
}
