//! Property tests: the binding logic against a deliberately simple oracle that reads the
//! BindingPolicy, the objects and the Namespaces directly, following upstream's rules
//! (docs/upstream-behaviour.md#selecting-clusters to docs/upstream-behaviour.md#bindingpolicy-status)
//! line by line, over small alphabets so that matches and misses both happen.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use ks_shared::api::{BindingPolicySpec, BindingSpec, DownsyncModulation, DownsyncObjectTest, DownsyncPolicyClause};
use ks_shared::selector;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::*;

/// Namespace name to its labels; a namespace missing here is unknown to the cache.
type NamespaceCache = BTreeMap<String, Labels>;

// ---- the oracle ----

fn oracle_listed(list: &[String], value: &str) -> bool {
    list.is_empty() || list.iter().any(|entry| entry == "*" || entry == value)
}

/// A selector that does not convert selects nothing.
fn oracle_selects(selector: &LabelSelector, labels: &Labels) -> bool {
    selector::matches(selector, labels) == Ok(true)
}

fn oracle_is_empty_selector(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

fn oracle_clause(test: &DownsyncObjectTest, object: &WorkloadObject, namespaces: &NamespaceCache) -> bool {
    let id = &object.identity;
    let group_ok = test.api_group.as_ref().is_none_or(|group| *group == id.group);
    let objects_ok =
        test.object_selectors.is_empty() || test.object_selectors.iter().any(|s| oracle_selects(s, &object.labels));
    let namespace_ok = test.namespace_selectors.is_empty()
        || test.namespace_selectors.iter().any(oracle_is_empty_selector)
        || namespaces
            .get(&id.namespace)
            .is_some_and(|labels| test.namespace_selectors.iter().any(|s| oracle_selects(s, labels)));
    group_ok
        && oracle_listed(&test.resources, &id.resource)
        && oracle_listed(&test.namespaces, &id.namespace)
        && oracle_listed(&test.object_names, &id.name)
        && objects_ok
        && namespace_ok
}

fn oracle_policy(
    spec: &BindingPolicySpec,
    object: &WorkloadObject,
    namespaces: &NamespaceCache,
) -> Option<DownsyncModulation> {
    let matching: Vec<&DownsyncModulation> = spec
        .downsync
        .iter()
        .filter(|clause| oracle_clause(&clause.test, object, namespaces))
        .map(|clause| &clause.modulation)
        .collect();
    if matching.is_empty() {
        return None;
    }
    let collectors: BTreeSet<&String> = matching.iter().flat_map(|m| &m.status_collectors).collect();
    Some(DownsyncModulation {
        create_only: matching.iter().any(|m| m.create_only),
        status_collectors: collectors.into_iter().cloned().collect(),
        want_singleton_reported_state: matching.iter().any(|m| m.want_singleton_reported_state),
        want_multi_wec_reported_state: matching.iter().any(|m| m.want_multi_wec_reported_state),
    })
}

/// Where the invalid selectors of a spec are, as the error messages name them.
fn oracle_error_locations(spec: &BindingPolicySpec) -> BTreeSet<String> {
    let invalid = |s: &LabelSelector| selector::matches(s, &Labels::new()).is_err();
    let mut locations = BTreeSet::new();
    for (c, clause) in spec.downsync.iter().enumerate() {
        for (list, selectors) in [
            ("objectSelectors", &clause.test.object_selectors),
            ("namespaceSelectors", &clause.test.namespace_selectors),
        ] {
            for (i, _) in selectors.iter().enumerate().filter(|(_, s)| invalid(s)) {
                locations.insert(format!("spec.downsync[{c}].{list}[{i}]"));
            }
        }
    }
    for (i, _) in spec.cluster_selectors.iter().enumerate().filter(|(_, s)| invalid(s)) {
        locations.insert(format!("spec.clusterSelectors[{i}]"));
    }
    locations
}

/// A Binding spec as the sets it stands for: destination names, and one tuple per workload
/// entry (cluster-scoped ones with namespace `None`) with its collectors as a set.
type SpecModel = (BTreeSet<String>, BTreeSet<EntryModel>);
type EntryModel = (Option<String>, [String; 5], [bool; 3], BTreeSet<String>);

fn entry_model(namespace: Option<&str>, object: [&str; 5], modulation: &DownsyncModulation) -> EntryModel {
    (
        namespace.map(String::from),
        object.map(String::from),
        [
            modulation.create_only,
            modulation.want_singleton_reported_state,
            modulation.want_multi_wec_reported_state,
        ],
        modulation.status_collectors.iter().cloned().collect(),
    )
}

fn spec_model(spec: &BindingSpec) -> SpecModel {
    let clusters = spec.workload.cluster_scope.iter().map(|e| {
        let o = &e.object;
        entry_model(
            None,
            [&o.group, &o.version, &o.resource, &o.name, &o.resource_version],
            &e.modulation,
        )
    });
    let namespaced = spec.workload.namespace_scope.iter().map(|e| {
        let o = &e.object;
        let fields = [&*o.group, &o.version, &o.resource, &o.name, &o.resource_version];
        entry_model(Some(&o.namespace), fields, &e.modulation)
    });
    let destinations = spec.destinations.iter().map(|d| d.cluster_id.clone()).collect();
    (destinations, clusters.chain(namespaced).collect())
}

/// What the spec for these inputs must say, read straight off the inputs.
fn oracle_spec_model(selected: &[(WorkloadObject, DownsyncModulation)], wecs: &[String]) -> SpecModel {
    let entries = selected.iter().map(|(object, modulation)| {
        let id = &object.identity;
        let namespace = (!id.namespace.is_empty()).then_some(id.namespace.as_str());
        let fields = [
            &*id.group,
            &id.version,
            &id.resource,
            &id.name,
            &object.resource_version,
        ];
        entry_model(namespace, fields, modulation)
    });
    (wecs.iter().cloned().collect(), entries.collect())
}

// ---- generators ----

fn from(items: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    select(items).prop_map(String::from)
}

fn list_of(items: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> + Clone {
    prop::collection::vec(from(items), 0..3)
}

fn label_map() -> impl Strategy<Value = Labels> + Clone {
    prop::collection::btree_map(from(&["app", "tier"]), from(&["a", "b"]), 0..3)
}

/// Valid and invalid selectors, `{}` included: an unknown operator, `In` without values and
/// `Exists` with values do not convert.
fn label_selector() -> impl Strategy<Value = LabelSelector> + Clone {
    let requirement = (
        from(&["app", "tier"]),
        from(&["In", "NotIn", "Exists", "DoesNotExist", "Equals"]),
        prop::collection::vec(from(&["a", "b"]), 0..2),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values: Some(values),
        });
    prop_oneof![
        Just(LabelSelector::default()),
        label_map().prop_map(|labels| LabelSelector {
            match_labels: Some(labels),
            match_expressions: None,
        }),
        prop::collection::vec(requirement, 1..3).prop_map(|requirements| LabelSelector {
            match_labels: None,
            match_expressions: Some(requirements),
        }),
    ]
}

fn selectors() -> impl Strategy<Value = Vec<LabelSelector>> + Clone {
    prop::collection::vec(label_selector(), 0..3)
}

fn modulation() -> impl Strategy<Value = DownsyncModulation> + Clone {
    (any::<[bool; 3]>(), list_of(&["c1", "c2", "c3"])).prop_map(|([create_only, singleton, multi], collectors)| {
        DownsyncModulation {
            create_only,
            status_collectors: collectors,
            want_singleton_reported_state: singleton,
            want_multi_wec_reported_state: multi,
        }
    })
}

fn downsync_clause() -> impl Strategy<Value = DownsyncPolicyClause> {
    let test = (
        prop::option::of(from(&["", "apps"])),
        list_of(&["*", "configmaps", "deployments", "namespaces"]),
        list_of(&["*", "", "ns1", "ns2"]),
        selectors(),
        selectors(),
        list_of(&["*", "a", "b"]),
    )
        .prop_map(
            |(api_group, resources, namespaces, namespace_selectors, object_selectors, object_names)| {
                DownsyncObjectTest {
                    api_group,
                    resources,
                    namespaces,
                    namespace_selectors,
                    object_selectors,
                    object_names,
                }
            },
        );
    (test, modulation()).prop_map(|(test, modulation)| DownsyncPolicyClause { test, modulation })
}

fn policy_spec() -> impl Strategy<Value = BindingPolicySpec> {
    (selectors(), prop::collection::vec(downsync_clause(), 0..4)).prop_map(|(cluster_selectors, downsync)| {
        BindingPolicySpec {
            cluster_selectors,
            downsync,
        }
    })
}

/// A ConfigMap or Deployment in ns1..ns3, or a cluster-scoped Namespace.
fn workload_object() -> impl Strategy<Value = WorkloadObject> {
    let kinds = select(&[
        ("", "configmaps", "ConfigMap", true),
        ("apps", "deployments", "Deployment", true),
        ("", "namespaces", "Namespace", false),
    ]);
    (
        kinds,
        from(&["ns1", "ns2", "ns3"]),
        from(&["a", "b"]),
        from(&["1", "2"]),
        label_map(),
    )
        .prop_map(
            |((group, resource, kind, namespaced), namespace, name, resource_version, labels)| WorkloadObject {
                identity: ObjectIdentity {
                    group: group.into(),
                    version: "v1".into(),
                    resource: resource.into(),
                    namespace: if namespaced { namespace } else { String::new() },
                    name,
                    kind: kind.into(),
                },
                resource_version,
                labels,
            },
        )
}

/// Labels for some of ns1..ns3; the others stay unknown.
fn namespace_cache() -> impl Strategy<Value = NamespaceCache> {
    prop::collection::btree_map(from(&["ns1", "ns2", "ns3"]), label_map(), 0..3)
}

fn wec() -> impl Strategy<Value = Wec> {
    (from(&["cluster1", "cluster2", "cluster3"]), label_map()).prop_map(|(name, labels)| Wec { name, labels })
}

/// Distinct objects (a Binding lists each once) with their modulations.
fn selection() -> impl Strategy<Value = Vec<(WorkloadObject, DownsyncModulation)>> {
    prop::collection::vec((workload_object(), modulation()), 0..6).prop_map(|selected| {
        let mut seen = BTreeSet::new();
        selected
            .into_iter()
            .filter(|(object, _)| seen.insert(object.identity.clone()))
            .collect()
    })
}

fn wec_names() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(from(&["cluster1", "cluster2", "cluster3"]), 0..4)
}

type Inputs = (Vec<(WorkloadObject, DownsyncModulation)>, Vec<String>);

/// The same inputs with at most one thing changed, so that equal and nearly equal specs are common.
fn variant_of((selected, wecs): Inputs) -> impl Strategy<Value = Inputs> {
    (0..7usize, any::<prop::sample::Index>()).prop_map(move |(change, at)| {
        let (mut selected, mut wecs) = (selected.clone(), wecs.clone());
        if !selected.is_empty() {
            let index = at.index(selected.len());
            let (object, modulation) = &mut selected[index];
            match change {
                0 => object.resource_version.push('0'),
                1 => modulation.create_only ^= true,
                2 => modulation.want_singleton_reported_state ^= true,
                3 => modulation.want_multi_wec_reported_state ^= true,
                4 => modulation.status_collectors.push("c9".into()),
                _ => {}
            }
        }
        if change == 5 {
            wecs.push("cluster9".into());
        }
        (selected, wecs)
    })
}

fn spec_of(selected: &[(WorkloadObject, DownsyncModulation)], wecs: &[String]) -> BindingSpec {
    let listed: Vec<(ListedObject, &DownsyncModulation)> = selected.iter().map(|(o, m)| (o.listed(), m)).collect();
    desired_binding_spec(listed.iter().map(|(o, m)| (o, *m)), wecs.iter().map(String::as_str))
}

/// Each consecutive pair is in strictly increasing order.
fn strictly_sorted<T: Ord>(items: impl IntoIterator<Item = T>) -> bool {
    let items: Vec<T> = items.into_iter().collect();
    items.windows(2).all(|pair| pair[0] < pair[1])
}

fn wrong_count_examples(requests: &BTreeMap<ObjectIdentity, usize>) -> serde_json::Value {
    let examples: Vec<serde_json::Value> = requests
        .iter()
        .filter(|(_, wecs)| **wecs != 1)
        .take(4)
        .map(|(id, wecs)| {
            serde_json::json!({
                "ObjectID": {
                    "GVK": {"Group": id.group, "Version": id.version, "Kind": id.kind},
                    "Resource": id.resource,
                    "ObjectName": {"Namespace": id.namespace, "Name": id.name},
                },
                "NumWECs": wecs,
            })
        })
        .collect();
    examples.into()
}

// ---- the properties ----

proptest! {
    #[test]
    fn object_matching_agrees_with_the_oracle(
        spec in policy_spec(),
        objects in prop::collection::vec(workload_object(), 1..6),
        namespaces in namespace_cache(),
    ) {
        let policy = CompiledPolicy::new(&spec);
        for object in &objects {
            let namespace_labels = namespaces.get(&object.identity.namespace);
            prop_assert_eq!(
                policy_matches(&policy, object, namespace_labels),
                oracle_policy(&spec, object, &namespaces),
                "object {:?}", object.identity
            );
            for (compiled, clause) in policy.clauses().iter().zip(&spec.downsync) {
                prop_assert_eq!(
                    clause_matches(compiled, object, namespace_labels),
                    oracle_clause(&clause.test, object, &namespaces)
                );
            }
        }
    }

    #[test]
    fn every_invalid_selector_is_reported_where_it_is(spec in policy_spec()) {
        let policy = CompiledPolicy::new(&spec);
        let reported: Vec<String> = policy
            .errors()
            .iter()
            .map(|e| e.to_string().split(" is invalid").next().unwrap_or_default().to_string())
            .collect();
        prop_assert_eq!(reported.len(), policy.errors().len());
        prop_assert_eq!(reported.into_iter().collect::<BTreeSet<_>>(), oracle_error_locations(&spec));
    }

    #[test]
    fn wec_selection_agrees_with_the_oracle(spec in policy_spec(), wecs in prop::collection::vec(wec(), 1..4)) {
        let policy = CompiledPolicy::new(&spec);
        for wec in &wecs {
            let oracle = spec.cluster_selectors.iter().any(|s| oracle_selects(s, &wec.labels));
            prop_assert_eq!(wec_selected(&policy, wec), oracle, "wec {:?}", wec);
        }
    }

    #[test]
    fn the_binding_spec_says_exactly_what_was_selected_in_canonical_order(
        selected in selection(),
        wecs in wec_names(),
    ) {
        let spec = spec_of(&selected, &wecs);
        prop_assert_eq!(spec_model(&spec), oracle_spec_model(&selected, &wecs));
        prop_assert!(strictly_sorted(&spec.destinations));
        prop_assert!(strictly_sorted(spec.workload.cluster_scope.iter().map(|e| &e.object)));
        prop_assert!(strictly_sorted(spec.workload.namespace_scope.iter().map(|e| &e.object)));
        let cluster_modulations = spec.workload.cluster_scope.iter().map(|e| &e.modulation);
        let namespace_modulations = spec.workload.namespace_scope.iter().map(|e| &e.modulation);
        for modulation in cluster_modulations.chain(namespace_modulations) {
            prop_assert!(strictly_sorted(&modulation.status_collectors));
        }
    }

    #[test]
    fn input_order_does_not_change_the_binding_spec(
        (selected, shuffled) in selection().prop_flat_map(|s| (Just(s.clone()), Just(s).prop_shuffle())),
        (wecs, shuffled_wecs) in wec_names().prop_flat_map(|w| (Just(w.clone()), Just(w).prop_shuffle())),
    ) {
        prop_assert_eq!(spec_of(&selected, &wecs), spec_of(&shuffled, &shuffled_wecs));
    }

    #[test]
    fn specs_differ_exactly_when_their_sets_differ(
        ((existing, existing_wecs), (desired, desired_wecs)) in prop_oneof![
            (selection(), wec_names()).prop_flat_map(|inputs| (Just(inputs.clone()), variant_of(inputs))),
            ((selection(), wec_names()), (selection(), wec_names())),
        ],
        reverse in any::<bool>(),
    ) {
        // Specs from another writer may list things in any order.
        let mut existing_spec = spec_of(&existing, &existing_wecs);
        if reverse {
            existing_spec.destinations.reverse();
            existing_spec.workload.namespace_scope.reverse();
            existing_spec.workload.cluster_scope.reverse();
        }
        let desired_spec = spec_of(&desired, &desired_wecs);
        prop_assert_eq!(
            binding_spec_differs(&existing_spec, &desired_spec),
            oracle_spec_model(&existing, &existing_wecs) != oracle_spec_model(&desired, &desired_wecs)
        );
    }

    #[test]
    fn the_singleton_error_shows_the_first_four_wrong_counts(
        requests in prop::collection::btree_map(workload_object().prop_map(|o| o.identity), 0..4usize, 0..8),
    ) {
        let message = singleton_error(requests.iter().map(|(id, wecs)| (id, *wecs)));
        let expected = wrong_count_examples(&requests);
        match message {
            None => prop_assert_eq!(expected, serde_json::json!([])),
            Some(message) => {
                let json = message.strip_prefix(singleton::SINGLETON_ERROR_PREFIX);
                prop_assert!(json.is_some(), "unexpected wording: {}", message);
                let shown: serde_json::Value = serde_json::from_str(json.unwrap_or_default()).unwrap_or_default();
                prop_assert_eq!(shown, expected);
            }
        }
    }
}

/// Guards the generators: the properties above prove little if no object ever matched, every
/// policy had an invalid selector, or no WEC was ever selected.
#[test]
fn the_generators_produce_both_outcomes() {
    let mut runner = TestRunner::deterministic();
    let cases = (policy_spec(), workload_object(), namespace_cache(), wec());
    let (mut matched, mut missed, mut with_errors, mut without_errors, mut wecs_selected) = (0, 0, 0, 0, 0);
    for _ in 0..500 {
        let (spec, object, namespaces, wec) = cases.new_tree(&mut runner).expect("a case").current();
        let policy = CompiledPolicy::new(&spec);
        match policy_matches(&policy, &object, namespaces.get(&object.identity.namespace)) {
            Some(_) => matched += 1,
            None => missed += 1,
        }
        if policy.errors().is_empty() {
            without_errors += 1;
        } else {
            with_errors += 1;
        }
        wecs_selected += usize::from(wec_selected(&policy, &wec));
    }
    for (what, count) in [
        ("matched", matched),
        ("missed", missed),
        ("with errors", with_errors),
        ("without errors", without_errors),
        ("wecs selected", wecs_selected),
    ] {
        assert!(count >= 25, "only {count} of 500 generated cases {what}");
    }
}
