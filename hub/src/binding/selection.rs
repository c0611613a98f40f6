//! Matching workload objects against downsync clauses, and WECs against cluster selectors, with
//! the semantics of upstream KubeStellar (docs/upstream-behaviour.md#selecting-objects,
//! docs/upstream-behaviour.md#selecting-clusters).

use std::collections::BTreeSet;

use ks_shared::api::DownsyncModulation;

use super::policy::{CompiledClause, CompiledPolicy};
use super::workload::{Labels, Wec, WorkloadObject};

/// One criterion of a downsync clause's test.
type Criterion = fn(&CompiledClause, &WorkloadObject, Option<&Labels>) -> bool;

/// The criteria of a clause's test, named as in the spec; cheap string tests first, since most
/// objects fail one of them.
const CRITERIA: [(&str, Criterion); 6] = [
    ("apiGroup", |clause, object, _| {
        clause
            .api_group
            .as_ref()
            .is_none_or(|group| *group == object.identity.group)
    }),
    ("resources", |clause, object, _| {
        clause.resources.admits(&object.identity.resource)
    }),
    ("namespaces", |clause, object, _| {
        let namespace = &object.identity.namespace;
        clause.namespaces.admits(namespace)
            && (!SYSTEM_NAMESPACES.contains(&namespace.as_str()) || clause.namespaces.names(namespace))
    }),
    ("objectNames", |clause, object, _| {
        let name = &object.identity.name;
        clause.object_names.admits(name) && (!made_by_the_wds(object) || clause.object_names.names(name))
    }),
    ("objectSelectors", |clause, object, _| {
        clause.object_selectors.admits(Some(&object.labels))
    }),
    ("namespaceSelectors", |clause, _, namespace_labels| {
        clause.namespace_selectors.admits(namespace_labels)
    }),
];

/// The namespaces of the WDS's own machinery: what is in them goes to WECs only from a clause
/// whose `namespaces` names them. On a WEC they hold its own machinery (`kube-public`'s
/// `cluster-info` is how nodes join it), which OCM would take over and delete with the policy.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Objects the WDS makes for itself, which go to WECs only from a clause whose `objectNames`
/// names them: the system Namespaces, and in every namespace the ServiceAccount `default` and
/// the ConfigMap `kube-root-ca.crt` (the WDS's CA). Each WEC has its own; a broad clause
/// (upstream's too) sent the WDS's over them, OCM took them over, and withdrawing the policy
/// deleted them, so the WEC's `default` ServiceAccount came back with a new UID and the tokens
/// of its Pods no longer counted.
pub fn made_by_the_wds(object: &WorkloadObject) -> bool {
    let identity = &object.identity;
    let core = |resource: &str, name: &str| {
        identity.group.is_empty() && identity.resource == resource && identity.name == name
    };
    SYSTEM_NAMESPACES.iter().any(|ns| core("namespaces", ns))
        || core("serviceaccounts", "default")
        || core("configmaps", "kube-root-ca.crt")
}

/// Whether `object` passes every criterion of `clause`.
///
/// `namespace_labels` are the labels of the object's Namespace from the namespace cache: `None`
/// when the Namespace is unknown or the object is cluster-scoped, which fails a
/// `namespaceSelectors` criterion unless it holds a `{}` selector.
pub fn clause_matches(clause: &CompiledClause, object: &WorkloadObject, namespace_labels: Option<&Labels>) -> bool {
    CRITERIA
        .iter()
        .all(|(_, passes)| passes(clause, object, namespace_labels))
}

/// The criteria of `clause` that `object` fails, by their spec names (e.g. `objectSelectors`):
/// empty when it matches. For explaining a selection, not for making one.
pub fn clause_misses(
    clause: &CompiledClause,
    object: &WorkloadObject,
    namespace_labels: Option<&Labels>,
) -> Vec<&'static str> {
    CRITERIA
        .iter()
        .filter(|(_, passes)| !passes(clause, object, namespace_labels))
        .map(|(name, _)| *name)
        .collect()
}

/// The modulation `object` gets from `policy`: the fold over every clause it matches, or `None`
/// when it matches none. `namespace_labels` as for [`clause_matches`].
pub fn policy_matches(
    policy: &CompiledPolicy,
    object: &WorkloadObject,
    namespace_labels: Option<&Labels>,
) -> Option<DownsyncModulation> {
    fold_modulations(
        policy
            .clauses()
            .iter()
            .filter(|clause| clause_matches(clause, object, namespace_labels))
            .map(|clause| &clause.modulation),
    )
}

/// The indexes of the clauses of `policy` that `object` matches, in spec order.
pub fn matching_clauses(
    policy: &CompiledPolicy,
    object: &WorkloadObject,
    namespace_labels: Option<&Labels>,
) -> Vec<usize> {
    let clauses = policy.clauses().iter().enumerate();
    clauses
        .filter(|(_, clause)| clause_matches(clause, object, namespace_labels))
        .map(|(i, _)| i)
        .collect()
}

/// Combines the modulations of several matching clauses: the flags are ORed and the
/// StatusCollector names united (sorted, without duplicates). `None` when there are none.
pub fn fold_modulations<'a>(
    modulations: impl IntoIterator<Item = &'a DownsyncModulation>,
) -> Option<DownsyncModulation> {
    let mut folded: Option<DownsyncModulation> = None;
    for modulation in modulations {
        let into = folded.get_or_insert_default();
        into.create_only |= modulation.create_only;
        into.want_singleton_reported_state |= modulation.want_singleton_reported_state;
        into.want_multi_wec_reported_state |= modulation.want_multi_wec_reported_state;
        into.status_collectors
            .extend(modulation.status_collectors.iter().cloned());
    }
    folded.map(|mut modulation| {
        normalize_modulation(&mut modulation);
        modulation
    })
}

/// Puts StatusCollector names in their one canonical order, so that equal sets compare equal.
pub(super) fn normalize_modulation(modulation: &mut DownsyncModulation) {
    let names: BTreeSet<String> = std::mem::take(&mut modulation.status_collectors).into_iter().collect();
    modulation.status_collectors = names.into_iter().collect();
}

/// Whether `policy` selects `wec`: some valid cluster selector matches its labels. An empty list
/// selects no WEC and a `{}` selector selects every WEC.
pub fn wec_selected(policy: &CompiledPolicy, wec: &Wec) -> bool {
    policy
        .cluster_selectors()
        .iter()
        .any(|selector| selector.matches(&wec.labels))
}

#[cfg(test)]
mod tests {
    //! One test per row of the matching table (docs/upstream-behaviour.md#selecting-objects) and per
    //! corner it leaves implicit.

    use std::fmt::Debug;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use ks_shared::api::DownsyncObjectTest;

    use super::*;
    use crate::binding::PolicyError;
    use crate::binding::testing::*;

    /// Whether `object` passes a policy whose only clause is `test`.
    fn passes(test: DownsyncObjectTest, object: &WorkloadObject, namespace_labels: Option<&Labels>) -> bool {
        let policy = compile(vec![clause(test, DownsyncModulation::default())], vec![]);
        clause_matches(&policy.clauses()[0], object, namespace_labels)
    }

    /// For each case, sets one criterion of an otherwise empty test and checks the outcome.
    fn check<T: Clone + Debug>(
        object: &WorkloadObject,
        namespace_labels: Option<&Labels>,
        set: impl Fn(&mut DownsyncObjectTest, T),
        cases: Vec<(T, bool)>,
    ) {
        for (value, expected) in cases {
            let mut test = DownsyncObjectTest::default();
            set(&mut test, value.clone());
            assert_eq!(
                passes(test, object, namespace_labels),
                expected,
                "{value:?} for {:?} with namespace labels {namespace_labels:?}",
                object.identity
            );
        }
    }

    #[test]
    fn misses_name_every_failed_criterion_and_none_on_a_match() {
        let web = with_labels(deployment("shop", "web"), &[("app", "web")]);
        let test = DownsyncObjectTest {
            api_group: Some("apps".into()),
            namespaces: strings(&["shop"]),
            object_names: strings(&["api"]),
            object_selectors: vec![match_labels(&[("app", "api")])],
            ..Default::default()
        };
        let policy = compile(vec![clause(test, DownsyncModulation::default())], vec![]);
        let shop = labels(&[]);
        assert_eq!(
            clause_misses(&policy.clauses()[0], &web, Some(&shop)),
            ["objectNames", "objectSelectors"]
        );
        let api = with_labels(deployment("shop", "api"), &[("app", "api")]);
        assert!(clause_misses(&policy.clauses()[0], &api, Some(&shop)).is_empty());
        assert!(clause_matches(&policy.clauses()[0], &api, Some(&shop)));
    }

    fn set_api_group(test: &mut DownsyncObjectTest, group: Option<&str>) {
        test.api_group = group.map(String::from);
    }

    fn set_resources(test: &mut DownsyncObjectTest, list: Vec<String>) {
        test.resources = list;
    }

    fn set_namespaces(test: &mut DownsyncObjectTest, list: Vec<String>) {
        test.namespaces = list;
    }

    fn set_object_names(test: &mut DownsyncObjectTest, list: Vec<String>) {
        test.object_names = list;
    }

    /// For a name-list criterion: each list in `passing` admits `object`, each in `failing` not.
    fn check_list(
        object: &WorkloadObject,
        set: fn(&mut DownsyncObjectTest, Vec<String>),
        passing: &[&[&str]],
        failing: &[&[&str]],
    ) {
        let cases = passing.iter().map(|list| (strings(list), true));
        let cases = cases.chain(failing.iter().map(|list| (strings(list), false)));
        check(object, None, set, cases.collect());
    }

    fn set_object_selectors(test: &mut DownsyncObjectTest, selectors: Vec<LabelSelector>) {
        test.object_selectors = selectors;
    }

    fn set_namespace_selectors(test: &mut DownsyncObjectTest, selectors: Vec<LabelSelector>) {
        test.namespace_selectors = selectors;
    }

    #[test]
    fn api_group_absent_matches_every_group() {
        for object in [deployment("ns1", "web"), config_map("ns1", "cm"), namespace("ns1")] {
            check(&object, None, set_api_group, vec![(None, true)]);
        }
    }

    #[test]
    fn api_group_empty_string_is_the_core_group() {
        check(&config_map("ns1", "cm"), None, set_api_group, vec![(Some(""), true)]);
        check(&namespace("ns1"), None, set_api_group, vec![(Some(""), true)]);
        check(&deployment("ns1", "web"), None, set_api_group, vec![(Some(""), false)]);
    }

    #[test]
    fn api_group_must_equal_the_objects_group() {
        let cases = vec![(Some("apps"), true), (Some("batch"), false), (Some("app"), false)];
        check(&deployment("ns1", "web"), None, set_api_group, cases);
        check(
            &config_map("ns1", "cm"),
            None,
            set_api_group,
            vec![(Some("apps"), false)],
        );
    }

    #[test]
    fn resources_pass_when_empty_star_or_listed() {
        let passing: &[&[&str]] = &[
            &[],
            &["*"],
            &["configmaps", "*"],
            &["deployments"],
            &["configmaps", "deployments"],
        ];
        let failing: &[&[&str]] = &[&["configmaps"], &["deployment"]];
        check_list(&deployment("ns1", "web"), set_resources, passing, failing);
    }

    #[test]
    fn namespaces_pass_when_empty_star_or_listed() {
        let passing: &[&[&str]] = &[&[], &["*"], &["ns1"], &["ns2", "ns1"]];
        check_list(&deployment("ns1", "web"), set_namespaces, passing, &[&["ns2"], &[""]]);
    }

    #[test]
    fn cluster_scoped_objects_pass_namespaces_only_with_star_empty_list_or_literal_empty_entry() {
        // The Namespace object is named ns1 but has no namespace: the list is about the latter.
        let passing: &[&[&str]] = &[&[], &["*"], &[""], &["ns2", ""]];
        check_list(&namespace("ns1"), set_namespaces, passing, &[&["ns1"]]);
    }

    #[test]
    fn object_names_pass_when_empty_star_or_listed() {
        let passing: &[&[&str]] = &[&[], &["*"], &["web"], &["db", "web"]];
        let failing: &[&[&str]] = &[&["db"], &["we"]];
        check_list(&deployment("ns1", "web"), set_object_names, passing, failing);
    }

    #[test]
    fn what_the_wds_makes_for_itself_passes_only_where_a_clause_names_it() {
        let core = |resource, kind, namespace, name| object("", resource, kind, namespace, name);
        let built_ins = [
            core("serviceaccounts", "ServiceAccount", "ns1", "default"),
            core("configmaps", "ConfigMap", "ns1", "kube-root-ca.crt"),
            namespace("kube-system"),
            namespace("kube-node-lease"),
        ];
        for built_in in &built_ins {
            let name = built_in.identity.name.as_str();
            check_list(built_in, set_object_names, &[&[name], &["other", name]], &[&[], &["*"]]);
        }
        let theirs = [
            core("serviceaccounts", "ServiceAccount", "ns1", "builder"),
            core("configmaps", "ConfigMap", "ns1", "kube-root-ca"),
            namespace("default"),
            deployment("ns1", "default"),
        ];
        for object in &theirs {
            check_list(object, set_object_names, &[&[], &["*"]], &[]);
        }
        for system in ["kube-system", "kube-public", "kube-node-lease"] {
            let inside = core("configmaps", "ConfigMap", system, "settings");
            check_list(&inside, set_namespaces, &[&[system]], &[&[], &["*"]]);
        }
    }

    #[test]
    fn object_selectors_pass_when_empty_or_any_selector_matches() {
        let web = with_labels(deployment("ns1", "web"), &[("app", "web"), ("tier", "front")]);
        let cases = vec![
            (vec![], true),
            (vec![LabelSelector::default()], true),
            (vec![match_labels(&[("app", "web")])], true),
            (vec![match_labels(&[("app", "db")])], false),
            (vec![match_labels(&[("app", "web"), ("tier", "back")])], false),
            (
                vec![match_labels(&[("app", "db")]), expression("tier", "In", &["front"])],
                true,
            ),
        ];
        check(&web, None, set_object_selectors, cases);
    }

    #[test]
    fn namespace_selectors_pass_when_empty_or_any_selector_matches_the_namespace_labels() {
        let prod = labels(&[("env", "prod")]);
        let cases = vec![
            (vec![], true),
            (vec![match_labels(&[("env", "prod")])], true),
            (vec![match_labels(&[("env", "dev")])], false),
            (
                vec![match_labels(&[("env", "dev")]), expression("env", "Exists", &[])],
                true,
            ),
        ];
        check(&deployment("ns1", "web"), Some(&prod), set_namespace_selectors, cases);
    }

    #[test]
    fn namespace_selectors_fail_without_namespace_labels() {
        // None stands for an unknown Namespace and for a cluster-scoped object: even a selector
        // that empty labels would satisfy fails, because there is no Namespace to look at.
        for object in [deployment("ns1", "web"), namespace("ns1")] {
            let cases = vec![
                (vec![], true),
                (vec![match_labels(&[("env", "prod")])], false),
                (vec![expression("env", "DoesNotExist", &[])], false),
            ];
            check(&object, None, set_namespace_selectors, cases);
        }
    }

    #[test]
    fn an_empty_namespace_selector_passes_every_object() {
        // Upstream's undocumented corner (docs/upstream-behaviour.md#selecting-objects): it needs no
        // Namespace labels at all.
        let spelled_out_empty = LabelSelector {
            match_labels: Some(Labels::new()),
            match_expressions: Some(vec![]),
        };
        let dev = labels(&[("env", "dev")]);
        for object in [deployment("ns1", "web"), namespace("ns1")] {
            for namespace_labels in [None, Some(&dev)] {
                let cases = vec![
                    (vec![LabelSelector::default()], true),
                    (vec![spelled_out_empty.clone()], true),
                    (vec![match_labels(&[("env", "prod")]), LabelSelector::default()], true),
                ];
                check(&object, namespace_labels, set_namespace_selectors, cases);
            }
        }
    }

    #[test]
    fn every_criterion_must_pass() {
        let full = DownsyncObjectTest {
            api_group: Some("apps".into()),
            resources: strings(&["deployments"]),
            namespaces: strings(&["ns1"]),
            namespace_selectors: vec![match_labels(&[("env", "prod")])],
            object_selectors: vec![match_labels(&[("app", "web")])],
            object_names: strings(&["web"]),
        };
        let web = with_labels(deployment("ns1", "web"), &[("app", "web")]);
        let prod = labels(&[("env", "prod")]);
        assert!(passes(full.clone(), &web, Some(&prod)));
        let spoilers: [fn(&mut DownsyncObjectTest); 6] = [
            |t| t.api_group = Some(String::new()),
            |t| t.resources = strings(&["configmaps"]),
            |t| t.namespaces = strings(&["ns2"]),
            |t| t.namespace_selectors = vec![match_labels(&[("env", "dev")])],
            |t| t.object_selectors = vec![match_labels(&[("app", "db")])],
            |t| t.object_names = strings(&["db"]),
        ];
        for (index, spoil) in spoilers.iter().enumerate() {
            let mut test = full.clone();
            spoil(&mut test);
            assert!(
                !passes(test, &web, Some(&prod)),
                "spoiler {index} should fail the clause"
            );
        }
    }

    #[test]
    fn an_invalid_object_selector_is_reported_and_the_others_still_evaluated() {
        let test = DownsyncObjectTest {
            object_selectors: vec![invalid_selector(), match_labels(&[("app", "web")])],
            ..Default::default()
        };
        let policy = compile(vec![clause(test, DownsyncModulation::default())], vec![]);
        assert_eq!(
            error_messages(&policy),
            [
                r#"spec.downsync[0].objectSelectors[0] is invalid and selects nothing: for 'In' and 'NotIn' operators the values set can't be empty (key "app")"#
            ]
        );
        let web = with_labels(deployment("ns1", "web"), &[("app", "web")]);
        let db = with_labels(deployment("ns1", "db"), &[("app", "db")]);
        assert!(clause_matches(&policy.clauses()[0], &web, None));
        assert!(!clause_matches(&policy.clauses()[0], &db, None));
    }

    #[test]
    fn a_list_of_only_invalid_selectors_passes_nothing() {
        // The list is not empty, so it does not pass everything; no selector in it is usable.
        let prod = labels(&[("env", "prod")]);
        let web = deployment("ns1", "web");
        check(
            &web,
            Some(&prod),
            set_object_selectors,
            vec![(vec![invalid_selector()], false)],
        );
        check(
            &web,
            Some(&prod),
            set_namespace_selectors,
            vec![(vec![invalid_selector()], false)],
        );
    }

    #[test]
    fn an_invalid_namespace_selector_is_reported_and_an_empty_one_still_passes() {
        let test = DownsyncObjectTest {
            namespace_selectors: vec![invalid_selector(), LabelSelector::default()],
            ..Default::default()
        };
        let policy = compile(vec![clause(test, DownsyncModulation::default())], vec![]);
        assert_eq!(policy.errors().len(), 1);
        assert!(clause_matches(&policy.clauses()[0], &namespace("ns1"), None));
    }

    #[test]
    fn errors_name_the_clause_the_list_and_the_selector() {
        let second = DownsyncObjectTest {
            namespace_selectors: vec![LabelSelector::default(), expression("env", "Equals", &["prod"])],
            ..Default::default()
        };
        let policy = compile(
            vec![
                clause(DownsyncObjectTest::default(), DownsyncModulation::default()),
                clause(second, DownsyncModulation::default()),
            ],
            vec![LabelSelector::default(), expression("-bad", "Exists", &[])],
        );
        assert_eq!(
            error_messages(&policy),
            [
                r#"spec.downsync[1].namespaceSelectors[1] is invalid and selects nothing: "Equals" is not a valid label selector operator (key "env")"#,
                r#"spec.clusterSelectors[1] is invalid and selects nothing: invalid label key "-bad": must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"#,
            ]
        );
    }

    #[test]
    fn a_policy_matches_when_any_clause_matches() {
        let only = |resource: &str| DownsyncObjectTest {
            resources: strings(&[resource]),
            ..Default::default()
        };
        let policy = compile(
            vec![
                clause(only("configmaps"), DownsyncModulation::default()),
                clause(only("deployments"), DownsyncModulation::default()),
            ],
            vec![],
        );
        assert!(policy_matches(&policy, &deployment("ns1", "web"), None).is_some());
        assert!(policy_matches(&policy, &config_map("ns1", "cm"), None).is_some());
        assert_eq!(policy_matches(&policy, &namespace("ns1"), None), None);
        assert_eq!(policy_matches(&compile(vec![], vec![]), &namespace("ns1"), None), None);
    }

    #[test]
    fn the_modulation_is_the_fold_over_every_matching_clause() {
        let test = |resources: &[&str], names: &[&str]| DownsyncObjectTest {
            resources: strings(resources),
            object_names: strings(names),
            ..Default::default()
        };
        let modulation = |create_only, singleton, multi, collectors: &[&str]| DownsyncModulation {
            create_only,
            status_collectors: strings(collectors),
            want_singleton_reported_state: singleton,
            want_multi_wec_reported_state: multi,
        };
        let policy = compile(
            vec![
                clause(test(&["deployments"], &[]), modulation(true, false, false, &["b", "a"])),
                clause(test(&[], &["web"]), modulation(false, true, false, &["c", "a"])),
                // Matches nothing here: its flag and collector must not leak into the fold.
                clause(test(&["configmaps"], &[]), modulation(false, false, true, &["z"])),
                clause(test(&["*"], &[]), modulation(false, false, false, &[])),
            ],
            vec![],
        );
        assert_eq!(
            policy_matches(&policy, &deployment("ns1", "web"), None),
            Some(modulation(true, true, false, &["a", "b", "c"]))
        );
        assert_eq!(
            policy_matches(&policy, &config_map("ns1", "cm"), None),
            Some(modulation(false, false, true, &["z"]))
        );
    }

    #[test]
    fn folding_nothing_gives_none_and_one_modulation_comes_back_normalized() {
        assert_eq!(fold_modulations([]), None);
        let one = DownsyncModulation {
            status_collectors: strings(&["b", "a", "b"]),
            want_multi_wec_reported_state: true,
            ..Default::default()
        };
        let folded = fold_modulations([&one]).unwrap();
        assert_eq!(folded.status_collectors, strings(&["a", "b"]));
        assert!(folded.want_multi_wec_reported_state && !folded.create_only && !folded.want_singleton_reported_state);
    }

    #[test]
    fn empty_cluster_selectors_select_no_wec() {
        let policy = compile(vec![], vec![]);
        assert!(!wec_selected(&policy, &wec("cluster1", &[])));
        assert!(!wec_selected(&policy, &wec("cluster2", &[("location-group", "edge")])));
    }

    #[test]
    fn an_empty_cluster_selector_selects_every_wec() {
        let policy = compile(vec![], vec![LabelSelector::default()]);
        assert!(wec_selected(&policy, &wec("cluster1", &[])));
        assert!(wec_selected(&policy, &wec("cluster2", &[("location-group", "edge")])));
    }

    #[test]
    fn a_wec_is_selected_when_any_cluster_selector_matches() {
        let policy = compile(
            vec![],
            vec![
                match_labels(&[("location-group", "edge")]),
                expression("region", "In", &["east", "west"]),
            ],
        );
        assert!(wec_selected(&policy, &wec("edge", &[("location-group", "edge")])));
        assert!(wec_selected(&policy, &wec("east", &[("region", "east")])));
        assert!(!wec_selected(&policy, &wec("north", &[("region", "north")])));
        assert!(!wec_selected(&policy, &wec("bare", &[])));
    }

    #[test]
    fn an_invalid_cluster_selector_is_reported_and_the_others_still_select() {
        let policy = compile(vec![], vec![invalid_selector(), match_labels(&[("region", "east")])]);
        assert_eq!(policy.errors().len(), 1);
        assert!(matches!(
            policy.errors()[0],
            PolicyError::InvalidClusterSelector { index: 0, .. }
        ));
        assert!(wec_selected(&policy, &wec("east", &[("region", "east")])));
        assert!(!wec_selected(&policy, &wec("west", &[("region", "west")])));
        // Only invalid selectors: nothing is selected, not everything.
        assert!(!wec_selected(
            &compile(vec![], vec![invalid_selector()]),
            &wec("any", &[])
        ));
    }
}
