//! What the convergence test's objects are called: the kinds it writes, and one episode's names
//! (an episode is one run of operations from a clean state: the generated run, or a replay of
//! some of its operations while shrinking). Every name starts with the episode's id, so an
//! episode never touches another's objects, nor another test's.

use kube::discovery::ApiResource;
use serde::{Deserialize, Serialize};

/// The WECs of the stack the test delivers to, by index in the operations.
pub const WECS: [&str; 2] = ["cluster1", "cluster2"];
/// The WDS the test writes to, and the ITS holding its WECs' mailboxes.
pub const WDS: &str = "wds1";
pub const ITS: &str = "its1";

/// On every object and Namespace of an episode (and on no other): its id.
pub const EPISODE_LABEL: &str = "convergence.ks-tests.io/episode";
/// On the foreign ManifestWorks an episode places in mailboxes, and on what they hold.
pub const FOREIGN_LABEL: &str = "convergence.ks-tests.io/foreign";
/// The field manager of the episode's `kubectl apply --server-side`.
pub const FIELD_MANAGER: &str = "ks-convergence";

/// The kinds of object the test writes in the WDS (Namespaces included).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Namespace,
    ConfigMap,
    Secret,
    Service,
    Deployment,
    Job,
    /// A custom resource of the CRD the test installs on the WDS and the WECs.
    Widget,
}

impl Kind {
    /// The namespaced kinds.
    pub const WORKLOADS: [Kind; 6] = [
        Kind::ConfigMap,
        Kind::Secret,
        Kind::Service,
        Kind::Deployment,
        Kind::Job,
        Kind::Widget,
    ];

    /// The API group; `widgets` is the group of the run's CRD.
    pub fn group(self, widgets: &str) -> &str {
        match self {
            Kind::Namespace | Kind::ConfigMap | Kind::Secret | Kind::Service => "",
            Kind::Deployment => "apps",
            Kind::Job => "batch",
            Kind::Widget => widgets,
        }
    }

    pub fn resource(self) -> &'static str {
        match self {
            Kind::Namespace => "namespaces",
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
            Kind::Service => "services",
            Kind::Deployment => "deployments",
            Kind::Job => "jobs",
            Kind::Widget => "widgets",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Kind::Namespace => "Namespace",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
            Kind::Service => "Service",
            Kind::Deployment => "Deployment",
            Kind::Job => "Job",
            Kind::Widget => "Widget",
        }
    }

    pub fn api_version(self, widgets: &str) -> String {
        match self.group(widgets) {
            "" => "v1".to_string(),
            group => format!("{group}/v1"),
        }
    }

    pub fn api_resource(self, widgets: &str) -> ApiResource {
        ApiResource {
            group: self.group(widgets).to_string(),
            version: "v1".to_string(),
            api_version: self.api_version(widgets),
            kind: self.kind().to_string(),
            plural: self.resource().to_string(),
        }
    }

    /// The kind whose resource (plural) is `resource`.
    pub fn of_resource(resource: &str) -> Option<Kind> {
        std::iter::once(Kind::Namespace)
            .chain(Kind::WORKLOADS)
            .find(|k| k.resource() == resource)
    }

    /// How kubectl names the resource, unambiguously (`deployments.apps`).
    pub fn kubectl_resource(self, widgets: &str) -> String {
        match self.group(widgets) {
            "" => self.resource().to_string(),
            group => format!("{}.{group}", self.resource()),
        }
    }
}

/// One object: its kind, namespace (`""` for a Namespace) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Namespace => write!(f, "Namespace {}", self.name),
            kind => write!(f, "{} {}/{}", kind.kind(), self.namespace, self.name),
        }
    }
}

/// The names of one episode, from the indices the operations use.
#[derive(Clone, Debug)]
pub struct Names {
    /// Unique to the episode: `cv-<pid>-<n>`.
    pub episode: String,
    /// The group of the run's CRD (shared by the run's episodes).
    pub widgets: String,
}

impl Names {
    pub fn namespace(&self, ns: u8) -> String {
        format!("{}-n{ns}", self.episode)
    }

    pub fn object(name: u8) -> String {
        format!("o{name}")
    }

    pub fn policy(&self, policy: u8) -> String {
        format!("{}-p{policy}", self.episode)
    }

    /// The policy delivering the episode's Namespaces to every WEC.
    pub fn base_policy(&self) -> String {
        format!("{}-base", self.episode)
    }

    pub fn transform(&self, transform: u8) -> String {
        format!("{}-t{transform}", self.episode)
    }

    /// A label key of the episode on the ManagedClusters.
    pub fn wec_label(&self, key: u8) -> String {
        format!("convergence.ks-tests.io/{}-k{key}", self.episode)
    }

    /// A foreign ManifestWork: its own name, or the name our hub gives the first ManifestWork of
    /// the episode's policy `named_after` (`<policy>-<wds>-0`).
    pub fn foreign_work(&self, work: u8, named_after: Option<u8>) -> String {
        match named_after {
            Some(policy) => format!("{}-{WDS}-0", self.policy(policy)),
            None => format!("{}-f{work}", self.episode),
        }
    }

    /// The WEC namespace a foreign ManifestWork creates and fills.
    pub fn foreign_namespace(&self, work: u8) -> String {
        format!("{}-f{work}", self.episode)
    }

    /// The CRD of the run's widgets.
    pub fn crd(&self) -> String {
        format!("widgets.{}", self.widgets)
    }
}
