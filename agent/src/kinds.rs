//! GVR → kind and scope, through discovery. Results are remembered; a GVR not known yet
//! (e.g. its CRD was installed after the agent started) re-runs discovery of its group version,
//! so new kinds work without a restart.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use kube::Client;
use kube::core::GroupVersion;
use kube::discovery::{ApiResource, Scope};

use crate::objects::Gvr;

/// What discovery says about one GVR.
#[derive(Clone, Debug)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// The remembered discovery results.
pub struct Kinds {
    client: Client,
    known: Mutex<HashMap<Gvr, Kind>>,
}

impl Kinds {
    pub fn new(client: Client) -> Kinds {
        Kinds {
            client,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// A GVR already resolved.
    pub fn known(&self, gvr: &Gvr) -> Option<Kind> {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(gvr)
            .cloned()
    }

    /// Resolves `gvr`, asking the WEC's discovery when it is not known yet; `None` when the
    /// WEC does not serve it (yet).
    pub async fn resolve(&self, gvr: &Gvr) -> Result<Option<Kind>, kube::Error> {
        if let Some(kind) = self.known(gvr) {
            return Ok(Some(kind));
        }
        let group_version = GroupVersion::gv(&gvr.group, &gvr.version);
        let group = match kube::discovery::pinned_group(&self.client, &group_version).await {
            Ok(group) => group,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(err) => return Err(err),
        };
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        for (resource, capabilities) in group.versioned_resources(&gvr.version) {
            let key = Gvr {
                group: gvr.group.clone(),
                version: gvr.version.clone(),
                resource: resource.plural.clone(),
            };
            let namespaced = capabilities.scope == Scope::Namespaced;
            known.insert(key, Kind { resource, namespaced });
        }
        Ok(known.get(gvr).cloned())
    }
}
