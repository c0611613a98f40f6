//! The objects an episode's operations write, as the JSON a user hands to kubectl.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::names::{EPISODE_LABEL, FOREIGN_LABEL, Kind, Names, WECS};
use super::ops::{Clause, ClusterSelector, Labels, PolicySpec, Removal, Scope, Selector, State};

const POLICY_API: &str = "control.kubestellar.io/v1alpha1";

/// How many contents `kind` has.
pub fn variants(kind: Kind) -> u8 {
    match kind {
        Kind::ConfigMap => 5,
        _ => 4,
    }
}

/// The content of `kind` number `variant` (`spec`, `data`): what differs between variants is
/// what [`compared_fields`] compares. Some ConfigMap values are templates, expanded per WEC
/// when the object asks for it; one of them fails (no such property).
pub fn content(kind: Kind, variant: u8) -> Value {
    let v = variant % variants(kind);
    match kind {
        Kind::Namespace => json!({}),
        Kind::ConfigMap => match v {
            0 => json!({"data": {"k": "a"}}),
            1 => json!({"data": {"k": "b", "extra": "e"}}),
            2 => json!({"data": {"k": "{{.clusterName}}", "r": "in {{.region}}"}}),
            3 => json!({"data": {"k": "c"}}),
            _ => json!({"data": {"k": "{{.nosuch}}"}}),
        },
        Kind::Secret => {
            let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            let mut data = json!({"password": encode(&format!("p{v}"))});
            if v % 2 == 1 {
                data["extra"] = encode("e").into();
            }
            json!({"type": "Opaque", "data": data})
        }
        Kind::Service => {
            json!({"spec": {"selector": {"app": format!("s{}", v % 2)}, "ports": [{"port": 80 + u16::from(v)}]}})
        }
        Kind::Deployment => {
            let mut container = json!({"name": "app", "image": if v < 2 { "nginx:1.27" } else { "nginx:1.28" }});
            if v == 1 || v == 2 {
                container["env"] = json!([{"name": "MODE", "value": format!("m{v}")}]);
            }
            json!({"spec": {"replicas": 1 + v % 2, "template": {"spec": {"containers": [container]}}}})
        }
        Kind::Job => json!({"spec": {"parallelism": 1 + v % 2}}),
        Kind::Widget => {
            let mut spec = json!({"size": v, "nested": {"inner": format!("i{v}"), "keep": "k"}});
            if v.is_multiple_of(2) {
                spec["secret"] = format!("s{v}").into();
            }
            json!({"spec": spec})
        }
    }
}

/// The fields compared between the WDS object, the oracle and the WEC copies: what the user
/// sets, none that an apiserver or controller fills in.
pub fn compared_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Namespace => &[],
        Kind::ConfigMap | Kind::Secret => &["/data"],
        Kind::Service => &["/spec/selector", "/spec/ports/0/port"],
        Kind::Deployment => &[
            "/spec/replicas",
            "/spec/template/spec/containers/0/image",
            "/spec/template/spec/containers/0/env",
        ],
        Kind::Job => &["/spec/parallelism"],
        Kind::Widget => &["/spec"],
    }
}

/// What `kind` needs besides its content, and never changes (immutable fields among them).
fn skeleton(kind: Kind, name: &str) -> Value {
    match kind {
        Kind::Deployment => json!({"spec": {"selector": {"matchLabels": {"app": name}},
                                             "template": {"metadata": {"labels": {"app": name}}}}}),
        Kind::Job => json!({"spec": {"template": {"spec": {"restartPolicy": "Never",
                                     "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}),
        _ => json!({}),
    }
}

/// `into` with `from` merged in, objects recursively (as a JSON merge patch without nulls).
fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// The JSON merge patch (RFC 7386) taking `from` to `to`.
pub fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = Map::new();
            for key in from.keys().filter(|k| !to.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in to {
                match from.get(key) {
                    Some(old) if old == value => {}
                    Some(old) => {
                        patch.insert(key.clone(), merge_patch(old, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            Value::Object(patch)
        }
        (_, to) => to.clone(),
    }
}

fn with_episode(names: &Names, labels: &Labels) -> Labels {
    let mut labels = labels.clone();
    labels.insert(EPISODE_LABEL.to_string(), names.episode.clone());
    labels
}

pub fn namespace(names: &Names, ns: u8, labels: &Labels) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": names.namespace(ns), "labels": with_episode(names, labels)}})
}

/// The whole object as the user writes it.
pub fn object(names: &Names, kind: Kind, ns: u8, name: u8, state: &State) -> Value {
    let name = Names::object(name);
    let mut metadata = json!({"name": name, "namespace": names.namespace(ns),
                              "labels": with_episode(names, &state.labels)});
    if !state.annotations.is_empty() {
        metadata["annotations"] = json!(state.annotations);
    }
    let mut object = json!({"apiVersion": kind.api_version(&names.widgets), "kind": kind.kind(), "metadata": metadata});
    merge(&mut object, &skeleton(kind, &name));
    merge(&mut object, &content(kind, state.variant));
    object
}

fn selector(names: &Names, episode: bool, selector: Option<&Selector>) -> Value {
    let mut match_labels = Map::new();
    if episode {
        match_labels.insert(EPISODE_LABEL.into(), names.episode.clone().into());
    }
    let mut expressions = Vec::new();
    match selector {
        None => {}
        Some(Selector::Equals(key, value)) => {
            match_labels.insert(key.clone(), value.clone().into());
        }
        Some(Selector::In(key, values)) => expressions.push(json!({"key": key, "operator": "In", "values": values})),
        Some(Selector::NotIn(key, values)) => {
            expressions.push(json!({"key": key, "operator": "NotIn", "values": values}));
        }
        Some(Selector::Exists(key)) => expressions.push(json!({"key": key, "operator": "Exists"})),
        Some(Selector::DoesNotExist(key)) => expressions.push(json!({"key": key, "operator": "DoesNotExist"})),
    }
    let mut selector = Map::new();
    if !match_labels.is_empty() {
        selector.insert("matchLabels".into(), match_labels.into());
    }
    if !expressions.is_empty() {
        selector.insert("matchExpressions".into(), expressions.into());
    }
    selector.into()
}

fn sorted_unique<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items.dedup();
    items
}

fn clause(names: &Names, clause: &Clause) -> Value {
    let mut json = Map::new();
    match &clause.scope {
        Scope::Namespaces(namespaces) => {
            let namespaces = sorted_unique(namespaces.iter().map(|ns| names.namespace(*ns)).collect());
            json.insert("namespaces".into(), json!(namespaces));
        }
        Scope::Objects(extra) => {
            json.insert("objectSelectors".into(), json!([selector(names, true, extra.as_ref())]));
        }
        Scope::NamespaceLabels(extra) => {
            json.insert(
                "namespaceSelectors".into(),
                json!([selector(names, true, extra.as_ref())]),
            );
        }
    }
    if let Some(extra) = &clause.object_selector {
        json.insert("objectSelectors".into(), json!([selector(names, false, Some(extra))]));
    }
    if let Some(kind) = clause.api_group {
        json.insert("apiGroup".into(), kind.group(&names.widgets).into());
    }
    if !clause.resources.is_empty() {
        let resources = sorted_unique(clause.resources.iter().map(|k| k.resource()).collect());
        json.insert("resources".into(), json!(resources));
    }
    if !clause.object_names.is_empty() {
        let object_names = sorted_unique(clause.object_names.iter().map(|n| Names::object(*n)).collect());
        json.insert("objectNames".into(), json!(object_names));
    }
    for (set, field) in [
        (clause.create_only, "createOnly"),
        (clause.singleton, "wantSingletonReportedState"),
        (clause.multi_wec, "wantMultiWECReportedState"),
    ] {
        if set {
            json.insert(field.into(), true.into());
        }
    }
    json.into()
}

fn cluster_selector(names: &Names, selector: &ClusterSelector) -> Value {
    match selector {
        ClusterSelector::Named(wec) => json!({"matchLabels": {"name": WECS[usize::from(*wec) % WECS.len()]}}),
        ClusterSelector::Labelled(key) => json!({"matchLabels": {names.wec_label(*key): "on"}}),
        ClusterSelector::Exists(key) => {
            json!({"matchExpressions": [{"key": names.wec_label(*key), "operator": "Exists"}]})
        }
    }
}

pub fn policy(names: &Names, policy: u8, spec: &PolicySpec) -> Value {
    let clusters: Vec<Value> = spec.clusters.iter().map(|s| cluster_selector(names, s)).collect();
    let downsync: Vec<Value> = spec.clauses.iter().map(|c| clause(names, c)).collect();
    json!({"apiVersion": POLICY_API, "kind": "BindingPolicy", "metadata": {"name": names.policy(policy)},
           "spec": {"clusterSelectors": clusters, "downsync": downsync}})
}

/// The policy that delivers the episode's Namespaces to every WEC, so that whatever another
/// policy sends to a WEC has its Namespace there (OCM applies nothing into a missing namespace).
pub fn base_policy(names: &Names) -> Value {
    let clusters: Vec<Value> = WECS.iter().map(|w| json!({"matchLabels": {"name": w}})).collect();
    json!({"apiVersion": POLICY_API, "kind": "BindingPolicy", "metadata": {"name": names.base_policy()},
           "spec": {"clusterSelectors": clusters,
                    "downsync": [{"resources": ["namespaces"],
                                  "objectSelectors": [{"matchLabels": {EPISODE_LABEL: names.episode}}]}]}})
}

/// The path of a removal, in the CustomTransform language.
pub fn removal_path(removal: Removal) -> &'static str {
    match removal {
        Removal::Secret => "$.spec.secret",
        Removal::NestedInner => "$.spec.nested.inner",
        Removal::Size => r#"$.spec["size"]"#,
        Removal::NoteAnnotation => "$.metadata.annotations.note",
    }
}

pub fn transform(names: &Names, transform: u8, remove: &[Removal]) -> Value {
    let paths: Vec<&str> = remove.iter().map(|r| removal_path(*r)).collect();
    json!({"apiVersion": POLICY_API, "kind": "CustomTransform", "metadata": {"name": names.transform(transform)},
           "spec": {"apiGroup": names.widgets, "resource": "widgets", "remove": paths}})
}

/// What a foreign ManifestWork holds: a Namespace and a ConfigMap in it.
pub fn foreign_objects(names: &Names, work: u8) -> [Value; 2] {
    let namespace = names.foreign_namespace(work);
    let labels = json!({FOREIGN_LABEL: names.episode});
    [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "admin-cm", "namespace": namespace, "labels": labels},
               "data": {"owner": "admin"}}),
    ]
}

pub fn foreign_work(names: &Names, work: u8, wec: u8, named_after: Option<u8>) -> Value {
    json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
           "metadata": {"name": names.foreign_work(work, named_after), "namespace": WECS[usize::from(wec) % WECS.len()],
                        "labels": {FOREIGN_LABEL: names.episode}},
           "spec": {"workload": {"manifests": foreign_objects(names, work)}}})
}

/// The run's CRD: namespaced widgets whose `spec` holds anything, without a status.
pub fn crd(names: &Names) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": names.crd()},
           "spec": {"group": names.widgets, "scope": "Namespaced",
                    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                      "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_takes_one_content_to_another() {
        for kind in Kind::WORKLOADS {
            for from in 0..variants(kind) {
                for to in 0..variants(kind) {
                    let (from, to) = (content(kind, from), content(kind, to));
                    let mut patched = from.clone();
                    apply_merge_patch(&mut patched, &merge_patch(&from, &to));
                    assert_eq!(patched, to, "{kind:?}");
                }
            }
        }
    }

    /// RFC 7386, as the apiserver applies `kubectl patch --type merge`.
    fn apply_merge_patch(target: &mut Value, patch: &Value) {
        let Value::Object(patch) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let target = target.as_object_mut().unwrap();
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                apply_merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }

    #[test]
    fn every_clause_keeps_to_the_episode() {
        let names = Names {
            episode: "cv-1-0".into(),
            widgets: "w.example.com".into(),
        };
        let scopes = [
            Scope::Namespaces(vec![1, 1, 0]),
            Scope::Objects(None),
            Scope::NamespaceLabels(Some(Selector::Exists("color".into()))),
        ];
        for scope in scopes {
            let c = Clause::over(scope);
            let json = clause(&names, &c);
            let text = json.to_string();
            assert!(text.contains("cv-1-0"), "{text}");
        }
    }
}
