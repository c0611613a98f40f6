//! What users do, as operations on indices (namespace 0, object 1, policy 2, ...), and a seeded
//! generator of batches of them. Operations name indices, not names, so a list of them replays
//! in any episode; they print and parse as JSON, so a failing list can be run again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::names::Kind;
use super::oracle::Model;

pub type Labels = BTreeMap<String, String>;

/// How an object is written for as long as it lives, as different users do: created and then
/// changed with `kubectl label`, `annotate` and `patch`; or always `kubectl apply`; or always
/// `kubectl apply --server-side`. Keeping one way per object keeps what the WDS then holds
/// exactly what the last operation said (mixing them leaves fields to other field managers).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Style {
    Imperative,
    ClientSideApply,
    ServerSideApply,
}

/// What the user wants an object to hold: labels and annotations besides the episode's label,
/// and which of its kind's contents ([`super::manifests::content`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct State {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: Labels,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: Labels,
    pub variant: u8,
}

/// A label selector over the pool of labels the generator uses.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// What keeps a clause to the episode's objects: every clause has one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// `namespaces`: these of the episode's namespaces.
    Namespaces(Vec<u8>),
    /// `objectSelectors`: the episode's label, and the selector if any.
    Objects(Option<Selector>),
    /// `namespaceSelectors`: the episode's label on the Namespace, and the selector if any.
    NamespaceLabels(Option<Selector>),
}

/// One `downsync` clause.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Clause {
    pub scope: Scope,
    /// `apiGroup`: the group of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<Kind>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<Kind>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_names: Vec<u8>,
    /// An `objectSelectors` entry besides the scope (not with [`Scope::Objects`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_selector: Option<Selector>,
    #[serde(default)]
    pub create_only: bool,
    #[serde(default)]
    pub singleton: bool,
    #[serde(default)]
    pub multi_wec: bool,
}

impl Clause {
    /// A clause of `scope` alone: every kind there, no selector or modulation.
    pub fn over(scope: Scope) -> Clause {
        Clause {
            scope,
            api_group: None,
            resources: vec![],
            object_names: vec![],
            object_selector: None,
            create_only: false,
            singleton: false,
            multi_wec: false,
        }
    }
}

/// One `clusterSelectors` entry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClusterSelector {
    /// `name: <WEC>`.
    Named(u8),
    /// The episode's WEC label `key` with value `on`.
    Labelled(u8),
    /// The episode's WEC label `key`, any value.
    Exists(u8),
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PolicySpec {
    pub clusters: Vec<ClusterSelector>,
    pub clauses: Vec<Clause>,
}

/// A field a CustomTransform removes from the run's widgets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Removal {
    /// `$.spec.secret`
    Secret,
    /// `$.spec.nested.inner`
    NestedInner,
    /// `$.spec["size"]`
    Size,
    /// `$.metadata.annotations.note`: metadata.
    NoteAnnotation,
}

/// One user operation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    CreateNamespace {
        ns: u8,
        #[serde(default)]
        labels: Labels,
    },
    /// `kubectl label namespace`: the namespace's labels become `labels`.
    LabelNamespace {
        ns: u8,
        labels: Labels,
    },
    DeleteNamespace {
        ns: u8,
    },
    Create {
        kind: Kind,
        ns: u8,
        name: u8,
        style: Style,
        state: State,
    },
    /// The object's way of writing ([`Style`]) brings it to `state`.
    Update {
        kind: Kind,
        ns: u8,
        name: u8,
        state: State,
    },
    Delete {
        kind: Kind,
        ns: u8,
        name: u8,
    },
    ApplyPolicy {
        policy: u8,
        spec: PolicySpec,
    },
    DeletePolicy {
        policy: u8,
    },
    ApplyTransform {
        transform: u8,
        remove: Vec<Removal>,
    },
    DeleteTransform {
        transform: u8,
    },
    /// `kubectl label managedcluster`: the episode's label `key` on WEC `wec` set (`on`) or removed.
    LabelWec {
        wec: u8,
        key: u8,
        on: bool,
    },
    /// An admin's ManifestWork without KubeStellar labels in `wec`'s mailbox, holding a
    /// Namespace and a ConfigMap; named after the episode's policy `named_after` if set.
    ForeignWork {
        work: u8,
        wec: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        named_after: Option<u8>,
    },
}

/// What an operation is about: the shrinker drops every operation on one subject at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Namespace(u8),
    Object(Kind, u8, u8),
    Policy(u8),
    Transform(u8),
    WecLabel(u8, u8),
    ForeignWork(u8),
}

impl Op {
    pub fn subject(&self) -> Subject {
        match self {
            Op::CreateNamespace { ns, .. } | Op::LabelNamespace { ns, .. } | Op::DeleteNamespace { ns } => {
                Subject::Namespace(*ns)
            }
            Op::Create { kind, ns, name, .. } | Op::Update { kind, ns, name, .. } | Op::Delete { kind, ns, name } => {
                Subject::Object(*kind, *ns, *name)
            }
            Op::ApplyPolicy { policy, .. } | Op::DeletePolicy { policy } => Subject::Policy(*policy),
            Op::ApplyTransform { transform, .. } | Op::DeleteTransform { transform } => Subject::Transform(*transform),
            Op::LabelWec { wec, key, .. } => Subject::WecLabel(*wec, *key),
            Op::ForeignWork { work, .. } => Subject::ForeignWork(*work),
        }
    }
}

/// Bounds of what one episode holds: indices run below these.
pub const NAMESPACES: u8 = 6;
pub const LIVE_NAMESPACES: usize = 3;
pub const OBJECT_NAMES: u8 = 3;
pub const POLICIES: u8 = 4;
pub const TRANSFORMS: u8 = 2;
pub const WEC_LABELS: u8 = 2;
pub const FOREIGN_WORKS: u8 = 2;
/// Operations per batch, at most.
pub const BATCH: usize = 8;

/// The pool of user labels and annotations.
pub const LABEL_POOL: [(&str, [&str; 2]); 2] = [("color", ["red", "blue"]), ("tier", ["a", "b"])];
pub const NOTE: &str = "note";
/// The annotation asking for per-WEC template expansion (ConfigMaps get it sometimes).
pub const EXPAND_TEMPLATES: &str = "control.kubestellar.io/expand-templates";

/// A seeded generator of batches: the same seed and model give the same batches.
pub struct Generator {
    rng: fastrand::Rng,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// A batch of 1 to [`BATCH`] operations, each valid after the ones before it.
    pub fn batch(&mut self, model: &Model) -> Vec<Op> {
        let mut model = model.clone();
        let n = self.rng.usize(1..=BATCH);
        let mut ops = Vec::with_capacity(n);
        while ops.len() < n {
            // Policies can always be applied: this ends.
            if let Some(op) = self.op(&model)
                && model.apply(&op)
            {
                ops.push(op);
            }
        }
        ops
    }

    fn chance(&mut self, percent: u8) -> bool {
        self.rng.u8(0..100) < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.rng.usize(0..items.len())].clone())
    }

    /// One operation, or none when the one drawn cannot apply now.
    fn op(&mut self, model: &Model) -> Option<Op> {
        let live = model.live_namespaces();
        if live.is_empty()
            && let Some(op) = self.create_namespace(model)
        {
            return Some(op);
        }
        match self.rng.u8(0..100) {
            0..30 => {
                let (kind, ns, name) = (self.kind(), self.pick(&live)?, self.rng.u8(0..OBJECT_NAMES));
                if model.object(kind, ns, name).is_some() {
                    return None;
                }
                let style = self.pick(&[Style::Imperative, Style::ClientSideApply, Style::ServerSideApply])?;
                let state = self.state(kind);
                Some(Op::Create {
                    kind,
                    ns,
                    name,
                    style,
                    state,
                })
            }
            30..55 => {
                let (kind, ns, name, _) = self.pick(&model.objects())?;
                let state = self.state(kind);
                Some(Op::Update { kind, ns, name, state })
            }
            55..62 => {
                let (kind, ns, name, _) = self.pick(&model.objects())?;
                Some(Op::Delete { kind, ns, name })
            }
            62..67 => self.create_namespace(model),
            67..71 => {
                let ns = self.pick(&live)?;
                model.namespace_labels(ns)?;
                let labels = self.labels();
                Some(Op::LabelNamespace { ns, labels })
            }
            71..73 => Some(Op::DeleteNamespace { ns: self.pick(&live)? }),
            73..84 => {
                let policy = self.rng.u8(0..POLICIES);
                let spec = self.policy(model);
                Some(Op::ApplyPolicy { policy, spec })
            }
            84..87 => Some(Op::DeletePolicy {
                policy: self.pick(&model.policies())?,
            }),
            87..91 => {
                let transform = self.rng.u8(0..TRANSFORMS);
                let pool = [
                    Removal::Secret,
                    Removal::NestedInner,
                    Removal::Size,
                    Removal::NoteAnnotation,
                ];
                let remove = pool.into_iter().filter(|_| self.chance(40)).collect();
                Some(Op::ApplyTransform { transform, remove })
            }
            91..92 => Some(Op::DeleteTransform {
                transform: self.pick(&model.transforms())?,
            }),
            92..97 => Some(Op::LabelWec {
                wec: self.rng.u8(0..2),
                key: self.rng.u8(0..WEC_LABELS),
                on: self.chance(60),
            }),
            _ => {
                let work = self.rng.u8(0..FOREIGN_WORKS);
                // Half are named as upstream's hub names a policy's first ManifestWork (issue
                // 72 defect 2: the hub took such a ManifestWork over).
                let named_after = self.chance(50).then(|| self.rng.u8(0..POLICIES));
                Some(Op::ForeignWork {
                    work,
                    wec: self.rng.u8(0..2),
                    named_after,
                })
            }
        }
    }

    fn create_namespace(&mut self, model: &Model) -> Option<Op> {
        let ns = model.next_namespace();
        (ns < NAMESPACES && model.live_namespaces().len() < LIVE_NAMESPACES).then(|| Op::CreateNamespace {
            ns,
            labels: self.labels(),
        })
    }

    fn kind(&mut self) -> Kind {
        Kind::WORKLOADS[self.rng.usize(0..Kind::WORKLOADS.len())]
    }

    /// Labels from the pool (a change may drop any of `old`'s).
    fn labels(&mut self) -> Labels {
        let mut labels = Labels::new();
        for (key, values) in LABEL_POOL {
            if self.chance(50) {
                labels.insert(key.to_string(), self.pick(&values).unwrap_or_default().to_string());
            }
        }
        labels
    }

    /// An object's labels, annotations and content (a change may drop any label or annotation).
    fn state(&mut self, kind: Kind) -> State {
        let labels = self.labels();
        let mut annotations = Labels::new();
        if self.chance(50) {
            annotations.insert(NOTE.to_string(), self.pick(&["x", "y"]).unwrap_or_default().to_string());
        }
        if kind == Kind::ConfigMap && self.chance(30) {
            annotations.insert(EXPAND_TEMPLATES.to_string(), "true".to_string());
        }
        State {
            labels,
            annotations,
            variant: self.rng.u8(0..super::manifests::variants(kind)),
        }
    }

    fn selector(&mut self) -> Selector {
        let (key, values) = LABEL_POOL[self.rng.usize(0..LABEL_POOL.len())];
        let value = self.pick(&values).unwrap_or_default().to_string();
        match self.rng.u8(0..5) {
            0 => Selector::Equals(key.to_string(), value),
            1 => Selector::In(key.to_string(), vec![value]),
            2 => Selector::NotIn(key.to_string(), vec![value]),
            3 => Selector::Exists(key.to_string()),
            _ => Selector::DoesNotExist(key.to_string()),
        }
    }

    fn policy(&mut self, model: &Model) -> PolicySpec {
        let clusters = (0..self.rng.usize(1..=2))
            .map(|_| match self.rng.u8(0..5) {
                0 | 1 => ClusterSelector::Named(self.rng.u8(0..2)),
                2 | 3 => ClusterSelector::Labelled(self.rng.u8(0..WEC_LABELS)),
                _ => ClusterSelector::Exists(self.rng.u8(0..WEC_LABELS)),
            })
            .collect();
        let clauses = (0..self.rng.usize(1..=2)).map(|_| self.clause(model)).collect();
        PolicySpec { clusters, clauses }
    }

    fn clause(&mut self, model: &Model) -> Clause {
        // Namespaces to come may be named too.
        let named = (model.next_namespace() + 1).min(NAMESPACES);
        let scope = match self.rng.u8(0..3) {
            0 => Scope::Namespaces((0..self.rng.usize(1..=2)).map(|_| self.rng.u8(0..named)).collect()),
            1 => Scope::Objects(self.chance(40).then(|| self.selector())),
            _ => Scope::NamespaceLabels(self.chance(40).then(|| self.selector())),
        };
        let object_selector = (!matches!(scope, Scope::Objects(_)) && self.chance(25)).then(|| self.selector());
        let mut kinds = Kind::WORKLOADS.to_vec();
        kinds.push(Kind::Namespace);
        let resources = if self.chance(50) {
            (0..self.rng.usize(1..=2)).filter_map(|_| self.pick(&kinds)).collect()
        } else {
            Vec::new()
        };
        Clause {
            scope,
            api_group: self.chance(15).then(|| self.kind()),
            resources,
            object_names: if self.chance(20) {
                vec![self.rng.u8(0..OBJECT_NAMES)]
            } else {
                Vec::new()
            },
            object_selector,
            create_only: self.chance(15),
            singleton: self.chance(25),
            multi_wec: self.chance(15),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convergence::names::Names;

    fn names() -> Names {
        Names {
            episode: "cv-1-0".into(),
            widgets: "cv-1.example.com".into(),
        }
    }

    fn wecs() -> [Labels; 2] {
        [1, 2].map(|n| Labels::from([("name".to_string(), format!("cluster{n}"))]))
    }

    fn batches(seed: u64, n: usize) -> Vec<Vec<Op>> {
        let mut model = Model::new(names(), wecs());
        let mut generator = Generator::new(seed);
        (0..n)
            .map(|_| {
                let batch = generator.batch(&model);
                for op in &batch {
                    assert!(model.apply(op), "{op:?} was generated invalid");
                }
                batch
            })
            .collect()
    }

    #[test]
    fn a_seed_gives_the_same_operations() {
        assert_eq!(batches(7, 30), batches(7, 30));
        assert_ne!(batches(7, 30), batches(8, 30));
    }

    #[test]
    fn operations_print_and_parse_back() {
        let ops = batches(3, 20);
        let text = serde_json::to_string(&ops).unwrap();
        assert_eq!(serde_json::from_str::<Vec<Vec<Op>>>(&text).unwrap(), ops);
    }

    #[test]
    fn changes_drop_labels_and_annotations_and_reach_jobs() {
        let mut model = Model::new(names(), wecs());
        let mut generator = Generator::new(11);
        let (mut dropped, mut job_updates, mut note_removals) = (0, 0, 0);
        for _ in 0..200 {
            for op in generator.batch(&model) {
                match &op {
                    Op::Update { kind, ns, name, state } => {
                        let old = model.object(*kind, *ns, *name).unwrap();
                        let lost = |old: &Labels, new: &Labels| old.keys().any(|k| !new.contains_key(k));
                        if lost(&old.state.labels, &state.labels) || lost(&old.state.annotations, &state.annotations) {
                            dropped += 1;
                        }
                        job_updates += usize::from(*kind == Kind::Job);
                    }
                    Op::ApplyTransform { remove, .. } => {
                        note_removals += usize::from(remove.contains(&Removal::NoteAnnotation));
                    }
                    _ => {}
                }
                assert!(model.apply(&op));
            }
        }
        assert!(
            dropped > 0 && job_updates > 0 && note_removals > 0,
            "{dropped} {job_updates} {note_removals}"
        );
    }
}
