use ks_shared::names::WDS_GENERATION_ANNOTATION;
use serde_json::json;

use super::*;
use crate::transport::ocm::cached::{CachedWork, same_content};
use crate::transport::plan::depth::{MAX_DELIVERED_DEPTH, nesting_depth, too_deep};
use crate::transport::plan::in_place;
use crate::transport::plan::names::{MAX_WORK_NAME, shard_of, shard_work_name, work_name};
use crate::transport::plan::trace;
use crate::transport::types::{Held, without_trace_annotations};

fn origin() -> Origin<'static> {
    Origin {
        binding: "nginx",
        binding_uid: "b-uid",
        binding_generation: 7,
        wds: "wds1",
    }
}

fn of<'a>(binding: &'a str, wds: &'a str) -> Origin<'a> {
    Origin {
        binding,
        wds,
        ..origin()
    }
}

#[test]
fn names_tell_binding_wds_and_shard_apart() {
    assert_eq!(work_name(&origin(), 2, None), "nginx.wds1.2");
    assert_eq!(work_name(&origin(), 0, Some("o-uid")), "b-uid-wds1-o-uid");
    // Upstream named both `x-a-b-0`.
    assert_eq!(work_name(&of("x-a", "b"), 0, None), "x-a.b.0");
    assert_eq!(work_name(&of("x", "a-b"), 0, None), "x.a-b.0");
    // A policy name may hold dots and dashes, a WDS name dashes only: no two pairs meet.
    let pairs = [
        ("x.a", "b"),
        ("x", "a-b"),
        ("x-a", "b"),
        ("x.a-b", "c"),
        ("x", "a-b-c"),
        ("x.a", "b-c"),
    ];
    let names: BTreeSet<String> = pairs.iter().map(|(b, w)| work_name(&of(b, w), 0, None)).collect();
    assert_eq!(names.len(), pairs.len(), "{names:?}");
}

#[test]
fn a_long_binding_name_is_cut_to_a_name_the_wec_can_hold() {
    let long = "p".repeat(MAX_WORK_NAME);
    // Cut right after its dot, which is dropped: `a.-` is no DNS name.
    let dotted = format!("{}.{}", "a".repeat(168), "b".repeat(60));
    for binding in [long.as_str(), dotted.as_str()] {
        let name = work_name(&of(binding, "wds1"), 12, None);
        assert!(name.len() <= MAX_WORK_NAME, "{name}");
        assert!(name.ends_with(".wds1.12"), "{name}");
        assert!(!name.contains("-.") && !name.contains(".-"), "{name}");
        assert_eq!(shard_of(&of(binding, "wds1"), &name), Some(12));
    }
    let other = format!("{long}q");
    assert_ne!(
        work_name(&of(&long, "wds1"), 0, None),
        work_name(&of(&other, "wds1"), 0, None),
        "the hash of the whole tells them apart"
    );
}

#[test]
fn shards_are_read_from_both_names_and_uid_names_have_none() {
    assert_eq!(shard_of(&origin(), &work_name(&origin(), 2, None)), Some(2));
    assert_eq!(shard_of(&origin(), "nginx-wds1-3"), Some(3), "an earlier version's");
    assert_eq!(shard_of(&origin(), "nginx.wds2.3"), None, "another WDS's");
    assert_eq!(shard_of(&of("x", "a-b"), "x-a.b.0"), None);
    let by_uid = work_name(&origin(), 0, Some("0c5e3b1a-4d2f-4e6a-9b7c-123456789012"));
    assert_eq!(shard_of(&origin(), &by_uid), None);
}

#[test]
fn a_shard_keeps_the_name_an_earlier_version_gave_it() {
    let existing = BTreeSet::from(["nginx-wds1-0".to_string(), "nginx.wds1.1".to_string()]);
    let name = |shard| shard_work_name(&origin(), shard, None, &existing);
    assert_eq!(
        [name(0), name(1), name(2)],
        ["nginx-wds1-0", "nginx.wds1.1", "nginx.wds1.2"]
    );
    assert_eq!(
        shard_work_name(&origin(), 0, Some("o-uid"), &existing),
        "b-uid-wds1-o-uid"
    );
}

#[test]
fn wraps_with_labels_generation_and_update_strategies() {
    let deployment = Delivery::new(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "n"}}),
        "deployments",
        true,
    );
    let namespace = namespace_delivery();
    let work = wrapped(&origin(), "cluster1", "nginx.wds1.0", &[&namespace, &deployment]);
    let as_json = serde_json::to_value(&work).unwrap();
    assert_eq!(
        as_json["metadata"]["labels"],
        json!({
            "transport.kubestellar.io/originOwnerReferenceBindingKey": "nginx",
            "transport.kubestellar.io/originWdsName": "wds1",
            "transport.kubestellar.io/sharedWith": ""
        })
    );
    assert_eq!(
        as_json["metadata"]["annotations"]["transport.kubestellar.io/originOwnerReferenceBindingGeneration"],
        "7"
    );
    // What the WEC's status agent is granted to read: not the core group, which it always may.
    assert_eq!(as_json["metadata"]["annotations"][API_GROUPS_ANNOTATION], "apps");
    assert_eq!(
        as_json["spec"]["manifestConfigs"],
        json!([{
            "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "web", "namespace": "n"},
            "updateStrategy": {"type": "CreateOnly"}
        }, {
            "resourceIdentifier": {"group": "", "resource": "namespaces", "name": "*", "namespace": "*"},
            "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true}}
        }, {
            "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "*", "namespace": "*"},
            "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {"force": true}}
        }])
    );
    assert_eq!(
        as_json["spec"]["workload"]["manifests"][0]["kind"], "Namespace",
        "Binding order is kept"
    );
    assert!(as_json["spec"].get("deleteOption").is_none());
    assert_eq!(
        gloss(&work),
        [
            ("".into(), "Namespace".into(), "".into(), "n".into()),
            ("apps".into(), "Deployment".into(), "n".into(), "web".into()),
        ]
    );
}

/// The update strategy type of each of `work`'s options, by object name (`*`: by resource).
fn strategies(work: &ManifestWork) -> Vec<(String, String)> {
    let options = work.spec.manifest_configs.iter();
    options
        .map(|c| {
            let r = &c.resource_identifier;
            let name = if r.name == WILDCARD {
                format!("*{}", r.resource)
            } else {
                r.name.clone()
            };
            (
                name,
                c.update_strategy.as_ref().map(|s| s.type_.clone()).unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn copies_written_in_place_stay_so_except_jobs() {
    let object = |api_version: &str, kind: &str, name: &str| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "n"}});
    let deliveries = [
        Delivery::new(object("v1", "ConfigMap", "cm"), "configmaps", false),
        Delivery::new(object("batch/v1", "Job", "job"), "jobs", false),
        Delivery::new(object("example.com/v1", "Widget", "w"), "widgets", false),
        Delivery::new(object("v1", "Secret", "new"), "secrets", false),
    ];
    let all: Vec<&Delivery> = deliveries.iter().collect();
    // As an earlier hub wrote it: no options, so OCM's `Update` for all.
    let mut earlier = wrapped(&origin(), "c", "w", &all[..3]);
    earlier.spec.manifest_configs.clear();
    let held = |work: &ManifestWork| -> Vec<(Identity, Written)> {
        let cached = watched(work);
        assert_eq!(
            CachedWork::of(work).written,
            cached.written,
            "read alike from the watch"
        );
        let identities = cached.held.iter().map(|h| h.identity.clone());
        identities.zip(cached.written.iter().copied()).collect()
    };
    let earlier_held = held(&earlier);
    let own = earlier_held.iter().map(|(i, w)| (i, *w));
    let in_place = in_place::in_place(own, std::iter::empty());
    let names: Vec<&str> = in_place.iter().map(|(.., name)| name.as_str()).collect();
    assert_eq!(names, ["cm", "job", "w"]);

    let now = wrap(&origin(), "c", "w", &all, &in_place);
    let expected = [
        ("cm", "Update"),
        ("*configmaps", "ServerSideApply"),
        ("*secrets", "ServerSideApply"),
        ("*jobs", "ServerSideApply"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect();
    assert_eq!(
        strategies(&now),
        expected,
        "Jobs are applied server-side; custom resources never"
    );
    // An option the watch cannot read (no strategy, a number for a name) names nothing or
    // means OCM's default: the object reads as written in place, never dropped.
    let mut odd = serde_json::to_value(&now).unwrap();
    odd["spec"]["manifestConfigs"] = json!([{"resourceIdentifier": {"group": "", "resource": "configmaps", "name": 7}},
                                           {"resourceIdentifier": {"group": "", "resource": "configmaps", "name": "cm", "namespace": "n"}}]);
    let odd: CachedWork = serde_json::from_value(odd).unwrap();
    assert_eq!(odd.written[0], Written::InPlace);
    assert_eq!(odd.held.len(), 4);
    // Read back, the ConfigMap stays written in place.
    let now_held = held(&now);
    let again = in_place::in_place(now_held.iter().map(|(i, w)| (i, *w)), std::iter::empty());
    let names: Vec<&str> = again.iter().map(|(.., name)| name.as_str()).collect();
    assert_eq!(names, ["cm", "w"]);
}

#[test]
fn an_option_naming_a_secret_is_not_taken_for_a_configmap_of_its_name() {
    let object = |kind: &str, name: &str| json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "n"}});
    let secret = Delivery::new(object("Secret", "o1"), "secrets", false);
    let config_map = Delivery::new(object("ConfigMap", "o1"), "configmaps", false);
    let endpoints = Delivery::new(object("Endpoints", "o1"), "endpoints", false);
    let secret_identity = identity(secret.manifest());
    let endpoints_identity = identity(endpoints.manifest());
    let in_place = BTreeSet::from([secret_identity, endpoints_identity]);
    let work = wrap(&origin(), "c", "w", &[&secret, &config_map, &endpoints], &in_place);
    let cached = watched(&work);
    let kinds: Vec<(&str, Written)> = cached
        .held
        .iter()
        .map(|h| h.identity.1.as_str())
        .zip(cached.written.iter().copied())
        .collect();
    assert_eq!(
        kinds,
        [
            ("Secret", Written::InPlace),
            ("ConfigMap", Written::ServerSide),
            ("Endpoints", Written::InPlace)
        ]
    );
}

#[test]
fn a_copy_is_written_in_place_when_it_was_created_so() {
    let id = |name: &str| {
        (
            "".to_string(),
            "ConfigMap".to_string(),
            "n".to_string(),
            name.to_string(),
        )
    };
    let (a, b, c, d) = (id("a"), id("b"), id("c"), id("d"));
    use Written::*;
    // Another policy created `a` createOnly, and writes `b` in place; `c` is applied
    // server-side elsewhere, though another holds it createOnly too.
    let others = [(&a, CreateOnly), (&b, InPlace), (&c, ServerSide), (&c, CreateOnly)];
    let in_place = in_place::in_place(std::iter::empty(), others.into_iter());
    assert_eq!(in_place, BTreeSet::from([a.clone(), b.clone()]));
    // What this Binding already writes stays as it is, whatever others do...
    let own = [(&a, ServerSide), (&b, InPlace), (&d, ServerSide)];
    let in_place = in_place::in_place(own.into_iter(), others.into_iter());
    assert_eq!(in_place, BTreeSet::from([b.clone()]));
    // ...and what it held createOnly itself is written in place, unless someone applies it
    // server-side (then it was created so).
    let own = [(&a, CreateOnly), (&c, CreateOnly), (&d, CreateOnly)];
    let in_place = in_place::in_place(own.into_iter(), others.into_iter());
    assert_eq!(in_place, BTreeSet::from([a, b, d]));
}

#[test]
fn custom_resources_keep_ocms_update() {
    let widget = Delivery::new(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "n"}}),
        "widgets",
        false,
    );
    let work = wrapped(&origin(), "c", "w", &[&widget, &namespace_delivery()]);
    let resources: Vec<&str> = work
        .spec
        .manifest_configs
        .iter()
        .map(|c| c.resource_identifier.resource.as_str())
        .collect();
    assert_eq!(resources, ["namespaces"]);
}

/// `deliveries` wrapped where OCM wrote nothing in place.
fn wrapped(origin: &Origin<'_>, mailbox: &str, name: &str, deliveries: &[&Delivery]) -> ManifestWork {
    wrap(origin, mailbox, name, deliveries, &BTreeSet::new())
}

fn configmap(annotations: Value) -> Delivery {
    Delivery::new(
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm1", "namespace": "n", "annotations": annotations},
               "data": {"a": "b"}}),
        "configmaps",
        false,
    )
}

/// What the transport's cache keeps of `work`, read from the watch.
fn watched(work: &ManifestWork) -> CachedWork {
    serde_json::from_value(serde_json::to_value(work).unwrap()).unwrap()
}

/// What the apiserver stores of a ManifestWork we wrote: embedded objects' metadata is
/// decoded and encoded again, which drops empty maps and adds `creationTimestamp: null`.
fn as_stored(work: &ManifestWork) -> ManifestWork {
    let mut stored = work.clone();
    for manifest in &mut stored.spec.workload.manifests {
        let metadata = Arc::make_mut(manifest)["metadata"].as_object_mut().unwrap();
        metadata.retain(|_, v| v.as_object().is_none_or(|m| !m.is_empty()));
        metadata.insert("creationTimestamp".into(), Value::Null);
    }
    stored
}

#[test]
fn what_the_apiserver_stores_of_a_work_is_the_same_content() {
    // A kubectl-applied object loses its last-applied annotation, leaving `annotations: {}`.
    let desired = wrapped(&origin(), "cluster1", "nginx.wds1.0", &[&configmap(json!({}))]);
    let stored = as_stored(&desired);
    assert_ne!(stored.spec, desired.spec, "the apiserver changed it");
    assert!(same_content(&watched(&stored), &desired));
}

/// The last good content of an object in error is read back from its ManifestWork: wrapped
/// again, it is the same content, so nothing is written for it.
#[test]
fn a_work_read_back_delivers_what_was_written() {
    let written = [configmap(json!({"a": "1"})), namespace_delivery()];
    let desired = wrapped(&origin(), "c", "w", &written.iter().collect::<Vec<_>>());
    let read: Vec<Delivery> = delivered(&as_stored(&desired))
        .iter()
        .zip(&written)
        .map(|(manifest, d)| Delivery::new((**manifest).clone(), d.resource.clone(), d.create_only))
        .collect();
    assert_eq!(read, written);
    let again = wrapped(&origin(), "c", "w", &read.iter().collect::<Vec<_>>());
    assert!(same_content(&watched(&desired), &again));
}

#[test]
fn a_cached_work_still_says_what_it_holds_and_what_was_delivered() {
    let traced = json!({WDS_GENERATION_ANNOTATION: "3", "tracing.k8s.io/traceparent": "00-a-b-01", "team": "x"});
    let namespace = namespace_delivery();
    let desired = wrapped(&origin(), "cluster1", "w", &[&namespace, &configmap(traced)]);
    let cached = watched(&as_stored(&desired));
    assert!(same_content(&cached, &desired));
    let held: Vec<Identity> = cached.held.iter().map(|h| h.identity.clone()).collect();
    assert_eq!(held, gloss(&desired));
    let desired_held: Vec<Held> = desired.spec.workload.manifests.iter().map(|m| Held::of(m)).collect();
    let delivered = |held: Vec<&Held>| trace::delivered(held.into_iter());
    let desired_delivered = delivered(desired_held.iter().collect());
    assert_eq!(delivered(cached.held.iter().map(|h| &**h).collect()), desired_delivered);
    assert_eq!(desired_delivered.len(), 1, "the Namespace carries no generation");
    // A changed manifest is still new content to the cached work.
    let changed = wrapped(
        &origin(),
        "cluster1",
        "w",
        &[&namespace, &configmap(json!({"team": "y"}))],
    );
    assert!(!same_content(&cached, &changed));
}

#[test]
fn a_changed_manifest_or_config_is_new_content() {
    let desired = wrapped(&origin(), "cluster1", "w", &[&configmap(json!({"a": "1"}))]);
    let other = wrapped(&origin(), "cluster1", "w", &[&configmap(json!({"a": "2"}))]);
    assert!(!same_content(&watched(&as_stored(&other)), &desired));
    let mut create_only = configmap(json!({"a": "1"}));
    create_only.create_only = true;
    let other = wrapped(&origin(), "cluster1", "w", &[&create_only]);
    assert!(!same_content(&watched(&as_stored(&other)), &desired));
}

#[test]
fn traces_and_binding_generations_alone_are_no_new_content() {
    let desired = wrapped(
        &origin(),
        "c",
        "w",
        &[&configmap(json!({"tracing.k8s.io/traceparent": "00-a-b-01"}))],
    );
    let later = Origin {
        binding_generation: 8,
        ..origin()
    };
    let existing = wrapped(
        &later,
        "c",
        "w",
        &[&configmap(json!({"tracing.k8s.io/traceparent": "00-c-d-01"}))],
    );
    assert!(same_content(&watched(&existing), &desired));
}

#[test]
fn works_written_by_others_or_changed_by_others_are_rewritten() {
    let desired = wrapped(&origin(), "c", "w", &[&configmap(json!({})), &namespace_delivery()]);
    let mut without_digest = desired.clone();
    without_digest.metadata.annotations = None;
    assert!(!same_content(&watched(&without_digest), &desired));
    let mut without_groups = desired.clone();
    without_groups
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(API_GROUPS_ANNOTATION);
    assert!(
        !same_content(&watched(&without_groups), &desired),
        "written before the groups were"
    );
    let mut emptied = desired.clone();
    emptied.spec.workload.manifests.pop();
    assert!(
        !same_content(&watched(&emptied), &desired),
        "an object taken out by someone else"
    );
    let mut relabelled = desired.clone();
    relabelled.metadata.labels.as_mut().unwrap().remove(ORIGIN_WDS_LABEL);
    assert!(!same_content(&watched(&relabelled), &desired));
    let mut labelled = desired.clone();
    labelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("theirs".into(), "x".into());
    assert!(same_content(&watched(&labelled), &desired), "others' labels are theirs");
}

#[test]
fn the_digest_does_not_depend_on_key_order() {
    let a: Value =
        serde_json::from_str(r#"{"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x"}}"#).unwrap();
    let b: Value =
        serde_json::from_str(r#"{"apiVersion": "v1", "metadata": {"name": "x"}, "kind": "ConfigMap"}"#).unwrap();
    let labels = origin_labels(&origin());
    let (a, b) = (
        Delivery::new(a, "configmaps", false),
        Delivery::new(b, "configmaps", false),
    );
    assert_eq!(
        content_digest(&labels, &[&a.digest_text], &[]),
        content_digest(&labels, &[&b.digest_text], &[])
    );
}

/// The digest as it was first written, serialised whole: ManifestWorks written then must keep
/// their digest, or an upgrade would rewrite every one of them.
#[test]
fn the_digest_is_the_one_existing_works_carry() {
    let mut create_only = configmap(json!({"tracing.k8s.io/traceparent": "00-a-b-01", "x": "y"}));
    create_only.create_only = true;
    let deliveries = [&create_only, &namespace_delivery()];
    let work = wrapped(&origin(), "c", "w", &deliveries);
    let stripped: Vec<Value> = deliveries
        .iter()
        .map(|d| without_trace_annotations(&d.manifest))
        .collect();
    let whole = json!({"labels": origin_labels(&origin()), "manifests": stripped,
                       "manifestConfigs": work.spec.manifest_configs});
    let digest = ring::digest::digest(&ring::digest::SHA256, whole.to_string().as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert!(!work.spec.manifest_configs.is_empty());
    assert_eq!(work.metadata.annotations.unwrap()[CONTENT_DIGEST_ANNOTATION], hex);
}

#[test]
fn a_work_keeping_objects_says_what_wrapping_them_there_says() {
    let mut moving = configmap(json!({"x": "y"}));
    moving.create_only = true;
    let staying = namespace_delivery();
    let other = Delivery::new(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}}),
        "deployments",
        false,
    );
    let sources = [
        &wrapped(&origin(), "c", "w-1", &[&moving]),
        &wrapped(&origin(), "c", "w-2", &[&other, &moving]),
    ];
    let objects = BTreeSet::from([identity(&moving.manifest), identity(&other.manifest)]);
    let kept = keeping(&wrapped(&origin(), "c", "w-0", &[&staying]), &sources, &objects);
    let wrapped = wrapped(&origin(), "c", "w-0", &[&staying, &moving, &other]);
    assert!(same_content(&watched(&kept), &wrapped));
    assert_eq!(kept.spec.manifest_configs, wrapped.spec.manifest_configs);
    assert_eq!(kept.metadata.annotations, wrapped.metadata.annotations);
    // Kept once, however often it is asked.
    assert!(same_content(&watched(&keeping(&kept, &sources, &objects)), &wrapped));
}

fn namespace_delivery() -> Delivery {
    Delivery::new(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
        "namespaces",
        false,
    )
}

#[test]
fn deeply_nested_objects_are_refused() {
    assert_eq!(nesting_depth(&json!("leaf")), 0);
    assert_eq!(nesting_depth(&json!({})), 1);
    assert_eq!(nesting_depth(&json!({"a": [1, {"b": 2}]})), 3);
    let nested = |levels: usize| (0..levels).fold(json!("leaf"), |inner, _| json!({"a": inner}));
    assert_eq!(too_deep("Widget.example.com(ns/w)", &nested(MAX_DELIVERED_DEPTH)), None);
    let error = too_deep("Widget.example.com(ns/w)", &nested(MAX_DELIVERED_DEPTH + 1)).unwrap();
    assert!(
        error.starts_with("Widget.example.com(ns/w): nested 121 levels deep"),
        "{error}"
    );
}
