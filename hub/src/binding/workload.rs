//! Plain descriptions of what a BindingPolicy selects from: workload objects in the WDS and WECs.

use std::collections::BTreeMap;

use ks_shared::workload::WorkloadRef;

/// Label keys and values, as on any Kubernetes object.
pub type Labels = BTreeMap<String, String>;

/// A workload object as served by one resource of the WDS: its [`WorkloadRef`] with the version
/// and kind it is served at, which a Binding lists.
///
/// The derived order (group, version, resource, then namespace and name) is the order objects
/// are listed in a Binding; `kind` comes last because the resource already determines it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectIdentity {
    /// The API group; `""` is the core group.
    pub group: String,
    pub version: String,
    /// The lowercase plural resource name, e.g. `deployments`.
    pub resource: String,
    /// `""` for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    pub kind: String,
}

impl ObjectIdentity {
    /// Cluster-scoped objects are the ones without a namespace.
    pub fn is_cluster_scoped(&self) -> bool {
        self.namespace.is_empty()
    }

    /// Which object this is, whatever version it is served at.
    pub fn workload_ref(&self) -> WorkloadRef {
        WorkloadRef::new(&self.group, &self.resource, &self.namespace, &self.name)
    }
}

/// A workload object in the WDS, reduced to what selection looks at.
///
/// There is deliberately no deletion marker: objects being deleted still match
/// (docs/upstream-behaviour.md#selecting-objects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadObject {
    pub identity: ObjectIdentity,
    pub resource_version: String,
    pub labels: Labels,
}

impl WorkloadObject {
    /// What a Binding lists of it.
    pub fn listed(&self) -> ListedObject {
        ListedObject {
            identity: self.identity.clone(),
            resource_version: self.resource_version.clone(),
        }
    }
}

/// What a Binding lists of a selected object: which it is and its resourceVersion. Its labels
/// matter only to selecting it; kept with every selection, they were most of its size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedObject {
    pub identity: ObjectIdentity,
    pub resource_version: String,
}

/// A WEC, known by its ManagedCluster name and labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wec {
    pub name: String,
    pub labels: Labels,
}
