//! What the transport's parts share: how an object in a wrapped object is named
//! ([`Identity`], [`WorkKey`]), what is delivered and from where ([`Delivery`], [`Origin`]), and
//! what the cache keeps and the destination reports of a wrapped object ([`Held`], [`Written`],
//! [`Unapplied`], [`Landed`]).

use std::collections::BTreeMap;
use std::iter::Sum;
use std::ops::Add;
use std::sync::Arc;

use ks_shared::names::{WDS_CONTENT_ANNOTATION, WDS_GENERATION_ANNOTATION, is_trace_annotation};
use ks_shared::ocm::manifest_group;
use serde_json::Value;

/// An object's identity in a wrapped object: `(apiVersion's group, kind, namespace, name)`.
pub type Identity = (String, String, String, String);

/// A manifest's identity.
pub fn identity(manifest: &Value) -> Identity {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        manifest_group(manifest).to_string(),
        text(&manifest["kind"]),
        text(&manifest["metadata"]["namespace"]),
        text(&manifest["metadata"]["name"]),
    )
}

/// A wrapped object by (mailbox, name).
pub type WorkKey = (String, String);

/// The label that names, by digest, the other wrapped objects of a mailbox holding an object
/// that a wrapped object holds (see `plan::sharers`): empty on a wrapped object that shares nothing. Never left out: a label its create
/// set (OCM's ManifestWork is created, then applied) would stay if a later apply left it out,
/// since field ownership is by manager and operation.
pub const SHARED_WITH_LABEL: &str = "transport.kubestellar.io/sharedWith";

/// One object to deliver: the transformed manifest, its resource name, and whether it is
/// create-only. Cloned cheaply: every WEC's ManifestWork shares the manifest, unless its
/// templates are expanded for that WEC.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub(crate) manifest: Arc<Value>,
    pub resource: String,
    pub create_only: bool,
    /// What the content digest reads of the manifest, serialised once however many WECs get it.
    pub(crate) digest_text: Arc<str>,
}

impl Delivery {
    pub fn new(manifest: Value, resource: impl Into<String>, create_only: bool) -> Delivery {
        Delivery {
            digest_text: digest_text(&manifest).into(),
            manifest: Arc::new(manifest),
            resource: resource.into(),
            create_only,
        }
    }

    pub fn manifest(&self) -> &Value {
        &self.manifest
    }

    /// Changes the manifest (e.g. expands its templates; a copy if it is shared), keeping what is
    /// read of it current.
    pub fn update<T>(&mut self, change: impl FnOnce(&mut Value) -> T) -> T {
        let result = change(Arc::make_mut(&mut self.manifest));
        self.digest_text = digest_text(&self.manifest).into();
        result
    }
}

/// Which Binding a ManifestWork comes from.
#[derive(Clone, Debug)]
pub struct Origin<'a> {
    pub binding: &'a str,
    pub binding_uid: &'a str,
    pub binding_generation: i64,
    pub wds: &'a str,
}

/// What the content digest reads of a manifest: its JSON without trace annotations.
pub(crate) fn digest_text(manifest: &Value) -> String {
    without_trace_annotations(manifest).to_string()
}

pub(crate) fn without_trace_annotations(manifest: &Value) -> Value {
    let mut manifest = manifest.clone();
    if let Some(annotations) = manifest["metadata"]["annotations"].as_object_mut() {
        annotations.retain(|key, _| !is_trace_annotation(key));
    }
    manifest
}

/// How a ManifestWork has OCM write one of its objects on the WEC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Server-side applied.
    ServerSide,
    /// Created only, if missing (and then by a plain create).
    CreateOnly,
    /// Replaced (OCM's `Update`, a PUT), or created so if missing.
    InPlace,
}

/// Trace annotations of a manifest.
pub type TraceAnnotations = BTreeMap<String, String>;

/// What the cache keeps of one delivered object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Held {
    pub identity: Identity,
    /// The version of the WDS object delivered: its generation, or its content digest (the
    /// annotation that says), if any.
    pub version: Option<String>,
    /// Its trace annotations, sorted by key.
    pub trace: Box<[(String, String)]>,
}

impl Held {
    /// What is kept of a manifest.
    pub fn of(manifest: &Value) -> Held {
        let annotations = manifest["metadata"]["annotations"].as_object();
        Held::from_parts(identity(manifest), annotations.into_iter().flatten())
    }

    pub fn from_parts<'a>(identity: Identity, annotations: impl Iterator<Item = (&'a String, &'a Value)>) -> Held {
        let mut version = None;
        let mut trace = Vec::new();
        for (key, value) in annotations {
            let Some(value) = value.as_str() else { continue };
            if key == WDS_GENERATION_ANNOTATION || key == WDS_CONTENT_ANNOTATION {
                version = Some(value.to_string());
            } else if is_trace_annotation(key) {
                trace.push((key.clone(), value.to_string()));
            }
        }
        trace.sort();
        Held {
            identity,
            version,
            trace: trace.into(),
        }
    }

    /// Its trace annotations as a map.
    pub fn trace(&self) -> TraceAnnotations {
        self.trace.iter().cloned().collect()
    }
}

/// An object a WEC could not apply (OCM's per-object `Applied` condition is False), and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unapplied {
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub message: String,
}

/// How many objects of one wrapped object the destination reports applied, and available.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Landed {
    pub delivered: usize,
    pub applied: usize,
    pub available: usize,
}

impl Add for Landed {
    type Output = Landed;
    fn add(self, other: Landed) -> Landed {
        Landed {
            delivered: self.delivered + other.delivered,
            applied: self.applied + other.applied,
            available: self.available + other.available,
        }
    }
}

impl Sum for Landed {
    fn sum<I: Iterator<Item = Landed>>(iter: I) -> Landed {
        iter.fold(Landed::default(), Add::add)
    }
}
