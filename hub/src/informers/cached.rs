//! A workload object as the WDS cache keeps it: its metadata parsed (what the controllers select
//! and key on), everything else as the JSON text the apiserver sent, parsed only when a
//! controller renders the object or reads its status. Kept as a `serde_json::Value` tree, a
//! small object took about ten times the size of its JSON (every map a B-tree node), and at
//! 10,000 objects the WDS cache was well over half of the hub's heap.
//!
//! Its content is read only as deep as serde_json reads (128 levels): one nested deeper cannot be
//! read, and says so ([`Unreadable`]) rather than read as `{}`, which delivered it emptied. Its
//! metadata never fails for depth: only a `managedFields` entry's `fieldsV1` nests (it mirrors
//! the fields its manager set), and one too deep to read is kept without it, so that one deep
//! object does not fail the LIST or watch of its whole resource.
//!
//! It also knows the version of its last change that a WEC would see ([`CachedObject::content_version`]):
//! a status written back (ours, from the WECs) gives the object a new resourceVersion but
//! nothing new to deliver, and a Binding that listed each new version was rewritten, and
//! planned again by the transport, on every status change.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::Resource;
use kube::core::DynamicResourceScope;
use kube::discovery::ApiResource;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One cached workload object. Its type is its informer's: `apiVersion` and `kind` are not kept
/// (listed items need not carry them).
#[derive(Clone, Debug)]
pub struct CachedObject {
    pub metadata: ObjectMeta,
    /// Every other top-level field but `status`, as one JSON object's text.
    rest: Box<RawValue>,
    /// `.status`, as the JSON text sent.
    status: Option<Box<RawValue>>,
    /// The resourceVersion of the last change to anything but the status, when that is not
    /// `metadata.resourceVersion`.
    content_version: Option<String>,
}

/// An object whose content cannot be read as JSON values: nested deeper than serde_json reads
/// (128 levels), or holding a number it cannot represent.
#[derive(Debug, thiserror::Error)]
#[error("its content cannot be read: {0}")]
pub struct Unreadable(#[from] serde_json::Error);

impl CachedObject {
    /// The object as JSON, without `apiVersion` and `kind`.
    pub fn to_value(&self) -> Result<Value, Unreadable> {
        let mut whole = self.without_status()?;
        if let Some(status) = &self.status {
            whole.insert("status".into(), serde_json::from_str(status.get())?);
        }
        Ok(Value::Object(whole))
    }

    /// The object as JSON, with the `apiVersion` and `kind` that `resource` serves it as.
    pub fn as_served(&self, resource: &ApiResource) -> Result<Value, Unreadable> {
        Ok(served_as(self.to_value()?, resource))
    }

    /// The object as [`CachedObject::as_served`] gives it, but without its `.status`, which no
    /// WEC gets (nor is it read, so a status that cannot be read does not keep it from them).
    pub fn as_delivered(&self, resource: &ApiResource) -> Result<Value, Unreadable> {
        Ok(served_as(Value::Object(self.without_status()?), resource))
    }

    /// Every field but `.status`, `apiVersion` and `kind`.
    fn without_status(&self) -> Result<Map<String, Value>, Unreadable> {
        let mut fields: Map<String, Value> = serde_json::from_str(self.rest.get())?;
        fields.insert("metadata".into(), serde_json::to_value(&self.metadata)?);
        Ok(fields)
    }

    /// The object's `.status`, if it has one.
    pub fn status(&self) -> Option<Value> {
        serde_json::from_str(self.status.as_ref()?.get()).ok()?
    }

    /// A digest of the object's content as a generation counts it
    /// ([`ks_shared::workload::content_digest`]). It tells versions of an object apart where its
    /// generation cannot: a resource without a status subresource raises the generation on a
    /// write of `.status` too.
    pub fn content_digest(&self) -> Result<String, Unreadable> {
        let content: Map<String, Value> = serde_json::from_str(self.rest.get())?;
        Ok(ks_shared::workload::content_digest(&content))
    }

    /// The resourceVersion of the object's last change to anything but its status: what a
    /// Binding lists, so that a status written back is no change to deliver.
    pub fn content_version(&self) -> String {
        self.content_version
            .clone()
            .or_else(|| self.metadata.resource_version.clone())
            .unwrap_or_default()
    }

    /// Keeps `before`'s content version if this newer copy of the same object differs from it
    /// in its status only (and in what every write changes: resourceVersion, managedFields; and
    /// the generation, which a write of `.status` raises where it has no subresource of its
    /// own); whether it does.
    pub fn follow(&mut self, before: &CachedObject) -> bool {
        let unversioned = |m: &ObjectMeta| ObjectMeta {
            resource_version: None,
            managed_fields: None,
            generation: None,
            ..m.clone()
        };
        if self.rest.get() != before.rest.get() || unversioned(&self.metadata) != unversioned(&before.metadata) {
            return false;
        }
        let kept = before.content_version();
        self.content_version = (self.metadata.resource_version.as_ref() != Some(&kept)).then_some(kept);
        true
    }
}

/// `object` with the `apiVersion` and `kind` that `resource` serves it as.
fn served_as(mut object: Value, resource: &ApiResource) -> Value {
    object["apiVersion"] = Value::from(resource.api_version.as_str());
    object["kind"] = Value::from(resource.kind.as_str());
    object
}

/// An object's `metadata` from its JSON text. Read apart from the object (whose depth counts
/// towards serde_json's limit of 128 levels, a list's too), and, should that fail, with each
/// `managedFields` entry read on its own, without a `fieldsV1` too deep to read: the only part of
/// metadata that nests as deep as the object does (it mirrors the fields its manager set). The
/// cache keeps only our status writer's entries (`informers::trim`), whose `fieldsV1` is no
/// deeper than a status the status controller could read.
fn read_metadata(text: &str) -> serde_json::Result<ObjectMeta> {
    let failed = match serde_json::from_str(text) {
        Ok(metadata) => return Ok(metadata),
        Err(err) => err,
    };
    let mut fields: BTreeMap<String, &RawValue> = serde_json::from_str(text)?;
    let Some(entries) = fields.remove("managedFields") else {
        return Err(failed);
    };
    let mut metadata: ObjectMeta = serde_json::from_str(&serde_json::to_string(&fields)?)?;
    let entries: Option<Vec<&RawValue>> = serde_json::from_str(entries.get())?;
    metadata.managed_fields = entries
        .map(|entries| entries.into_iter().map(read_managed_fields_entry).collect())
        .transpose()?;
    Ok(metadata)
}

/// One `managedFields` entry; without its `fieldsV1` when that is too deep to read.
fn read_managed_fields_entry(entry: &RawValue) -> serde_json::Result<ManagedFieldsEntry> {
    serde_json::from_str(entry.get()).or_else(|_| {
        let mut fields: BTreeMap<String, &RawValue> = serde_json::from_str(entry.get())?;
        fields.remove("fieldsV1");
        serde_json::from_str(&serde_json::to_string(&fields)?)
    })
}

impl Resource for CachedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for CachedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = CachedObject;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CachedObject, A::Error> {
        let mut metadata = ObjectMeta::default();
        let mut rest = String::from("{");
        let mut status = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => {
                    let text: Box<RawValue> = map.next_value()?;
                    metadata = read_metadata(text.get()).map_err(de::Error::custom)?;
                }
                "status" => status = Some(map.next_value()?),
                "apiVersion" | "kind" => {
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let value: Box<RawValue> = map.next_value()?;
                    if rest.len() > 1 {
                        rest.push(',');
                    }
                    rest.push_str(&serde_json::to_string(&key).map_err(de::Error::custom)?);
                    rest.push(':');
                    rest.push_str(value.get());
                }
            }
        }
        rest.push('}');
        let rest = RawValue::from_string(rest).map_err(de::Error::custom)?;
        Ok(CachedObject {
            metadata,
            rest,
            status,
            content_version: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use kube::core::ObjectList;
    use kube::core::WatchEvent;
    use serde_json::json;

    use super::*;

    const DEPLOYMENT: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment",
        "metadata":{"name":"web","namespace":"ns","uid":"u1","resourceVersion":"7","labels":{"app":"web"}},
        "spec":{"replicas":2,"template":{"metadata":{"labels":{"app":"web"}}},"note":"a \"quoted\" ü"},
        "status":{"readyReplicas":1}}"#;

    #[test]
    fn an_object_reads_back_as_it_was_sent_without_its_type() {
        let cached: CachedObject = serde_json::from_str(DEPLOYMENT).unwrap();
        let mut sent: Value = serde_json::from_str(DEPLOYMENT).unwrap();
        sent.as_object_mut()
            .unwrap()
            .retain(|k, _| k != "apiVersion" && k != "kind");
        assert_eq!(cached.to_value().unwrap(), sent);
        assert_eq!(cached.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(cached.status(), Some(json!({"readyReplicas": 1})));
        let served_as = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        assert_eq!(
            cached.as_served(&served_as).unwrap(),
            serde_json::from_str::<Value>(DEPLOYMENT).unwrap()
        );
        let mut delivered = cached.as_served(&served_as).unwrap();
        delivered.as_object_mut().unwrap().remove("status");
        assert_eq!(cached.as_delivered(&served_as).unwrap(), delivered);
    }

    #[test]
    fn an_object_without_status_or_other_fields_has_none() {
        let cached: CachedObject = serde_json::from_str(r#"{"metadata":{"name":"n"}}"#).unwrap();
        assert_eq!(cached.status(), None);
        assert_eq!(cached.to_value().unwrap(), json!({"metadata": {"name": "n"}}));
    }

    /// The shapes kube's watcher parses: a watch event line and a list page (both straight from
    /// serde_json's reader, which keeps raw values), and a tree (tests build objects so).
    #[test]
    fn objects_parse_from_watch_events_lists_and_trees() {
        let event = format!(r#"{{"type":"MODIFIED","object":{DEPLOYMENT}}}"#);
        let Ok(WatchEvent::Modified(cached)) = serde_json::from_str::<WatchEvent<CachedObject>>(&event) else {
            panic!("not parsed as a modification");
        };
        assert_eq!(cached.status(), Some(json!({"readyReplicas": 1})));
        let list = format!(
            r#"{{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{{"resourceVersion":"9"}},"items":[{DEPLOYMENT}]}}"#
        );
        let list: ObjectList<CachedObject> = serde_json::from_str(&list).unwrap();
        assert_eq!(list.items[0].metadata.name.as_deref(), Some("web"));
        let tree: CachedObject = serde_json::from_value(serde_json::from_str(DEPLOYMENT).unwrap()).unwrap();
        assert_eq!(tree.to_value().unwrap(), list.items[0].to_value().unwrap());
    }

    /// `DEPLOYMENT` at resourceVersion `version`, changed by `change`.
    fn version(version: &str, change: impl FnOnce(&mut Value)) -> CachedObject {
        let mut object: Value = serde_json::from_str(DEPLOYMENT).unwrap();
        object["metadata"]["resourceVersion"] = json!(version);
        change(&mut object);
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_change_of_status_only_keeps_the_version_of_the_last_other_change() {
        let first = version("7", |_| {});
        assert_eq!(first.content_version(), "7");
        let mut status = version("8", |o| {
            o["status"]["readyReplicas"] = json!(2);
            o["metadata"]["managedFields"] = json!([{"manager": "ks-status", "operation": "Update"}]);
        });
        assert!(status.follow(&first));
        assert_eq!(status.content_version(), "7");
        assert_eq!(status.status(), Some(json!({"readyReplicas": 2})));
        let mut again = version("9", |o| o["status"]["readyReplicas"] = json!(1));
        assert!(again.follow(&status));
        assert_eq!(again.content_version(), "7", "kept over status changes in a row");
        let mut relisted = version("9", |o| o["status"]["readyReplicas"] = json!(1));
        assert!(relisted.follow(&again));
        assert_eq!(
            relisted.content_version(),
            "7",
            "kept when the same version is listed again"
        );
    }

    #[test]
    fn a_status_write_that_raised_the_generation_is_no_new_content() {
        // A resource without a status subresource: the write of `.status` raised the generation.
        let first = version("7", |o| o["metadata"]["generation"] = json!(1));
        let mut status = version("8", |o| {
            o["metadata"]["generation"] = json!(2);
            o["status"]["readyReplicas"] = json!(2);
        });
        assert!(status.follow(&first));
        assert_eq!(status.content_version(), "7");
        assert_eq!(status.content_digest().unwrap(), first.content_digest().unwrap());
    }

    #[test]
    fn the_content_digest_reads_values_not_text_and_leaves_out_metadata_and_status() {
        let laid_out = |text: &str| {
            serde_json::from_str::<CachedObject>(text)
                .unwrap()
                .content_digest()
                .unwrap()
        };
        let digest = laid_out(r#"{"metadata":{"name":"a"},"spec":{"x":1,"y":[true]},"status":{"s":1}}"#);
        assert_eq!(digest.len(), 32);
        assert_eq!(
            digest,
            laid_out(r#"{"spec":{ "y":[true],"x":1 },"metadata":{"name":"a","generation":9,"labels":{"l":"v"}}}"#)
        );
        assert_ne!(
            digest,
            laid_out(r#"{"metadata":{"name":"a"},"spec":{"x":2,"y":[true]}}"#)
        );
        assert_ne!(
            digest,
            laid_out(r#"{"metadata":{"name":"a"},"spec":{"x":1,"y":[true]},"data":{}}"#)
        );
    }

    #[test]
    fn any_other_change_is_a_new_content_version() {
        let first = version("7", |_| {});
        type Change = fn(&mut Value);
        let changes: [(&str, Change); 4] = [
            ("spec", |o| o["spec"]["replicas"] = json!(3)),
            ("label", |o| o["metadata"]["labels"]["tier"] = json!("web")),
            ("annotation", |o| o["metadata"]["annotations"] = json!({"note": "x"})),
            ("deletion", |o| {
                o["metadata"]["deletionTimestamp"] = json!("2026-11-29T00:00:00Z")
            }),
        ];
        for (what, change) in changes {
            let mut changed = version("8", |o| {
                change(o);
                o["status"]["readyReplicas"] = json!(2);
            });
            assert!(!changed.follow(&first), "{what}");
            assert_eq!(changed.content_version(), "8", "{what}");
        }
    }

    /// `[[ … [1] … ]]`, `levels` lists deep.
    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    /// A ConfigMap-like object with `spec` and `status`, as the apiserver sends it.
    fn text(spec: &Value, status: &Value) -> String {
        format!(r#"{{"metadata":{{"name":"deep","namespace":"ns"}},"spec":{spec},"status":{status}}}"#)
    }

    /// The defect: a spec deeper than serde_json reads was read as no spec at all, and
    /// delivered so.
    #[test]
    fn content_too_deep_to_read_is_an_error_not_an_empty_object() {
        let served_as = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let deep: CachedObject = serde_json::from_str(&text(&nested(130), &json!({}))).unwrap();
        assert_eq!(deep.metadata.name.as_deref(), Some("deep"), "its metadata is read");
        let error = deep.as_delivered(&served_as).unwrap_err().to_string();
        assert!(
            error.starts_with("its content cannot be read: recursion limit exceeded"),
            "{error}"
        );
        assert!(deep.to_value().is_err());
        // Its status is not delivered: one too deep to read only fails what reads it.
        let deep_status: CachedObject = serde_json::from_str(&text(&json!({"a": 1}), &nested(130))).unwrap();
        assert_eq!(deep_status.as_delivered(&served_as).unwrap()["spec"], json!({"a": 1}));
        assert!(deep_status.as_served(&served_as).is_err());
        assert_eq!(deep_status.status(), None);
    }

    /// `fieldsV1` mirrors the fields its manager set: a custom resource nested deep in maps
    /// makes it as deep, and failing to read it failed the LIST (and lost the watch events) of
    /// every object of the resource.
    #[test]
    fn managed_fields_too_deep_to_read_fail_neither_the_list_nor_the_object() {
        let deep_fields = (0..130).fold(json!({}), |inner, _| json!({"f:a": inner}));
        let entry = |manager: &str, fields: &Value| json!({"manager": manager, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields});
        let shallow = json!({"f:status": {"f:ready": {}}});
        let deep = json!({"metadata": {"name": "deep", "namespace": "ns", "resourceVersion": "5",
                                       "managedFields": [entry("kubectl", &deep_fields), entry("ks", &shallow)]},
                          "spec": {"a": 1}});
        let other = json!({"metadata": {"name": "other", "namespace": "ns"}, "spec": {"b": 2}});
        // As the apiserver sends them (serde_json writes at any depth).
        let list = format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[{deep},{other}]}}"#
        );
        let list: ObjectList<CachedObject> = serde_json::from_str(&list).unwrap();
        let [deep, other] = &list.items[..] else {
            panic!("{:?}", list.items);
        };
        assert_eq!(other.to_value().unwrap()["spec"], json!({"b": 2}));
        assert_eq!(deep.to_value().unwrap()["spec"], json!({"a": 1}));
        assert_eq!(deep.metadata.resource_version.as_deref(), Some("5"));
        let entries = deep.metadata.managed_fields.as_deref().unwrap();
        assert_eq!(entries[0].manager.as_deref(), Some("kubectl"));
        assert_eq!(entries[0].fields_v1, None, "too deep to read");
        assert_eq!(entries[1].fields_v1.as_ref().map(|f| &f.0), Some(&shallow));
        let event = format!(
            r#"{{"type":"ADDED","object":{}}}"#,
            json!({"metadata": deep_meta(&deep_fields)})
        );
        let Ok(WatchEvent::Added(added)) = serde_json::from_str::<WatchEvent<CachedObject>>(&event) else {
            panic!("not parsed as an addition");
        };
        assert_eq!(added.metadata.name.as_deref(), Some("deep"));
    }

    fn deep_meta(fields: &Value) -> Value {
        json!({"name": "deep", "managedFields": [{"manager": "kubectl", "fieldsV1": fields}]})
    }

    #[test]
    fn a_null_status_is_none() {
        let cached: CachedObject = serde_json::from_str(r#"{"metadata":{"name":"n"},"status":null}"#).unwrap();
        assert_eq!(cached.status(), None);
    }

    #[test]
    fn what_is_not_an_object_is_refused() {
        assert!(serde_json::from_str::<CachedObject>("[1]").is_err());
        assert!(serde_json::from_str::<CachedObject>(r#"{"metadata":{"name":5}}"#).is_err());
    }
}
