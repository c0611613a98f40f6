//! The oracle: what the episode's operations have made of the WDS, and from that, what every WEC
//! must hold, with which content, and which status each WDS object must show. It reads the
//! policies, CustomTransforms and objects as the JSON the user wrote and applies KubeStellar's
//! documented semantics (docs/upstream-behaviour.md: "Selecting clusters", "Selecting objects",
//! "Transforms", "Templates", "Status return") in its own code: nothing here calls the hub's.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::manifests;
use super::names::{EPISODE_LABEL, FOREIGN_LABEL, Key, Kind, Names, WECS};
use super::ops::{EXPAND_TEMPLATES, Labels, NAMESPACES, Op, PolicySpec, Removal, State, Style};

/// The labels the binding controller keeps on a WDS object while a policy requests its status.
pub const SINGLETON_STATUS_LABEL: &str = "managed-by.kubestellar.io/singletonstatus";
pub const MULTI_WEC_STATUS_LABEL: &str = "managed-by.kubestellar.io/multiwecstatus";

/// A WDS object of the episode.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    pub style: Style,
    pub state: State,
    /// Which creation this is: a delete and a create under the same name make a new one.
    pub incarnation: u64,
}

/// A foreign ManifestWork: its WEC and the policy it is named after.
#[derive(Clone, Debug, PartialEq)]
struct ForeignWork {
    wec: u8,
    named_after: Option<u8>,
}

/// What the episode's operations made: the WDS's objects, Namespaces, policies and
/// CustomTransforms; the ManagedClusters' labels; the foreign ManifestWorks.
#[derive(Clone, Debug)]
pub struct Model {
    pub names: Names,
    /// Each WEC's ManagedCluster labels.
    wecs: [Labels; 2],
    namespaces: BTreeMap<u8, Labels>,
    used_namespaces: BTreeSet<u8>,
    objects: BTreeMap<(Kind, u8, u8), Object>,
    policies: BTreeMap<u8, PolicySpec>,
    transforms: BTreeMap<u8, Vec<Removal>>,
    foreign: BTreeMap<u8, ForeignWork>,
    incarnations: u64,
}

/// What the user asked of one object through one policy: the fold over its matching clauses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modulation {
    pub create_only: bool,
    pub singleton: bool,
    pub multi_wec: bool,
}

/// Where a WDS object's `.status` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusReturn {
    /// A copy of this WEC's object's status.
    Copy(String),
    /// The combination of these WECs' (the counts summed).
    Combine(Vec<String>),
    /// None: empty.
    Clear,
}

/// A comparable view of an object: its labels and annotations (without those the system adds
/// for itself) and its kind's compared fields (`null` when absent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    pub labels: Labels,
    pub annotations: Labels,
    pub fields: BTreeMap<&'static str, Value>,
}

/// Which side an object was read on: what the system adds there is left out of its projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Wds,
    Wec,
}

impl Projection {
    pub fn of(kind: Kind, object: &Value, side: Side) -> Projection {
        let strings = |v: &Value| -> Labels {
            v.as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        };
        let mut labels = strings(&object["metadata"]["labels"]);
        labels.remove("kubernetes.io/metadata.name");
        let mut annotations = strings(&object["metadata"]["annotations"]);
        annotations.retain(|key, _| {
            let system: &[&str] = match side {
                Side::Wds => &["kubectl.kubernetes.io/last-applied-configuration", "tracing.k8s.io/"],
                // OCM's work agent applies some kinds with openshift's library-go, which keeps
                // a hash of the spec it applied.
                Side::Wec => &[
                    "transport.kubestellar.io/",
                    "tracing.k8s.io/",
                    "deployment.kubernetes.io/revision",
                    "operator.openshift.io/spec-hash",
                ],
            };
            !system.iter().any(|s| key.starts_with(s))
        });
        let fields = manifests::compared_fields(kind)
            .iter()
            .map(|pointer| (*pointer, object.pointer(pointer).cloned().unwrap_or(Value::Null)))
            .collect();
        Projection {
            labels,
            annotations,
            fields,
        }
    }

    /// Without the status-request labels, which the hub sets on the WDS object at a time of
    /// its own (a create-only copy may have been made before or after).
    pub fn without_status_labels(&self) -> Projection {
        let mut projection = self.clone();
        projection.labels.remove(SINGLETON_STATUS_LABEL);
        projection.labels.remove(MULTI_WEC_STATUS_LABEL);
        projection
    }
}

/// How a WEC copy's content follows the WDS object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    /// It is the object's rendering for the WEC (the projection).
    Current,
    /// Every policy sending it there is createOnly: it stays as first delivered.
    CreateOnly,
    /// Its template fails for the WEC: it keeps the content it last had there, if any (and the
    /// rest of its policy goes on; issue 72 defect 7).
    LastGood,
}

/// One object a WEC must hold.
#[derive(Clone, Debug, PartialEq)]
pub struct OnWec {
    /// Its rendering for the WEC (a failed one for [`Content::LastGood`]).
    pub projection: Projection,
    pub content: Content,
    /// Its status is reported (one WorkStatus): sent by KubeStellar, not by a foreign work.
    pub reported: bool,
    /// What sends it there: the policies, or `foreign <name>`.
    pub holders: BTreeSet<String>,
    /// Some policy sends it there createOnly (others may not): a copy made now may have been
    /// created by that policy's create, whichever ManifestWork OCM applied first.
    pub create_only_sender: bool,
}

/// What the stack must show once it has converged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expected {
    /// Every object (and Namespace) of the episode in the WDS.
    pub wds: BTreeMap<Key, Projection>,
    /// What each WEC holds in the episode's namespaces (and those Namespaces).
    pub wecs: BTreeMap<String, BTreeMap<Key, OnWec>>,
    /// The status of each WDS object whose status is checked.
    pub statuses: BTreeMap<Key, StatusReturn>,
    /// Foreign ManifestWorks by (mailbox, name): their labels, as the admin wrote them.
    pub foreign_works: BTreeMap<(String, String), Labels>,
    /// Which creation each WDS object is.
    pub incarnations: BTreeMap<Key, u64>,
}

/// An object as the selection sees it.
struct Facts<'a> {
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
    name: &'a str,
    labels: &'a Labels,
    /// The labels of its Namespace; `None` when cluster-scoped.
    namespace_labels: Option<&'a Labels>,
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// A Kubernetes label selector (`matchLabels` and `matchExpressions`) against `labels`; `{}`
/// matches everything.
pub fn selector_matches(selector: &Value, labels: &Labels) -> bool {
    let match_labels = selector["matchLabels"].as_object().into_iter().flatten();
    let labelled = match_labels
        .into_iter()
        .all(|(key, value)| labels.get(key).map(String::as_str) == value.as_str());
    labelled
        && selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values = strings(&e["values"]);
            let value = labels.get(key).map(String::as_str);
            match e["operator"].as_str() {
                Some("In") => value.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => value.is_none_or(|v| !values.contains(&v)),
                Some("Exists") => value.is_some(),
                Some("DoesNotExist") => value.is_none(),
                _ => false,
            }
        })
}

/// A list criterion: passes when the list is absent or empty, holds `*`, or holds `value`.
fn listed(list: &Value, value: &str) -> bool {
    let list = strings(list);
    list.is_empty() || list.contains(&"*") || list.contains(&value)
}

/// Whether one `downsync` clause matches (docs/upstream-behaviour.md#selecting-objects).
fn clause_matches(clause: &Value, object: &Facts) -> bool {
    let group = clause["apiGroup"].as_str().is_none_or(|g| g == object.group);
    let object_selectors = clause["objectSelectors"].as_array().map_or(&[][..], Vec::as_slice);
    let namespace_selectors = clause["namespaceSelectors"].as_array().map_or(&[][..], Vec::as_slice);
    let is_empty = |s: &Value| {
        s.as_object().is_none_or(|m| {
            m.values()
                .all(|v| v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty()))
        })
    };
    group
        && listed(&clause["resources"], object.resource)
        && listed(&clause["namespaces"], object.namespace)
        && listed(&clause["objectNames"], object.name)
        && (object_selectors.is_empty() || object_selectors.iter().any(|s| selector_matches(s, object.labels)))
        && (namespace_selectors.is_empty()
            || namespace_selectors.iter().any(is_empty)
            || object
                .namespace_labels
                .is_some_and(|labels| namespace_selectors.iter().any(|s| selector_matches(s, labels))))
}

/// What `policy` asks for `object`, if any of its clauses selects it.
fn policy_selects(policy: &Value, object: &Facts) -> Option<Modulation> {
    let matching: Vec<&Value> = policy["spec"]["downsync"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| clause_matches(c, object))
        .collect();
    let flag = |c: &&Value, field: &str| c[field].as_bool().unwrap_or(false);
    (!matching.is_empty()).then(|| Modulation {
        create_only: matching.iter().any(|c| flag(c, "createOnly")),
        singleton: matching.iter().any(|c| flag(c, "wantSingletonReportedState")),
        multi_wec: matching.iter().any(|c| flag(c, "wantMultiWECReportedState")),
    })
}

/// The WECs `policy` sends to: those matching any of its cluster selectors.
fn destinations(policy: &Value, wecs: &[(String, Labels)]) -> BTreeSet<String> {
    let selectors = policy["spec"]["clusterSelectors"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    wecs.iter()
        .filter(|(_, labels)| selectors.iter().any(|s| selector_matches(s, labels)))
        .map(|(wec, _)| wec.clone())
        .collect()
}

/// Removes the field at a CustomTransform path (`$` then `.name` or `["name"]` steps) if there.
fn remove_path(object: &mut Value, path: &str) {
    let mut steps = Vec::new();
    let mut rest = path.strip_prefix('$').unwrap_or_default();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("[\"") {
            let Some((step, after)) = after.split_once("\"]") else {
                return;
            };
            steps.push(step);
            rest = after;
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            steps.push(&after[..end]);
            rest = &after[end..];
        } else {
            return;
        }
    }
    let Some((last, parents)) = steps.split_last() else {
        return;
    };
    let mut at = object;
    for step in parents {
        match at.get_mut(*step) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(map) = at.as_object_mut() {
        map.remove(*last);
    }
}

/// Expands `{{.property}}` in every string of `value` (the only template form the test
/// writes); false when a property is missing (an error: templates run with `missingkey=error`).
fn expand(value: &mut Value, properties: &Labels) -> bool {
    match value {
        Value::String(s) if s.contains("{{") => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("{{.") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 3..];
                let end = after.find("}}").unwrap_or(after.len());
                let Some(property) = properties.get(&after[..end]) else {
                    return false;
                };
                out.push_str(property);
                rest = after.get(end + 2..).unwrap_or_default();
            }
            out.push_str(rest);
            *s = out;
            true
        }
        Value::Array(items) => items.iter_mut().all(|v| expand(v, properties)),
        Value::Object(map) => map.values_mut().all(|v| expand(v, properties)),
        _ => true,
    }
}

/// Whether a property name is a Go identifier (only those count).
fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
}

impl Model {
    /// An empty episode; `wecs` are the WECs' ManagedCluster labels as they are.
    pub fn new(names: Names, wecs: [Labels; 2]) -> Model {
        Model {
            names,
            wecs,
            namespaces: BTreeMap::new(),
            used_namespaces: BTreeSet::new(),
            objects: BTreeMap::new(),
            policies: BTreeMap::new(),
            transforms: BTreeMap::new(),
            foreign: BTreeMap::new(),
            incarnations: 0,
        }
    }

    pub fn live_namespaces(&self) -> Vec<u8> {
        self.namespaces.keys().copied().collect()
    }

    /// The next namespace index never used.
    pub fn next_namespace(&self) -> u8 {
        self.used_namespaces.last().map_or(0, |n| n + 1)
    }

    /// Every namespace the episode created, live or deleted.
    pub fn every_namespace(&self) -> Vec<String> {
        self.used_namespaces
            .iter()
            .map(|ns| self.names.namespace(*ns))
            .collect()
    }

    pub fn namespace_labels(&self, ns: u8) -> Option<Labels> {
        self.namespaces.get(&ns).cloned()
    }

    pub fn object(&self, kind: Kind, ns: u8, name: u8) -> Option<&Object> {
        self.objects.get(&(kind, ns, name))
    }

    pub fn objects(&self) -> Vec<(Kind, u8, u8, State)> {
        self.objects
            .iter()
            .map(|((kind, ns, name), o)| (*kind, *ns, *name, o.state.clone()))
            .collect()
    }

    pub fn policies(&self) -> Vec<u8> {
        self.policies.keys().copied().collect()
    }

    pub fn transforms(&self) -> Vec<u8> {
        self.transforms.keys().copied().collect()
    }

    /// The foreign works' (index, mailbox, name).
    pub fn foreign_works(&self) -> Vec<(u8, String, String)> {
        self.foreign
            .iter()
            .map(|(work, f)| {
                (
                    *work,
                    WECS[usize::from(f.wec) % 2].to_string(),
                    self.names.foreign_work(*work, f.named_after),
                )
            })
            .collect()
    }

    pub fn wec_has_label(&self, wec: u8, key: u8) -> bool {
        self.wecs[usize::from(wec) % 2].contains_key(&self.names.wec_label(key))
    }

    /// `op` as the writes the WDS sees, one kubectl command each: an imperative object's change
    /// is a `kubectl label`, an `annotate` and a `patch`, and the hub may deliver what lies
    /// between them.
    pub fn writes(&self, op: &Op) -> Vec<Op> {
        let Op::Update { kind, ns, name, state } = op else {
            return vec![op.clone()];
        };
        let Some(old) = self.object(*kind, *ns, *name).filter(|o| o.style == Style::Imperative) else {
            return vec![op.clone()];
        };
        let labelled = State {
            labels: state.labels.clone(),
            ..old.state.clone()
        };
        let annotated = State {
            annotations: state.annotations.clone(),
            ..labelled.clone()
        };
        [labelled, annotated, state.clone()]
            .into_iter()
            .map(|state| Op::Update {
                kind: *kind,
                ns: *ns,
                name: *name,
                state,
            })
            .collect()
    }

    /// Applies `op`; false (and nothing changed) when it cannot apply now (an object that is
    /// not there, a label already so): a list shrunk to a part still runs.
    pub fn apply(&mut self, op: &Op) -> bool {
        match op {
            Op::CreateNamespace { ns, labels } => {
                if *ns >= NAMESPACES || self.used_namespaces.contains(ns) {
                    return false;
                }
                self.used_namespaces.insert(*ns);
                self.namespaces.insert(*ns, labels.clone());
            }
            Op::LabelNamespace { ns, labels } => match self.namespaces.get_mut(ns) {
                Some(old) if old != labels => *old = labels.clone(),
                _ => return false,
            },
            Op::DeleteNamespace { ns } => {
                if self.namespaces.remove(ns).is_none() {
                    return false;
                }
                self.objects.retain(|(_, in_ns, _), _| in_ns != ns);
            }
            Op::Create {
                kind,
                ns,
                name,
                style,
                state,
            } => {
                if !self.namespaces.contains_key(ns) || self.objects.contains_key(&(*kind, *ns, *name)) {
                    return false;
                }
                self.incarnations += 1;
                let object = Object {
                    style: *style,
                    state: state.clone(),
                    incarnation: self.incarnations,
                };
                self.objects.insert((*kind, *ns, *name), object);
            }
            Op::Update { kind, ns, name, state } => match self.objects.get_mut(&(*kind, *ns, *name)) {
                Some(object) if object.state != *state => object.state = state.clone(),
                _ => return false,
            },
            Op::Delete { kind, ns, name } => {
                if self.objects.remove(&(*kind, *ns, *name)).is_none() {
                    return false;
                }
            }
            Op::ApplyPolicy { policy, spec } => {
                self.policies.insert(*policy, spec.clone());
            }
            Op::DeletePolicy { policy } => {
                if self.policies.remove(policy).is_none() {
                    return false;
                }
            }
            Op::ApplyTransform { transform, remove } => {
                self.transforms.insert(*transform, remove.clone());
            }
            Op::DeleteTransform { transform } => {
                if self.transforms.remove(transform).is_none() {
                    return false;
                }
            }
            Op::LabelWec { wec, key, on } => {
                if self.wec_has_label(*wec, *key) == *on {
                    return false;
                }
                let (labels, key) = (&mut self.wecs[usize::from(*wec) % 2], self.names.wec_label(*key));
                if *on {
                    labels.insert(key, "on".to_string());
                } else {
                    labels.remove(&key);
                }
            }
            Op::ForeignWork { work, wec, named_after } => {
                let name = self.names.foreign_work(*work, *named_after);
                let taken = self
                    .foreign_works()
                    .iter()
                    .any(|(_, mailbox, n)| *n == name && mailbox == WECS[usize::from(*wec) % 2]);
                if self.foreign.contains_key(work) || taken {
                    return false;
                }
                let foreign = ForeignWork {
                    wec: *wec,
                    named_after: *named_after,
                };
                self.foreign.insert(*work, foreign);
            }
        }
        true
    }

    /// What the stack must show for this model.
    pub fn expected(&self) -> Expected {
        let names = &self.names;
        let wecs: Vec<(String, Labels)> = WECS
            .iter()
            .map(|w| w.to_string())
            .zip(self.wecs.iter().cloned())
            .collect();
        let mut policies: Vec<(String, Value)> = self
            .policies
            .iter()
            .map(|(i, spec)| (names.policy(*i), manifests::policy(names, *i, spec)))
            .collect();
        policies.push((names.base_policy(), manifests::base_policy(names)));
        let policies: Vec<(String, Value, BTreeSet<String>)> = policies
            .into_iter()
            .map(|(name, policy)| {
                let to = destinations(&policy, &wecs);
                (name, policy, to)
            })
            .collect();
        let transforms: Vec<Value> = self
            .transforms
            .iter()
            .map(|(i, remove)| manifests::transform(names, *i, remove))
            .collect();

        // Every WDS object, as the user wrote it: (key, kind, manifest, namespace index).
        let mut written: Vec<(Key, Value, Option<u8>, u64)> = self
            .namespaces
            .iter()
            .map(|(ns, labels)| {
                let key = Key {
                    kind: Kind::Namespace,
                    namespace: String::new(),
                    name: names.namespace(*ns),
                };
                (key, manifests::namespace(names, *ns, labels), None, 0)
            })
            .collect();
        for ((kind, ns, name), object) in &self.objects {
            let key = Key {
                kind: *kind,
                namespace: names.namespace(*ns),
                name: Names::object(*name),
            };
            let manifest = manifests::object(names, *kind, *ns, *name, &object.state);
            written.push((key, manifest, Some(*ns), object.incarnation));
        }

        let mut expected = Expected::default();
        for wec in WECS {
            expected.wecs.insert(wec.to_string(), BTreeMap::new());
        }
        for (key, mut manifest, ns, incarnation) in written {
            let labels = Projection::of(key.kind, &manifest, Side::Wds).labels;
            let namespace_labels = ns.and_then(|ns| self.namespaces.get(&ns)).map(|l| {
                let mut l = l.clone();
                l.insert(EPISODE_LABEL.to_string(), names.episode.clone());
                l
            });
            let facts = Facts {
                group: key.kind.group(&names.widgets),
                resource: key.kind.resource(),
                namespace: &key.namespace,
                name: &key.name,
                labels: &labels,
                namespace_labels: namespace_labels.as_ref(),
            };
            let selecting: Vec<(&String, Modulation, &BTreeSet<String>)> = policies
                .iter()
                .filter_map(|(name, policy, to)| policy_selects(policy, &facts).map(|m| (name, m, to)))
                .collect();
            // The binding controller labels the object while a policy requests its status.
            for (requested, label) in [
                (selecting.iter().any(|(_, m, _)| m.singleton), SINGLETON_STATUS_LABEL),
                (selecting.iter().any(|(_, m, _)| m.multi_wec), MULTI_WEC_STATUS_LABEL),
            ] {
                if requested {
                    manifest["metadata"]["labels"][label] = "true".into();
                }
            }
            expected
                .wds
                .insert(key.clone(), Projection::of(key.kind, &manifest, Side::Wds));
            expected.incarnations.insert(key.clone(), incarnation);

            let delivered = self.delivered(&key, &manifest, &transforms);
            let mut kept_somewhere = false;
            for (wec, labels) in &wecs {
                let sending: Vec<&(&String, Modulation, &BTreeSet<String>)> =
                    selecting.iter().filter(|(_, _, to)| to.contains(wec)).collect();
                let namespace_there = key.kind == Kind::Namespace
                    || expected.wecs[wec].contains_key(&Key {
                        kind: Kind::Namespace,
                        namespace: String::new(),
                        name: key.namespace.clone(),
                    });
                if sending.is_empty() || !namespace_there {
                    continue;
                }
                let mut properties: Labels = labels
                    .iter()
                    .filter(|(k, _)| is_identifier(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                properties
                    .entry("clusterName".to_string())
                    .or_insert_with(|| wec.clone());
                let mut copy = delivered.clone();
                let expands = copy["metadata"]["annotations"][EXPAND_TEMPLATES] == "true";
                let content = if expands && !expand(&mut copy, &properties) {
                    Content::LastGood
                } else if sending.iter().all(|(_, m, _)| m.create_only) {
                    Content::CreateOnly
                } else {
                    Content::Current
                };
                kept_somewhere |= content != Content::Current;
                let on_wec = OnWec {
                    projection: Projection::of(key.kind, &copy, Side::Wec),
                    content,
                    reported: true,
                    holders: sending.iter().map(|(name, _, _)| (*name).clone()).collect(),
                    create_only_sender: sending.iter().any(|(_, m, _)| m.create_only),
                };
                expected
                    .wecs
                    .get_mut(wec)
                    .expect("every WEC")
                    .insert(key.clone(), on_wec);
            }
            if matches!(key.kind, Kind::Deployment | Kind::Job) && !kept_somewhere {
                // Policies asking for a kind of return, and the union of their WECs.
                let asking = |flag: fn(&Modulation) -> bool| -> Option<BTreeSet<String>> {
                    let asking: Vec<_> = selecting.iter().filter(|(_, m, _)| flag(m)).collect();
                    (!asking.is_empty()).then(|| asking.iter().flat_map(|(_, _, to)| to.iter().cloned()).collect())
                };
                let (singleton, multi) = (asking(|m| m.singleton), asking(|m| m.multi_wec));
                if let Some(status) = status_return(singleton.as_ref(), multi.as_ref(), key.kind) {
                    expected.statuses.insert(key, status);
                }
            }
        }
        for (work, mailbox, name) in self.foreign_works() {
            let labels = Labels::from([(FOREIGN_LABEL.to_string(), names.episode.clone())]);
            expected.foreign_works.insert((mailbox.clone(), name.clone()), labels);
            for object in manifests::foreign_objects(names, work) {
                let kind = if object["kind"] == "Namespace" {
                    Kind::Namespace
                } else {
                    Kind::ConfigMap
                };
                let key = Key {
                    kind,
                    namespace: object["metadata"]["namespace"].as_str().unwrap_or_default().to_string(),
                    name: object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                };
                let on_wec = OnWec {
                    projection: Projection::of(kind, &object, Side::Wec),
                    content: Content::Current,
                    reported: false,
                    holders: BTreeSet::from([format!("foreign {name}")]),
                    create_only_sender: false,
                };
                expected.wecs.get_mut(&mailbox).expect("every WEC").insert(key, on_wec);
            }
        }
        expected
    }

    /// The object as it leaves for every WEC: what the transforms leave of it (templates aside).
    fn delivered(&self, key: &Key, manifest: &Value, transforms: &[Value]) -> Value {
        let mut copy = manifest.clone();
        if let Some(annotations) = copy["metadata"]["annotations"].as_object_mut() {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        let group = key.kind.group(&self.names.widgets);
        for transform in transforms {
            if transform["spec"]["apiGroup"] == group && transform["spec"]["resource"] == key.kind.resource() {
                for path in strings(&transform["spec"]["remove"]) {
                    remove_path(&mut copy, path);
                }
            }
        }
        copy
    }
}

/// docs/upstream-behaviour.md#status-return, from the union of the WECs of the policies asking
/// for each kind of return (`None`: no policy asks); `None` where the test does not check
/// (several WECs for a Job: its combination is not modelled).
fn status_return(
    singleton: Option<&BTreeSet<String>>,
    multi: Option<&BTreeSet<String>>,
    kind: Kind,
) -> Option<StatusReturn> {
    let (from, combine) = match (singleton, multi) {
        (Some(singleton), Some(multi)) => {
            let both: BTreeSet<String> = singleton.union(multi).cloned().collect();
            let combine = both.len() != 1;
            (both, combine)
        }
        (Some(singleton), None) => (singleton.clone(), false),
        (None, Some(multi)) => (multi.clone(), multi.len() > 1),
        (None, None) => return Some(StatusReturn::Clear),
    };
    match (from.len(), combine) {
        (1, _) => from.into_iter().next().map(StatusReturn::Copy),
        (0, _) | (_, false) => Some(StatusReturn::Clear),
        (_, true) => (kind == Kind::Deployment).then(|| StatusReturn::Combine(from.into_iter().collect())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::convergence::ops::{Clause, ClusterSelector, Scope, Selector};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn facts<'a>(namespace: &'a str, name: &'a str, l: &'a Labels, ns: Option<&'a Labels>) -> Facts<'a> {
        Facts {
            group: "",
            resource: if namespace.is_empty() {
                "namespaces"
            } else {
                "configmaps"
            },
            namespace,
            name,
            labels: l,
            namespace_labels: ns,
        }
    }

    #[test]
    fn clauses_select_as_documented() {
        let app = labels(&[("app", "x")]);
        let team = labels(&[("team", "a")]);
        let cm = facts("ns", "cm", &app, Some(&team));
        let namespace = facts("", "ns", &team, None);
        let cases = [
            (json!({"namespaces": ["ns"]}), true, false),
            (json!({"namespaces": ["*"]}), true, true),
            (json!({"namespaces": [""]}), false, true),
            (json!({"resources": ["*"], "objectNames": ["cm"]}), true, false),
            (
                json!({"objectSelectors": [{"matchLabels": {"app": "x"}}, {"matchLabels": {"no": "pe"}}]}),
                true,
                false,
            ),
            (
                json!({"objectSelectors": [{"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}]}),
                false,
                true,
            ),
            (
                json!({"namespaceSelectors": [{"matchLabels": {"team": "a"}}]}),
                true,
                false,
            ),
            // A `{}` namespace selector passes every object, cluster-scoped ones too.
            (json!({"namespaceSelectors": [{}]}), true, true),
            (json!({"apiGroup": "apps"}), false, false),
            (json!({"apiGroup": "", "resources": ["namespaces"]}), false, true),
        ];
        for (clause, selects_cm, selects_namespace) in cases {
            assert_eq!(clause_matches(&clause, &cm), selects_cm, "{clause} on the ConfigMap");
            assert_eq!(
                clause_matches(&clause, &namespace),
                selects_namespace,
                "{clause} on the Namespace"
            );
        }
    }

    #[test]
    fn modulation_folds_over_the_matching_clauses_only() {
        let app = labels(&[("app", "x")]);
        let cm = facts("ns", "cm", &app, None);
        let policy = json!({"spec": {"downsync": [
            {"namespaces": ["ns"], "createOnly": true},
            {"objectNames": ["cm"], "wantSingletonReportedState": true},
            {"objectNames": ["other"], "wantMultiWECReportedState": true}]}});
        let expected = Modulation {
            create_only: true,
            singleton: true,
            multi_wec: false,
        };
        assert_eq!(policy_selects(&policy, &cm), Some(expected));
        assert_eq!(
            policy_selects(&json!({"spec": {"downsync": [{"namespaces": ["other"]}]}}), &cm),
            None
        );
    }

    #[test]
    fn clusters_are_chosen_by_any_selector_and_none_without_selectors() {
        let wecs = vec![
            ("c1".to_string(), labels(&[("name", "c1"), ("k", "on")])),
            ("c2".to_string(), labels(&[("name", "c2")])),
        ];
        let to = |selectors: Value| destinations(&json!({"spec": {"clusterSelectors": selectors}}), &wecs);
        assert_eq!(to(json!([])), BTreeSet::new());
        assert_eq!(to(json!([{}])).len(), 2);
        assert_eq!(
            to(json!([{"matchLabels": {"name": "c2"}}, {"matchExpressions": [{"key": "k", "operator": "Exists"}]}]))
                .len(),
            2
        );
        assert_eq!(to(json!([{"matchLabels": {"name": "c2", "k": "on"}}])), BTreeSet::new());
    }

    #[test]
    fn status_comes_from_one_wec_or_the_sum_of_several() {
        let set = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let (a, b, ab, none) = (set(&["a"]), set(&["b"]), set(&["a", "b"]), set(&[]));
        let copy = |w: &str| Some(StatusReturn::Copy(w.to_string()));
        let combined = Some(StatusReturn::Combine(vec!["a".into(), "b".into()]));
        let d = Kind::Deployment;
        assert_eq!(status_return(Some(&a), None, d), copy("a"));
        assert_eq!(status_return(Some(&ab), None, d), Some(StatusReturn::Clear));
        assert_eq!(status_return(None, Some(&b), d), copy("b"));
        assert_eq!(status_return(None, Some(&ab), d), combined);
        assert_eq!(status_return(Some(&a), Some(&a), d), copy("a"));
        assert_eq!(status_return(Some(&a), Some(&b), d), combined);
        // Both kinds asked for: over both sets together, even when one policy sends nowhere.
        assert_eq!(status_return(Some(&ab), Some(&none), d), combined);
        assert_eq!(status_return(Some(&none), None, d), Some(StatusReturn::Clear));
        assert_eq!(status_return(None, None, d), Some(StatusReturn::Clear));
        assert_eq!(status_return(None, Some(&ab), Kind::Job), None);
    }

    #[test]
    fn transforms_remove_their_paths_and_templates_expand() {
        let mut object = json!({"metadata": {"annotations": {"note": "x"}}, "spec": {"size": 1, "nested": {"inner": "i", "keep": "k"}}});
        for path in [
            "$.spec.nested.inner",
            r#"$.spec["size"]"#,
            "$.spec.absent.deeper",
            "$.metadata.annotations.note",
        ] {
            remove_path(&mut object, path);
        }
        assert_eq!(
            object,
            json!({"metadata": {"annotations": {}}, "spec": {"nested": {"keep": "k"}}})
        );
        let mut data = json!({"k": "{{.clusterName}}", "r": "in {{.region}}!", "plain": "x"});
        let properties = labels(&[("clusterName", "c1"), ("region", "east")]);
        assert!(expand(&mut data, &properties));
        assert_eq!(data, json!({"k": "c1", "r": "in east!", "plain": "x"}));
        assert!(
            !expand(&mut json!({"k": "{{.nosuch}}"}), &properties),
            "missingkey=error"
        );
    }

    fn names() -> Names {
        Names {
            episode: "cv-1-0".into(),
            widgets: "w.example.com".into(),
        }
    }

    fn wecs() -> [Labels; 2] {
        [
            labels(&[("name", "cluster1"), ("region", "east")]),
            labels(&[("name", "cluster2"), ("region", "west")]),
        ]
    }

    fn clause(scope: Scope) -> Clause {
        Clause::over(scope)
    }

    #[test]
    fn a_model_sends_selected_objects_with_their_namespace_and_expands_per_wec() {
        let mut model = Model::new(names(), wecs());
        let state = State {
            labels: labels(&[("color", "red")]),
            annotations: labels(&[(EXPAND_TEMPLATES, "true")]),
            variant: 2,
        };
        let ops = [
            Op::CreateNamespace {
                ns: 0,
                labels: Labels::new(),
            },
            Op::Create {
                kind: Kind::ConfigMap,
                ns: 0,
                name: 0,
                style: Style::Imperative,
                state: state.clone(),
            },
            Op::ApplyPolicy {
                policy: 0,
                spec: PolicySpec {
                    clusters: vec![ClusterSelector::Labelled(0)],
                    clauses: vec![Clause {
                        singleton: true,
                        ..clause(Scope::Objects(Some(Selector::In("color".into(), vec!["red".into()]))))
                    }],
                },
            },
            Op::LabelWec {
                wec: 1,
                key: 0,
                on: true,
            },
        ];
        for op in &ops {
            assert!(model.apply(op), "{op:?}");
        }
        assert!(!model.apply(&ops[3]), "the label is there already");
        let failing = Op::Update {
            kind: Kind::ConfigMap,
            ns: 0,
            name: 0,
            state: State { variant: 4, ..state },
        };
        let mut failed = model.clone();
        assert!(failed.apply(&failing));
        let cm = Key {
            kind: Kind::ConfigMap,
            namespace: "cv-1-0-n0".into(),
            name: "o0".into(),
        };
        assert_eq!(failed.expected().wecs["cluster2"][&cm].content, Content::LastGood);
        let expected = model.expected();
        let cm = Key {
            kind: Kind::ConfigMap,
            namespace: "cv-1-0-n0".into(),
            name: "o0".into(),
        };
        let ns = Key {
            kind: Kind::Namespace,
            namespace: String::new(),
            name: "cv-1-0-n0".into(),
        };
        assert_eq!(
            expected.wecs["cluster1"].keys().collect::<Vec<_>>(),
            [&ns],
            "only the Namespace"
        );
        let on_cluster2 = &expected.wecs["cluster2"][&cm];
        assert_eq!(
            on_cluster2.projection.fields["/data"],
            json!({"k": "cluster2", "r": "in west"})
        );
        assert_eq!(on_cluster2.projection.labels[SINGLETON_STATUS_LABEL], "true");
        assert_eq!(expected.wds[&cm].labels[SINGLETON_STATUS_LABEL], "true");
        assert_eq!(
            expected.wds[&cm].fields["/data"],
            json!({"k": "{{.clusterName}}", "r": "in {{.region}}"})
        );

        // Deleting the namespace takes its objects with it.
        assert!(model.apply(&Op::DeleteNamespace { ns: 0 }));
        assert!(model.objects().is_empty());
        assert!(
            !model.apply(&Op::CreateNamespace {
                ns: 0,
                labels: Labels::new()
            }),
            "never reused"
        );
    }

    #[test]
    fn an_imperative_change_is_three_writes_and_an_apply_one() {
        let mut model = Model::new(names(), wecs());
        let state = |color: &str, note: &str, variant| State {
            labels: labels(&[("color", color)]),
            annotations: labels(&[("note", note)]),
            variant,
        };
        assert!(model.apply(&Op::CreateNamespace {
            ns: 0,
            labels: Labels::new()
        }));
        for (name, style) in [(0, Style::Imperative), (1, Style::ClientSideApply)] {
            let create = Op::Create {
                kind: Kind::ConfigMap,
                ns: 0,
                name,
                style,
                state: state("red", "x", 0),
            };
            assert!(model.apply(&create));
        }
        let update = |name| Op::Update {
            kind: Kind::ConfigMap,
            ns: 0,
            name,
            state: state("blue", "y", 1),
        };
        let steps: Vec<State> = model
            .writes(&update(0))
            .into_iter()
            .map(|op| match op {
                Op::Update { state, .. } => state,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            steps,
            [state("blue", "x", 0), state("blue", "y", 0), state("blue", "y", 1)]
        );
        assert_eq!(model.writes(&update(1)), [update(1)]);
    }

    #[test]
    fn an_object_stays_frozen_only_while_every_policy_sending_it_is_create_only() {
        let mut model = Model::new(names(), wecs());
        let both = vec![ClusterSelector::Named(0)];
        let ops = [
            Op::CreateNamespace {
                ns: 0,
                labels: Labels::new(),
            },
            Op::Create {
                kind: Kind::Widget,
                ns: 0,
                name: 1,
                style: Style::ServerSideApply,
                state: State::default(),
            },
            Op::ApplyPolicy {
                policy: 0,
                spec: PolicySpec {
                    clusters: both.clone(),
                    clauses: vec![Clause {
                        create_only: true,
                        ..clause(Scope::Namespaces(vec![0]))
                    }],
                },
            },
            Op::ApplyTransform {
                transform: 0,
                remove: vec![Removal::Secret],
            },
        ];
        for op in &ops {
            assert!(model.apply(op));
        }
        let widget = Key {
            kind: Kind::Widget,
            namespace: "cv-1-0-n0".into(),
            name: "o1".into(),
        };
        let expected = model.expected();
        assert_eq!(expected.wecs["cluster1"][&widget].content, Content::CreateOnly);
        assert_eq!(
            expected.wecs["cluster1"][&widget].projection.fields["/spec"],
            json!({"size": 0, "nested": {"inner": "i0", "keep": "k"}})
        );
        assert_eq!(expected.wds[&widget].fields["/spec"]["secret"], "s0");
        let plain = Op::ApplyPolicy {
            policy: 1,
            spec: PolicySpec {
                clusters: both,
                clauses: vec![clause(Scope::Objects(None))],
            },
        };
        assert!(model.apply(&plain));
        let on_wec = &model.expected().wecs["cluster1"][&widget];
        assert_eq!(on_wec.content, Content::Current);
        assert_eq!(on_wec.holders.len(), 2);
    }
}
