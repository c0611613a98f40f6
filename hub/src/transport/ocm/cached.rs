//! What the transport's cache keeps of each ManifestWork: no more than planning and propagation
//! read of it. Of each object it holds, its identity, the WDS version delivered and the trace
//! annotations ([`Held`], one copy for every WEC's ManifestWork); of OCM's status, whether this
//! generation is applied and how many objects are applied and available. At 10,000 objects to 12
//! WECs that is 634 bytes per object; the manifests trimmed as JSON trees (three maps each) and
//! OCM's per-manifest conditions took 3,949 (`make bench-transport-cache`).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use ks_shared::names::{
    API_GROUPS_ANNOTATION, CONTENT_DIGEST_ANNOTATION, OBJECT_COUNT_ANNOTATION, ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL,
};
use ks_shared::ocm::{ManifestWork, ManifestWorkStatus, api_version_group};
use kube::api::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::wrap::{Config, gloss, labels_of, written};
use crate::transport::types::{Held, Identity, Landed, SHARED_WITH_LABEL, Unapplied, Written};

/// What the transport's cache keeps of a ManifestWork, read from the watch as that kind.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "Watched")]
pub struct CachedWork {
    /// Its metadata without managed fields.
    pub metadata: ObjectMeta,
    pub held: Vec<Arc<Held>>,
    /// Whether OCM reports this generation applied.
    pub applied: bool,
    /// Whether OCM has reported on this generation at all (applied or not).
    pub settled: bool,
    /// The objects OCM reports applied while the whole is not (one it cannot apply holds the
    /// whole back, not the others).
    pub applied_objects: Box<[Identity]>,
    /// How many of its objects OCM reports applied and available.
    pub landed: Landed,
    /// How OCM writes each held object on the WEC (in the order of `held`).
    pub written: Box<[Written]>,
    /// The objects OCM reports it could not apply, and why.
    pub unapplied: Box<[Unapplied]>,
}

/// The objects `status` reports not applied.
fn unapplied(status: Option<&ManifestWorkStatus>) -> Box<[Unapplied]> {
    let manifests = status.into_iter().flat_map(|s| &s.resource_status.manifests);
    manifests
        .filter_map(|m| {
            let failed = m
                .conditions
                .iter()
                .find(|c| c.type_ == "Applied" && c.status == "False")?;
            let r = &m.resource_meta;
            Some(Unapplied {
                group: r.group.clone(),
                resource: r.resource.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                message: failed.message.clone(),
            })
        })
        .collect()
}

/// Whether an existing ManifestWork already says what `desired` says. The stored manifests are
/// what the apiserver made of ours, so they are compared through the digest of what we sent, plus
/// what others could change without touching it: our labels (origin, and the
/// `plan::sharers` label) and which objects it holds. The
/// Binding generation annotation alone is no reason to write; a missing API groups or object
/// count annotation (a ManifestWork written before there was one) is.
pub fn same_content(existing: &CachedWork, desired: &ManifestWork) -> bool {
    let ours = |metadata: &ObjectMeta, held: Vec<Identity>| {
        let mut labels = labels_of(
            metadata.labels.as_ref(),
            &[ORIGIN_BINDING_LABEL, ORIGIN_WDS_LABEL, SHARED_WITH_LABEL],
        );
        // Empty is none, as on a ManifestWork written before there was one.
        labels.retain(|k, v| k != SHARED_WITH_LABEL || !v.is_empty());
        let annotation = |name: &str| metadata.annotations.as_ref().and_then(|a| a.get(name).cloned());
        (
            labels,
            annotation(CONTENT_DIGEST_ANNOTATION),
            annotation(API_GROUPS_ANNOTATION),
            annotation(OBJECT_COUNT_ANNOTATION),
            held,
        )
    };
    let desired = ours(&desired.metadata, gloss(desired));
    let held = existing.held.iter().map(|h| h.identity.clone()).collect();
    desired.1.is_some() && ours(&existing.metadata, held) == desired
}

ks_shared::watched_as!(CachedWork, ManifestWork);

impl CachedWork {
    /// What the cache keeps of a ManifestWork (one just written, or one from a test).
    pub fn of(work: &ManifestWork) -> CachedWork {
        let held = work
            .spec
            .workload
            .manifests
            .iter()
            .map(|m| HELD.share(Held::of(m)))
            .collect();
        let configs: Vec<_> = work
            .spec
            .manifest_configs
            .iter()
            .map(|c| {
                let r = &c.resource_identifier;
                let strategy = c.update_strategy.as_ref().map(|s| s.type_.as_str());
                Config {
                    group: &r.group,
                    resource: &r.resource,
                    namespace: &r.namespace,
                    name: &r.name,
                    strategy,
                }
            })
            .collect();
        CachedWork::from_parts(work.metadata.clone(), held, &configs, work.status.as_ref())
    }

    fn from_parts(
        mut metadata: ObjectMeta,
        held: Vec<Arc<Held>>,
        configs: &[Config<'_>],
        status: Option<&ManifestWorkStatus>,
    ) -> CachedWork {
        metadata.managed_fields = None;
        let written = written(held.iter().map(|h| &h.identity), configs);
        let landed = landed(held.len(), status);
        let generation = metadata.generation;
        let applied = status.is_some_and(|s| s.applied(generation));
        let settled = status.is_some_and(|s| s.reported(generation));
        let applied_objects = match status {
            Some(status) if !applied => status
                .resource_status
                .manifests
                .iter()
                .filter(|m| is_true(&m.conditions, "Applied"))
                .map(|m| {
                    let r = &m.resource_meta;
                    (r.group.clone(), r.kind.clone(), r.namespace.clone(), r.name.clone())
                })
                .collect(),
            _ => Box::default(),
        };
        CachedWork {
            metadata,
            held,
            applied,
            settled,
            applied_objects,
            landed,
            written,
            unapplied: unapplied(status),
        }
    }
}

/// How many of `delivered` objects OCM's `status` reports Applied and Available (present on the
/// WEC) in its per-manifest conditions.
pub fn landed(delivered: usize, status: Option<&ManifestWorkStatus>) -> Landed {
    let counted = |type_: &str| {
        status
            .iter()
            .flat_map(|s| &s.resource_status.manifests)
            .filter(|m| is_true(&m.conditions, type_))
            .count()
    };
    Landed {
        delivered,
        applied: counted("Applied"),
        available: counted("Available"),
    }
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// A ManifestWork as the watch sends it, as far as it is read: each manifest's identity and
/// annotations, without the rest of the object ever becoming a JSON tree.
#[derive(Deserialize)]
struct Watched {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WatchedSpec,
    #[serde(default)]
    status: Option<ManifestWorkStatus>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedSpec {
    #[serde(default)]
    workload: WatchedWorkload,
    #[serde(default)]
    manifest_configs: Vec<WatchedConfig>,
}

/// A manifest config's object and strategy; anything missing reads as empty (a config OCM would
/// not match), never as an error that would keep the whole ManifestWork from the cache.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedConfig {
    #[serde(default)]
    resource_identifier: WatchedIdentifier,
    #[serde(default)]
    update_strategy: Option<WatchedStrategy>,
}

#[derive(Default, Deserialize)]
struct WatchedIdentifier {
    #[serde(default)]
    group: Value,
    #[serde(default)]
    resource: Value,
    #[serde(default)]
    namespace: Value,
    #[serde(default)]
    name: Value,
}

#[derive(Default, Deserialize)]
struct WatchedStrategy {
    #[serde(default, rename = "type")]
    type_: Value,
}

#[derive(Default, Deserialize)]
struct WatchedWorkload {
    #[serde(default)]
    manifests: Vec<WatchedManifest>,
}

/// A manifest's kind and metadata; every other field is skipped unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchedManifest {
    #[serde(default)]
    api_version: Value,
    #[serde(default)]
    kind: Value,
    #[serde(default)]
    metadata: WatchedManifestMeta,
}

#[derive(Default, Deserialize)]
struct WatchedManifestMeta {
    #[serde(default)]
    name: Value,
    #[serde(default)]
    namespace: Value,
    #[serde(default)]
    annotations: BTreeMap<String, Value>,
}

/// A manifest config's field as text; one that is missing or not text reads as `""`, which names
/// no object (so the object reads as written in place, OCM's default: at worst it is replaced
/// rather than server-side applied, never emptied).
fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

impl From<Watched> for CachedWork {
    fn from(watched: Watched) -> CachedWork {
        let text = |value: &Value| str_of(value).to_string();
        let held = watched
            .spec
            .workload
            .manifests
            .iter()
            .map(|m| {
                let group = m.api_version.as_str().map_or("", api_version_group).to_string();
                let (metadata, kind) = (&m.metadata, text(&m.kind));
                let identity = (group, kind, text(&metadata.namespace), text(&metadata.name));
                HELD.share(Held::from_parts(identity, metadata.annotations.iter()))
            })
            .collect();
        let configs: Vec<_> = watched
            .spec
            .manifest_configs
            .iter()
            .map(|c| {
                let r = &c.resource_identifier;
                let strategy = c.update_strategy.as_ref().map(|s| str_of(&s.type_));
                Config {
                    group: str_of(&r.group),
                    resource: str_of(&r.resource),
                    namespace: str_of(&r.namespace),
                    name: str_of(&r.name),
                    strategy,
                }
            })
            .collect();
        CachedWork::from_parts(watched.metadata, held, &configs, watched.status.as_ref())
    }
}

/// What is held of an object is the same in every WEC's ManifestWork: one copy is kept for all.
static HELD: std::sync::LazyLock<Pool> = std::sync::LazyLock::new(Pool::default);

/// Held objects by a hash of their content; those no ManifestWork holds any more are dropped now
/// and then. Two that share a hash are both kept, the later one unshared.
#[derive(Default)]
struct Pool(Mutex<ByHash>);

#[derive(Default)]
struct ByHash {
    held: HashMap<u64, Weak<Held>>,
    /// How many were held after the last sweep of dropped ones.
    after_sweep: usize,
}

impl Pool {
    fn share(&self, held: Held) -> Arc<Held> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        held.hash(&mut hasher);
        let hash = hasher.finish();
        let mut pool = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match pool.held.get(&hash).and_then(Weak::upgrade) {
            Some(shared) if *shared == held => shared,
            Some(_) => Arc::new(held),
            None => {
                let shared = Arc::new(held);
                pool.held.insert(hash, Arc::downgrade(&shared));
                if pool.held.len() > 2 * pool.after_sweep.max(1024) {
                    pool.held.retain(|_, held| held.strong_count() > 0);
                    pool.after_sweep = pool.held.len();
                }
                shared
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ks_shared::names::WDS_GENERATION_ANNOTATION;
    use serde_json::json;

    use super::*;

    fn work(manifests: Value, status: Value) -> Value {
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": "p-wds1-0", "namespace": "cluster1", "generation": 2,
                            "labels": {"transport.kubestellar.io/originWdsName": "wds1"},
                            "managedFields": [{"manager": "ks-hub", "operation": "Update"}]},
               "spec": {"workload": {"manifests": manifests}},
               "status": status})
    }

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"},
                            "annotations": {WDS_GENERATION_ANNOTATION: "3", "tracing.k8s.io/traceparent": "00-a-b-01",
                                            "team": "x"}},
               "spec": {"replicas": 2}})
    }

    #[test]
    fn a_watched_work_keeps_what_is_read_of_it() {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        let watched = work(json!([namespace, deployment()]), Value::Null);
        let cached: CachedWork = serde_json::from_value(watched.clone()).unwrap();
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(cached.metadata.name.as_deref(), Some("p-wds1-0"));
        let held: Vec<&Held> = cached.held.iter().map(|h| &**h).collect();
        assert_eq!(
            held,
            [
                &Held {
                    identity: ("".into(), "Namespace".into(), "".into(), "ns".into()),
                    version: None,
                    trace: Box::new([]),
                },
                &Held {
                    identity: ("apps".into(), "Deployment".into(), "ns".into(), "web".into()),
                    version: Some("3".into()),
                    trace: Box::new([("tracing.k8s.io/traceparent".into(), "00-a-b-01".into())]),
                },
            ]
        );
        assert!(!cached.applied);
        assert_eq!(
            cached.landed,
            Landed {
                delivered: 2,
                applied: 0,
                available: 0
            }
        );
        // The same from the whole ManifestWork (one just written), and shared with it.
        let whole: ManifestWork = serde_json::from_value(watched).unwrap();
        let of = CachedWork::of(&whole);
        assert_eq!(of.held, cached.held);
        assert!(Arc::ptr_eq(&of.held[1], &cached.held[1]), "one copy for every WEC");
    }

    #[test]
    fn a_watched_work_counts_what_landed() {
        let condition = |type_: &str, status: &str, generation: i64| {
            json!({"type": type_, "status": status, "observedGeneration": generation, "reason": "R",
                   "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        let manifest = |conditions: Value| json!({"resourceMeta": {"kind": "Deployment", "name": "web"}, "conditions": conditions});
        let status = |generation: i64| {
            json!({"conditions": [condition("Applied", "True", generation), condition("Degraded", "False", 2)],
                   "resourceStatus": {"manifests": [
                       manifest(json!([condition("Applied", "True", 2), condition("Available", "True", 2)])),
                       manifest(json!([condition("Applied", "True", 2), condition("Available", "Unknown", 2)])),
                       manifest(json!([condition("Applied", "False", 2)]))]}})
        };
        let cached: CachedWork = serde_json::from_value(work(json!([deployment()]), status(2))).unwrap();
        assert!(cached.applied);
        assert_eq!(
            cached.landed,
            Landed {
                delivered: 1,
                applied: 2,
                available: 1
            }
        );
        // An older generation's Applied is not this generation's.
        let cached: CachedWork = serde_json::from_value(work(json!([deployment()]), status(1))).unwrap();
        assert!(!cached.applied);
        // The one it could not apply, with why.
        assert_eq!(
            cached
                .unapplied
                .iter()
                .map(|u| (u.name.as_str(), u.message.as_str()))
                .collect::<Vec<_>>(),
            [("web", "m")]
        );
    }

    #[test]
    fn odd_manifests_are_held_as_far_as_they_go() {
        let odd = json!([{"kind": 3, "metadata": {"name": "x", "annotations": {WDS_GENERATION_ANNOTATION: 4}}}, {}]);
        let cached: CachedWork = serde_json::from_value(work(odd, Value::Null)).unwrap();
        assert_eq!(cached.held.len(), 2);
        assert_eq!(cached.held[0].identity, ("".into(), "".into(), "".into(), "x".into()));
        assert_eq!(cached.held[0].version, None);
    }

    #[test]
    fn the_pool_shares_equal_objects_and_forgets_those_no_work_holds() {
        let pool = Pool::default();
        let held = |i: usize| Held {
            identity: ("".into(), "ConfigMap".into(), "ns".into(), format!("cm-{i}")),
            version: Some("1".into()),
            trace: Box::new([]),
        };
        let kept = pool.share(held(0));
        assert!(Arc::ptr_eq(&kept, &pool.share(held(0))), "one copy for every WEC");
        let dropped: Vec<Arc<Held>> = (1..3000).map(|i| pool.share(held(i))).collect();
        drop(dropped);
        // The next share past twice the size after the last sweep sweeps.
        let later: Vec<Arc<Held>> = (3000..5000).map(|i| pool.share(held(i))).collect();
        let entries = pool.0.lock().unwrap().held.len();
        assert!(
            entries <= 2 + later.len(),
            "{entries} entries for {} held",
            later.len() + 1
        );
        assert!(Arc::ptr_eq(&kept, &pool.share(held(0))), "what is held stays shared");
    }

    #[test]
    fn it_is_watched_as_a_manifest_work() {
        use kube::Resource;
        assert_eq!(
            CachedWork::url_path(&(), Some("cluster1")),
            ManifestWork::url_path(&(), Some("cluster1"))
        );
        assert_eq!(CachedWork::kind(&()), "ManifestWork");
    }
}
