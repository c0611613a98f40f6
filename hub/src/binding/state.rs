//! What the binding controller knows between events: each policy's compiled form, the objects
//! it selects with their modulation, and the WECs it selects. Pure bookkeeping: callers feed
//! changes in and learn which policies' Bindings must be rewritten.

use std::collections::{BTreeMap, BTreeSet};

use ks_shared::api::{BindingPolicySpec, BindingSpec, DownsyncModulation};
use ks_shared::workload::WorkloadRef;

use crate::binding::{
    CompiledPolicy, Labels, ListedObject, ObjectIdentity, Wec, WorkloadObject, desired_binding_spec, fold_modulations,
    matching_clauses, singleton_error, wec_selected,
};

/// The kinds of status return requested for an object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusRequest {
    pub singleton: bool,
    pub multi_wec: bool,
}

/// A selected object: what it is, its folded modulation, and which clauses matched it.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub object: ListedObject,
    pub modulation: DownsyncModulation,
    pub clauses: Vec<usize>,
}

/// How `policy` selects `object`, if it does.
fn select(policy: &CompiledPolicy, object: &WorkloadObject, namespace_labels: Option<&Labels>) -> Option<Selection> {
    let clauses = matching_clauses(policy, object, namespace_labels);
    let modulation = fold_modulations(clauses.iter().map(|i| &policy.clauses()[*i].modulation))?;
    Some(Selection {
        object: object.listed(),
        modulation,
        clauses,
    })
}

/// One policy's resolution.
pub struct PolicyState {
    /// The policy's generation this resolves: what its status may say it observed.
    pub generation: i64,
    pub compiled: CompiledPolicy,
    /// By object, whatever version it is served at: events for a deleted object may not know it.
    pub selected: BTreeMap<WorkloadRef, Selection>,
    pub wecs: BTreeSet<String>,
}

/// How a policy's Binding may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A selected object, the policy or its WECs changed.
    Content,
    /// This many objects joined or left its selection: created or deleted, often one after
    /// another.
    Membership(u32),
}

/// Notes that `name`'s Binding may have changed; a membership change outranks a content one,
/// and membership changes add up.
fn mark(dirty: &mut BTreeMap<String, Change>, name: &str, change: Change) {
    let marked = dirty.entry(name.to_string()).or_insert(Change::Content);
    *marked = match (*marked, change) {
        (Change::Membership(a), Change::Membership(b)) => Change::Membership(a.saturating_add(b)),
        (Change::Content, other) | (other, Change::Content) => other,
    };
}

/// Every policy's resolution, and which Bindings need writing.
#[derive(Default)]
pub struct Resolutions {
    policies: BTreeMap<String, PolicyState>,
    dirty: BTreeMap<String, Change>,
}

impl Resolutions {
    pub fn policy(&self, name: &str) -> Option<&PolicyState> {
        self.policies.get(name)
    }

    pub fn policy_names(&self) -> Vec<String> {
        self.policies.keys().cloned().collect()
    }

    /// Takes the policies whose Binding may have changed, and how.
    pub fn take_changes(&mut self) -> BTreeMap<String, Change> {
        std::mem::take(&mut self.dirty)
    }

    /// Takes the names of the policies whose Binding may have changed.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        self.take_changes().into_keys().collect()
    }

    /// Marks a policy for a Binding and status check even if nothing it selects changed.
    pub fn touch(&mut self, name: &str) {
        mark(&mut self.dirty, name, Change::Content);
    }

    /// (Re)evaluates a policy against every object and WEC given.
    pub fn set_policy<'a>(
        &mut self,
        name: &str,
        generation: i64,
        spec: &BindingPolicySpec,
        objects: impl IntoIterator<Item = (&'a WorkloadObject, Option<&'a Labels>)>,
        wecs: &[Wec],
    ) {
        let compiled = CompiledPolicy::new(spec);
        let selected = objects
            .into_iter()
            .filter_map(|(o, ns)| Some((o.identity.workload_ref(), select(&compiled, o, ns)?)))
            .collect();
        let wecs = wecs
            .iter()
            .filter(|w| wec_selected(&compiled, w))
            .map(|w| w.name.clone())
            .collect();
        self.policies.insert(
            name.to_string(),
            PolicyState {
                generation,
                compiled,
                selected,
                wecs,
            },
        );
        mark(&mut self.dirty, name, Change::Content);
    }

    /// Forgets a deleted policy.
    pub fn remove_policy(&mut self, name: &str) {
        self.policies.remove(name);
        self.dirty.remove(name);
    }

    /// Re-evaluates one object (present, or gone when `object` is `None`) against every policy.
    pub fn set_object(&mut self, key: &WorkloadRef, object: Option<(&WorkloadObject, Option<&Labels>)>) {
        for (name, policy) in &mut self.policies {
            let after = object.and_then(|(o, ns)| select(&policy.compiled, o, ns));
            let before = policy.selected.get(key);
            if before != after.as_ref() {
                let change = if before.is_some() == after.is_some() {
                    Change::Content
                } else {
                    Change::Membership(1)
                };
                match after {
                    Some(new) => policy.selected.insert(key.clone(), new),
                    None => policy.selected.remove(key),
                };
                mark(&mut self.dirty, name, change);
            }
        }
    }

    /// Drops every selected object that `keep` says is gone.
    pub fn retain_objects(&mut self, mut keep: impl FnMut(&WorkloadRef) -> bool) {
        for (name, policy) in &mut self.policies {
            let before = policy.selected.len();
            policy.selected.retain(|key, _| keep(key));
            let gone = before - policy.selected.len();
            if gone > 0 {
                mark(
                    &mut self.dirty,
                    name,
                    Change::Membership(u32::try_from(gone).unwrap_or(u32::MAX)),
                );
            }
        }
    }

    /// Recomputes every policy's WECs.
    pub fn set_wecs(&mut self, wecs: &[Wec]) {
        for (name, policy) in &mut self.policies {
            let now: BTreeSet<String> = wecs
                .iter()
                .filter(|w| wec_selected(&policy.compiled, w))
                .map(|w| w.name.clone())
                .collect();
            if now != policy.wecs {
                policy.wecs = now;
                mark(&mut self.dirty, name, Change::Content);
            }
        }
    }

    /// Which selected objects have singleton or multi-WEC status return requested, by any policy.
    /// Read after every change of selections: only the few selections that ask for status are
    /// looked up and copied, not every object selected.
    pub fn status_requests(&self) -> BTreeMap<ObjectIdentity, StatusRequest> {
        let mut requests: BTreeMap<ObjectIdentity, StatusRequest> = BTreeMap::new();
        for policy in self.policies.values() {
            for selection in policy.selected.values() {
                let m = &selection.modulation;
                if m.want_singleton_reported_state || m.want_multi_wec_reported_state {
                    let request = requests.entry(selection.object.identity.clone()).or_default();
                    request.singleton |= m.want_singleton_reported_state;
                    request.multi_wec |= m.want_multi_wec_reported_state;
                }
            }
        }
        requests
    }

    /// The Binding spec a policy's resolution calls for.
    pub fn desired_spec(&self, name: &str) -> Option<BindingSpec> {
        let policy = self.policies.get(name)?;
        Some(desired_binding_spec(
            policy.selected.values().map(|s| (&s.object, &s.modulation)),
            policy.wecs.iter().map(String::as_str),
        ))
    }

    /// The policy's status errors: invalid selectors, clauses that select nothing, then the
    /// singleton check (docs/upstream-behaviour.md#bindingpolicy-status):
    /// objects of this policy whose singleton status return is requested by any policy but whose
    /// qualified singleton WECs are not exactly one.
    /// `collector_exists` tells whether a StatusCollector of that name exists.
    pub fn errors(&self, name: &str, collector_exists: impl Fn(&str) -> bool) -> Vec<String> {
        let Some(policy) = self.policies.get(name) else {
            return Vec::new();
        };
        let mut errors: Vec<String> = policy.compiled.errors().iter().map(ToString::to_string).collect();
        for (i, clause) in policy.compiled.clauses().iter().enumerate() {
            for missing in clause
                .modulation
                .status_collectors
                .iter()
                .filter(|c| !collector_exists(c))
            {
                errors.push(format!(
                    "spec.downsync[{i}] names StatusCollector {missing:?}, which does not exist"
                ));
            }
        }
        // A clause that selects nothing is most likely a mistake in it.
        errors.extend(
            (0..policy.compiled.clauses().len())
                .filter(|i| !policy.selected.values().any(|s| s.clauses.contains(i)))
                .map(|i| format!("spec.downsync[{i}] selects no object in the WDS")),
        );
        // Only policies asking for singleton status somewhere take part: without them (most
        // policies) no object is looked up in every policy's selection.
        let requesting: Vec<&PolicyState> = self
            .policies
            .values()
            .filter(|p| p.selected.values().any(|s| s.modulation.want_singleton_reported_state))
            .collect();
        let wrong: Vec<(&ObjectIdentity, usize)> = policy
            .selected
            .iter()
            .filter_map(|(key, selection)| {
                let mut requested = false;
                let mut wecs = BTreeSet::new();
                for other in &requesting {
                    if other
                        .selected
                        .get(key)
                        .is_some_and(|s| s.modulation.want_singleton_reported_state)
                    {
                        requested = true;
                        wecs.extend(other.wecs.iter());
                    }
                }
                (requested && wecs.len() != 1).then_some((&selection.object.identity, wecs.len()))
            })
            .collect();
        errors.extend(singleton_error(wrong));
        errors
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use ks_shared::api::{DownsyncObjectTest, DownsyncPolicyClause};

    use super::*;

    /// A ConfigMap `ns/<name>` with `labels`, as the caches hold it.
    pub(crate) fn object(name: &str, labels: &[(&str, &str)]) -> WorkloadObject {
        WorkloadObject {
            identity: ObjectIdentity {
                group: "".into(),
                version: "v1".into(),
                resource: "configmaps".into(),
                namespace: "ns".into(),
                name: name.into(),
                kind: "ConfigMap".into(),
            },
            resource_version: "1".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn policy(app: &str, singleton: bool) -> BindingPolicySpec {
        let selector = serde_json::from_value(serde_json::json!({"matchLabels": {"app": app}})).unwrap();
        let mut clause = DownsyncPolicyClause {
            test: DownsyncObjectTest {
                object_selectors: vec![selector],
                ..Default::default()
            },
            ..Default::default()
        };
        clause.modulation.want_singleton_reported_state = singleton;
        BindingPolicySpec {
            cluster_selectors: vec![serde_json::from_value(serde_json::json!({})).unwrap()],
            downsync: vec![clause],
        }
    }

    fn wec(name: &str) -> Wec {
        Wec {
            name: name.into(),
            labels: Default::default(),
        }
    }

    #[test]
    fn objects_enter_and_leave_resolutions() {
        let mut r = Resolutions::default();
        let a = object("a", &[("app", "web")]);
        r.set_policy("p", 1, &policy("web", false), [(&a, None)], &[wec("cluster1")]);
        assert_eq!(r.take_dirty(), BTreeSet::from(["p".to_string()]));
        assert_eq!(r.desired_spec("p").unwrap().workload.namespace_scope.len(), 1);

        let relabelled = object("a", &[("app", "db")]);
        r.set_object(&relabelled.identity.workload_ref(), Some((&relabelled, None)));
        assert!(!r.take_dirty().is_empty());
        assert!(r.desired_spec("p").unwrap().workload.namespace_scope.is_empty());

        r.set_object(&relabelled.identity.workload_ref(), Some((&relabelled, None)));
        assert!(r.take_dirty().is_empty(), "no change, no write");
        r.set_object(&a.identity.workload_ref(), Some((&a, None)));
        r.set_object(&a.identity.workload_ref(), None);
        assert!(r.desired_spec("p").unwrap().workload.namespace_scope.is_empty());
    }

    #[test]
    fn objects_joining_or_leaving_are_membership_changes_counted_and_outranking_content_ones() {
        let mut r = Resolutions::default();
        let a = object("a", &[("app", "web")]);
        r.set_policy("p", 1, &policy("web", false), [(&a, None)], &[]);
        assert_eq!(r.take_changes(), BTreeMap::from([("p".to_string(), Change::Content)]));
        let mut newer = a.clone();
        newer.resource_version = "2".into();
        r.set_object(&newer.identity.workload_ref(), Some((&newer, None)));
        assert_eq!(r.take_changes()["p"], Change::Content, "a selected object changed");
        let b = object("b", &[("app", "web")]);
        r.set_object(&b.identity.workload_ref(), Some((&b, None)));
        r.touch("p");
        assert_eq!(r.take_changes()["p"], Change::Membership(1), "b joined");
        let c = object("c", &[("app", "web")]);
        r.set_object(&b.identity.workload_ref(), None);
        r.set_object(&c.identity.workload_ref(), Some((&c, None)));
        assert_eq!(r.take_changes()["p"], Change::Membership(2), "b left, c joined");
        r.retain_objects(|key| key.name == "b");
        assert_eq!(
            r.take_changes()["p"],
            Change::Membership(2),
            "a and c went in a re-list"
        );
    }

    #[test]
    fn a_new_resource_version_marks_the_policy() {
        let mut r = Resolutions::default();
        let a = object("a", &[("app", "web")]);
        r.set_policy("p", 1, &policy("web", false), [(&a, None)], &[]);
        r.take_dirty();
        let mut newer = a.clone();
        newer.resource_version = "2".into();
        r.set_object(&newer.identity.workload_ref(), Some((&newer, None)));
        assert!(!r.take_dirty().is_empty());
        let spec = r.desired_spec("p").unwrap();
        assert_eq!(spec.workload.namespace_scope[0].object.resource_version, "2");
    }

    #[test]
    fn wec_changes_mark_only_affected_policies() {
        let mut r = Resolutions::default();
        r.set_policy("p", 1, &policy("web", false), [], &[wec("cluster1")]);
        r.take_dirty();
        r.set_wecs(&[wec("cluster1")]);
        assert!(r.take_dirty().is_empty());
        r.set_wecs(&[wec("cluster1"), wec("cluster2")]);
        assert_eq!(r.desired_spec("p").unwrap().destinations.len(), 2);
    }

    #[test]
    fn clauses_selecting_nothing_and_unknown_collectors_are_errors() {
        let mut r = Resolutions::default();
        let mut spec = policy("web", false);
        spec.downsync[0].modulation.status_collectors = vec!["replicas".into()];
        r.set_policy("p", 1, &spec, [], &[]);
        assert_eq!(
            r.errors("p", |c| c == "other"),
            [
                "spec.downsync[0] names StatusCollector \"replicas\", which does not exist",
                "spec.downsync[0] selects no object in the WDS"
            ]
        );
        let a = object("a", &[("app", "web")]);
        r.set_object(&a.identity.workload_ref(), Some((&a, None)));
        assert!(r.errors("p", |c| c == "replicas").is_empty());
    }

    #[test]
    fn status_requests_are_united_across_policies() {
        let mut r = Resolutions::default();
        let a = object("a", &[("app", "web")]);
        r.set_policy("plain", 1, &policy("web", false), [(&a, None)], &[]);
        assert!(r.status_requests().is_empty());
        r.set_policy("singleton", 1, &policy("web", true), [(&a, None)], &[]);
        let requests = r.status_requests();
        assert_eq!(
            requests[&a.identity],
            StatusRequest {
                singleton: true,
                multi_wec: false
            }
        );
        r.remove_policy("singleton");
        assert!(r.status_requests().is_empty());
    }

    #[test]
    fn singleton_check_counts_wecs_across_policies() {
        let mut r = Resolutions::default();
        let a = object("a", &[("app", "web")]);
        r.set_policy("one", 1, &policy("web", true), [(&a, None)], &[wec("cluster1")]);
        assert!(r.errors("one", |_| true).is_empty());
        r.set_policy("two", 1, &policy("web", true), [(&a, None)], &[wec("cluster2")]);
        let errors = r.errors("one", |_| true);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("Singleton reported status return is requested"),
            "{errors:?}"
        );
        // A policy without the flag does not count its WECs.
        r.set_policy("two", 1, &policy("web", false), [(&a, None)], &[wec("cluster2")]);
        assert!(r.errors("one", |_| true).is_empty());
    }
}
