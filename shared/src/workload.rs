//! Which workload object: the one reference every controller uses for an object of the WDS (or
//! of a WEC), whatever version it is served at. Events for a deleted object may not know the
//! version, and WorkStatuses, Bindings and CombinedStatuses name objects without it.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// A digest of a workload object's content as a generation counts it: every top-level field
/// (of `fields`) but `apiVersion`, `kind`, `metadata` and `status`, read as JSON values, so the
/// same content gives the same digest however its text is laid out; 32 hex digits. The transport
/// sends it in place of the generation where a write of `.status` raises that
/// (`names::WDS_CONTENT_ANNOTATION`); the status controller and `why` compare a report's with the
/// object's.
pub fn content_digest<'a>(fields: impl IntoIterator<Item = (&'a String, &'a Value)>) -> String {
    let content: BTreeMap<&String, &Value> = fields
        .into_iter()
        .filter(|(key, _)| !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
        .collect();
    // A map of string keys to JSON values always serialises.
    let text = serde_json::to_string(&content).expect("JSON values serialise");
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A group and plural resource name, e.g. `apps`/`deployments`; `""` is the core group.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> GroupResource {
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// One workload object. Ordered by resource, then namespace (cluster-scoped first), then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadRef {
    pub resource: GroupResource,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
}

impl WorkloadRef {
    /// `namespace` as Kubernetes writes it in references: `""` for a cluster-scoped object.
    pub fn new(group: &str, resource: &str, namespace: &str, name: &str) -> WorkloadRef {
        WorkloadRef {
            resource: GroupResource::new(group, resource),
            namespace: Some(namespace.to_string()).filter(|n| !n.is_empty()),
            name: name.to_string(),
        }
    }

    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The namespace as references and labels write it: `""` for a cluster-scoped object.
    pub fn namespace_or_empty(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }
}

impl fmt::Display for WorkloadRef {
    /// `apps/deployments ns1/web`, `/namespaces ns1`: how errors and logs name the object.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let GroupResource { group, resource } = &self.resource;
        match self.namespace() {
            Some(namespace) => write!(f, "{group}/{resource} {namespace}/{}", self.name),
            None => write!(f, "{group}/{resource} {}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_namespace_is_cluster_scope() {
        let namespace = WorkloadRef::new("", "namespaces", "", "ns1");
        assert_eq!(namespace.namespace(), None);
        assert_eq!(namespace.namespace_or_empty(), "");
        assert_eq!(namespace.to_string(), "/namespaces ns1");
        let web = WorkloadRef::new("apps", "deployments", "ns1", "web");
        assert_eq!(web.to_string(), "apps/deployments ns1/web");
        assert!(
            WorkloadRef::new("apps", "deployments", "", "z") < web,
            "cluster-scoped first"
        );
    }
}
