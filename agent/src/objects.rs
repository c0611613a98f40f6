//! What the agent names things on the WEC by: resource types (GVRs), objects, the objects an
//! AppliedManifestWork lists, and the key of a followed object with the delivery reporting it,
//! from which its WorkStatus is named.

use std::sync::Arc;

use crate::naming::NameParts;

/// A resource type on the WEC: API group (`""` for core), version and plural resource name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    /// Whether this is Secrets: the agent may not read them on the WEC (it has no RBAC for them),
    /// so it reports on delivered Secrets from what was delivered.
    pub fn is_secrets(&self) -> bool {
        self.group.is_empty() && self.resource == "secrets"
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for Gvr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.resource)
    }
}

/// A followed object with the delivery that reports it: one WorkStatus each. Shared: the
/// tracker's indexes, the work queue and reconciles hold one copy.
pub type ObjectKey = Arc<Key>;

/// What an [`ObjectKey`] holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The reporting AppliedManifestWork's UID (the WorkStatus is named after it).
    pub amw_uid: String,
    /// Its ManifestWork on the hub (in the mailbox namespace): the WorkStatus's labels and owner.
    pub manifest_work: String,
    pub gvr: Gvr,
    pub kind: String,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    /// The WorkStatus's name, fixed when the delivery starts reporting.
    pub work_status: String,
}

impl Key {
    /// What its WorkStatus is named from.
    pub fn name_parts(&self) -> NameParts<'_> {
        NameParts {
            amw_uid: &self.amw_uid,
            group: &self.gvr.group,
            version: &self.gvr.version,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
        }
    }

    /// The object on the WEC.
    pub fn object(&self) -> ObjectId {
        ObjectId {
            gvr: self.gvr.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// An object on the WEC.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    pub gvr: Gvr,
    pub namespace: String,
    pub name: String,
}

/// An object an AppliedManifestWork lists, with its kind resolved.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AppliedObject {
    pub gvr: Gvr,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl AppliedObject {
    pub fn id(&self) -> ObjectId {
        ObjectId {
            gvr: self.gvr.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A `v1` resource of `group`: what tests need of a GVR.
    pub fn gvr(group: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
        }
    }

    /// A Deployment an AppliedManifestWork lists.
    pub fn deployment(namespace: &str, name: &str) -> AppliedObject {
        AppliedObject {
            gvr: gvr("apps", "deployments"),
            kind: "Deployment".into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A Namespace an AppliedManifestWork lists.
    pub fn namespace(name: &str) -> AppliedObject {
        AppliedObject {
            gvr: gvr("", "namespaces"),
            kind: "Namespace".into(),
            namespace: String::new(),
            name: name.into(),
        }
    }

    #[test]
    fn the_core_group_has_a_bare_api_version() {
        assert_eq!(gvr("", "pods").api_version(), "v1");
        assert_eq!(gvr("apps", "deployments").api_version(), "apps/v1");
        assert_eq!(gvr("apps", "deployments").to_string(), "apps/v1/deployments");
    }

    #[test]
    fn only_core_secrets_are_secrets() {
        assert!(gvr("", "secrets").is_secrets());
        assert!(!gvr("example.io", "secrets").is_secrets());
    }
}
