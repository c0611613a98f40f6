//! What a Binding calls for: its plan's inputs gathered from the caches (and, for objects in
//! error, their last good content read from the ITS), and the plan made of them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ks_shared::api::Binding;
use ks_shared::names::CUSTOMIZATION_PROPERTIES_NAMESPACE;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use super::state::{Transport, of_binding, written};
use crate::informers::GroupResource;
use crate::transport::plan::binding::{Cached, Desired, Entry};
use crate::transport::plan::in_place::in_place;
use crate::transport::plan::{binding, template, works};
use crate::transport::plugin::{Error, Plugin};
use crate::transport::types::{Identity, identity};

impl<P: Plugin> Transport<P> {
    /// By mailbox of `binding`'s WECs, the objects whose copies there the WEC is to go on
    /// writing in place, from how every wrapped object there writes them ([`in_place`]).
    pub(super) fn written_in_place(&self, binding: &Binding) -> BTreeMap<String, BTreeSet<Identity>> {
        let name = binding.name_any();
        let mailboxes: BTreeSet<String> = binding
            .spec
            .destinations
            .iter()
            .map(|d| self.plugin.mailbox(&d.cluster_id))
            .collect();
        let in_mailboxes = |w: &P::Cached| w.namespace().is_some_and(|ns| mailboxes.contains(&ns));
        let mut by_mailbox: BTreeMap<String, Vec<Arc<P::Cached>>> = BTreeMap::new();
        for work in self.works_where(in_mailboxes) {
            by_mailbox
                // Every wrapped object is namespaced (its mailbox), and picked by it above.
                .entry(work.namespace().unwrap_or_default())
                .or_default()
                .push(work);
        }
        by_mailbox
            .iter()
            .map(|(mailbox, works)| {
                let (own, others): (Vec<_>, Vec<_>) = works.iter().partition(|w| of_binding(&***w, &name));
                let in_place = in_place(written(&*self.plugin, own), written(&*self.plugin, others));
                (mailbox.clone(), in_place)
            })
            .collect()
    }

    /// The wrapped objects `binding` calls for, from what the caches hold, with the last good
    /// content of its objects in error read from the ITS where the plan needs it (the cache
    /// keeps no manifests): only then, and only the wrapped objects holding them.
    pub(super) async fn desired_keeping_last_good(&self, binding: &Binding) -> Result<Desired<P::Wrapped>, Error> {
        let unfilled = self.informers.unsynced();
        let desired = self.desired(binding, &unfilled, &binding::LastGood::new())?;
        if desired.unread.is_empty() {
            return Ok(desired);
        }
        let mut last_good = binding::LastGood::new();
        for (mailbox, name) in &desired.unread {
            // One deleted meanwhile holds nothing: the plan leaves its mailbox as it is.
            let Some(work) = Api::<P::Wrapped>::namespaced(self.its.clone(), mailbox)
                .get_opt(name)
                .await?
            else {
                continue;
            };
            for manifest in self.plugin.delivered(&work) {
                last_good.insert((mailbox.clone(), identity(&manifest)), manifest);
            }
        }
        self.desired(binding, &unfilled, &last_good)
    }

    /// The wrapped objects `binding` calls for, from what the caches hold and `last_good`; the
    /// objects of a resource in `unfilled` are not known.
    pub(super) fn desired(
        &self,
        binding: &Binding,
        unfilled: &BTreeSet<GroupResource>,
        last_good: &binding::LastGood,
    ) -> Result<Desired<P::Wrapped>, Error> {
        let objects = binding::entries(binding)
            .map(|entry| {
                let cached = self.cached(&entry, unfilled);
                (entry, cached)
            })
            .collect();
        let current = self.current_works(&binding.name_any());
        let in_place = self.written_in_place(binding);
        works::plan(&binding::Inputs {
            plugin: &*self.plugin,
            binding,
            objects,
            removals: &binding::removals(&self.transforms.state()),
            properties: &|wec| self.properties(wec),
            current: &current,
            last_good,
            in_place: &in_place,
            wds_name: &self.settings.wds_name,
            limits: self.settings.limits,
            packaging: &self.packaging,
            first_seen: self.informers.first_seen(),
        })
    }

    /// What the WDS caches hold of a listed object.
    pub(super) fn cached(&self, entry: &Entry, unfilled: &BTreeSet<GroupResource>) -> Cached {
        if unfilled.contains(&entry.object.resource) {
            return Cached::Unfilled;
        }
        match (
            self.informers.get(&entry.object),
            self.informers.served(&entry.object.resource),
        ) {
            (Some(object), Some(served)) => Cached::Found(object, served),
            _ => Cached::Gone,
        }
    }

    /// A WEC's template properties, from its ManagedCluster and its customization ConfigMap.
    pub(super) fn properties(&self, wec: &str) -> BTreeMap<String, String> {
        let cluster = self.clusters.get(&ObjectRef::new(wec));
        let config = self
            .customizations
            .get(&ObjectRef::new(wec).within(CUSTOMIZATION_PROPERTIES_NAMESPACE));
        let data = config.as_ref().and_then(|c| c.data.clone()).unwrap_or_default();
        let binary_data = config
            .as_ref()
            .and_then(|c| c.binary_data.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0))
            .collect();
        let none = BTreeMap::new();
        let (labels, annotations) = match &cluster {
            Some(cluster) => P::properties_of(cluster),
            None => (&none, &none),
        };
        template::properties(&data, &binary_data, annotations, labels, wec)
    }
}
