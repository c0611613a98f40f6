//! A workload object as the WDS cache keeps it: its metadata parsed (what the controllers select
//! and key on), everything else as the JSON text the apiserver sent, parsed only when a
//! controller renders the object or reads its status. Kept as a `serde_json::Value` tree, a
//! small object took about ten times the size of its JSON (every map a B-tree node), and at
//! 10,000 objects the WDS cache was well over half of the hub's heap.

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
    /// Every other top-level field, as one JSON object's text.
    rest: Box<RawValue>,
}

impl CachedObject {
    /// The object as JSON, without `apiVersion` and `kind`.
    pub fn to_value(&self) -> Value {
        let mut whole: Map<String, Value> = serde_json::from_str(self.rest.get()).unwrap_or_default();
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
        #[derive(Deserialize)]
        struct Status {
            status: Option<Value>,
        }
        serde_json::from_str::<Status>(self.rest.get()).ok()?.status
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
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => metadata = map.next_value()?,
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
        Ok(CachedObject { metadata, rest })
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

    #[test]
    fn what_is_not_an_object_is_refused() {
        assert!(serde_json::from_str::<CachedObject>("[1]").is_err());
        assert!(serde_json::from_str::<CachedObject>(r#"{"metadata":{"name":5}}"#).is_err());
    }
}
