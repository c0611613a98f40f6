//! The packaging stage of a rollout's trace (see `ks_shared::rollout`): each new generation of
//! a delivered object gets a `packaging` span, from when the hub first saw that generation to
//! when its wrapped objects are written, joined to the trace of the user's object when it
//! carries one. The span's context goes into the delivered manifest's annotations (so the WEC
//! object carries it), stamped with the time it was sent. Re-renders of the same generation
//! reuse the annotations already delivered, so they never change on their own.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use ks_shared::names::TRACE_ANNOTATION_PREFIX;
use ks_shared::rollout::{self, KeyValue, attribute, stage};
use ks_shared::telemetry::{extract_context, inject_context};
use kube::ResourceExt;
use serde_json::Value;

use crate::informers::{CachedObject, FirstSeen};
use crate::transport::types::{Held, Identity, TraceAnnotations};

/// Packaging spans recorded but possibly not yet visible in the wrapped objects, by object UID
/// and generation; bounded (what was delivered is found in the wrapped objects themselves).
#[derive(Default)]
pub struct Packaging(Mutex<HashMap<(String, i64), TraceAnnotations>>);

const REMEMBERED: usize = 10_000;

/// What a rollout span says about its object.
pub struct Subject<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub binding: &'a str,
    pub wecs: &'a str,
}

impl Packaging {
    /// The trace annotations for this generation of `object`: those already `delivered` for
    /// it, else those of a new packaging span (none when nothing is traced).
    pub fn annotations(
        &self,
        object: &CachedObject,
        delivered: Option<&TraceAnnotations>,
        first_seen: &FirstSeen,
        subject: &Subject<'_>,
    ) -> TraceAnnotations {
        if let Some(delivered) = delivered {
            return delivered.clone();
        }
        let (Some(uid), Some(generation)) = (object.uid(), object.metadata.generation) else {
            return TraceAnnotations::new();
        };
        let mut remembered = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(annotations) = remembered.get(&(uid.clone(), generation)) {
            return annotations.clone();
        }
        let now = SystemTime::now();
        let parent = extract_context(object.annotations());
        let attributes = vec![
            KeyValue::new(attribute::GROUP, subject.group.to_string()),
            KeyValue::new(attribute::RESOURCE, subject.resource.to_string()),
            KeyValue::new(attribute::NAMESPACE, object.namespace().unwrap_or_default()),
            KeyValue::new(attribute::NAME, object.name_any()),
            KeyValue::new(attribute::GENERATION, generation),
            KeyValue::new(attribute::BINDING_POLICY, subject.binding.to_string()),
            KeyValue::new(attribute::WEC, subject.wecs.to_string()),
        ];
        let start = first_seen.get(&uid, generation).unwrap_or(now).min(now);
        let labels = rollout::Labels::of_policy(subject.binding);
        let packaged = rollout::record(stage::PACKAGING, &parent, start, now, attributes, &labels);
        let mut annotations = TraceAnnotations::new();
        if rollout::is_traced(&packaged) {
            let stamped = rollout::stamp_sent(&rollout::stamp_started(&packaged, start), now);
            inject_context(&stamped, &mut annotations);
        }
        if remembered.len() >= REMEMBERED {
            remembered.clear();
        }
        remembered.insert((uid, generation), annotations.clone());
        annotations
    }
}

/// The trace annotations of delivered objects, with the version of the WDS object each is for
/// (its generation or content digest).
pub fn delivered<'a>(held: impl Iterator<Item = &'a Held>) -> HashMap<Identity, (String, TraceAnnotations)> {
    held.filter_map(|held| Some((held.identity.clone(), (held.version.clone()?, held.trace()))))
        .collect()
}

/// Puts `trace` in place of any trace annotations the manifest has (e.g. the user's, which
/// our span continues).
pub fn set(manifest: &mut Value, trace: &TraceAnnotations) {
    let Some(annotations) = manifest["metadata"]["annotations"].as_object_mut() else {
        return;
    };
    annotations.retain(|key, _| !key.starts_with(TRACE_ANNOTATION_PREFIX));
    for (key, value) in trace {
        annotations.insert(key.clone(), Value::String(value.clone()));
    }
}

#[cfg(test)]
mod tests {
    use ks_shared::names::{TRACEPARENT_ANNOTATION, WDS_GENERATION_ANNOTATION};
    use serde_json::json;

    use super::*;

    #[test]
    fn delivered_traces_are_found_by_identity_and_generation() {
        let manifests = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns",
                   "annotations": {WDS_GENERATION_ANNOTATION: "3", TRACEPARENT_ANNOTATION: "00-a-b-01", "other": "x"}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}),
        ];
        let held: Vec<Held> = manifests.iter().map(Held::of).collect();
        let found = delivered(held.iter());
        assert_eq!(found.len(), 1);
        let (generation, trace) = &found[&("apps".into(), "Deployment".into(), "ns".into(), "web".into())];
        assert_eq!(generation, "3");
        assert_eq!(
            trace,
            &TraceAnnotations::from([(TRACEPARENT_ANNOTATION.into(), "00-a-b-01".into())])
        );
    }

    #[test]
    fn set_replaces_only_trace_annotations() {
        let mut manifest = json!({"metadata": {"annotations": {TRACEPARENT_ANNOTATION: "user", "keep": "1"}}});
        set(
            &mut manifest,
            &TraceAnnotations::from([(TRACEPARENT_ANNOTATION.into(), "ours".into())]),
        );
        assert_eq!(
            manifest["metadata"]["annotations"],
            json!({TRACEPARENT_ANNOTATION: "ours", "keep": "1"})
        );
        set(&mut manifest, &TraceAnnotations::new());
        assert_eq!(manifest["metadata"]["annotations"], json!({"keep": "1"}));
    }
}
