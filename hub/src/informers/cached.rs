//! A workload object as the WDS cache keeps it: its metadata parsed (what the controllers select
//! and key on), everything else as the JSON text the apiserver sent, parsed only when a
//! controller renders the object or reads its status. Kept as a `serde_json::Value` tree, a
//! small object took about ten times the size of its JSON (every map a B-tree node), and at
//! 10,000 objects the WDS cache was well over half of the hub's heap.
//!
//! It also knows the version of its last change that a WEC would see ([`CachedObject::content_version`]):
//! a status written back (ours, from the WECs) gives the object a new resourceVersion but
//! nothing new to deliver, and a Binding that listed each new version was rewritten, and
//! planned again by the transport, on every status change.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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

impl CachedObject {
    /// The object as JSON, without `apiVersion` and `kind`.
    pub fn to_value(&self) -> Value {
        let mut whole: Map<String, Value> = serde_json::from_str(self.rest.get()).unwrap_or_default();
        if let Some(status) = &self.status {
            whole.insert("status".into(), serde_json::from_str(status.get()).unwrap_or_default());
        }
        whole.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).unwrap_or_default(),
        );
        Value::Object(whole)
    }

    /// The object as JSON, with the `apiVersion` and `kind` that `resource` serves it as.
    pub fn as_served(&self, resource: &ApiResource) -> Value {
        let mut whole = self.to_value();
        whole["apiVersion"] = Value::from(resource.api_version.as_str());
        whole["kind"] = Value::from(resource.kind.as_str());
        whole
    }

    /// The object's `.status`, if it has one.
    pub fn status(&self) -> Option<Value> {
        serde_json::from_str(self.status.as_ref()?.get()).ok()?
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
    /// in its status only (and in what every write changes: resourceVersion, managedFields);
    /// whether it does.
    pub fn follow(&mut self, before: &CachedObject) -> bool {
        let unversioned = |m: &ObjectMeta| ObjectMeta {
            resource_version: None,
            managed_fields: None,
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
                "metadata" => metadata = map.next_value()?,
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
        assert_eq!(cached.to_value(), sent);
        assert_eq!(cached.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(cached.status(), Some(json!({"readyReplicas": 1})));
        let served_as = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        assert_eq!(
            cached.as_served(&served_as),
            serde_json::from_str::<Value>(DEPLOYMENT).unwrap()
        );
    }

    #[test]
    fn an_object_without_status_or_other_fields_has_none() {
        let cached: CachedObject = serde_json::from_str(r#"{"metadata":{"name":"n"}}"#).unwrap();
        assert_eq!(cached.status(), None);
        assert_eq!(cached.to_value(), json!({"metadata": {"name": "n"}}));
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
        assert_eq!(tree.to_value(), list.items[0].to_value());
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
