//! The wrapped objects a Binding calls for in each of its WECs' mailboxes, and how far its
//! objects got there.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ks_shared::api::{Binding, Propagation};
use kube::ResourceExt;

use super::binding::{Cached, Desired, Inputs, entries};
use super::items::{Failing, Item, Items, customized, items, oversized};
use super::names::{shard_of, shard_work_name};
use super::{propagation, sharding, template};
use crate::informers::WorkloadRef;
use crate::transport::plugin::{Error, Plugin};
use crate::transport::types::{Delivery, Identity, Landed, Origin, WorkKey};

/// How far the Binding's objects got on each of its WECs: delivered by what its wrapped objects
/// hold as plans read them (`planned`: its own writes count from their replies), applied and
/// available by what the WECs reported in the `reported` ones' status (the cache's).
pub(crate) fn propagation<P: Plugin>(
    plugin: &P,
    binding: &Binding,
    planned: &[Arc<P::Cached>],
    reported: &[Arc<P::Cached>],
) -> Propagation {
    let wecs = binding.spec.destinations.iter().map(|destination| {
        let mailbox = plugin.mailbox(&destination.cluster_id);
        let landed = |works: &[Arc<P::Cached>]| -> Landed {
            works
                .iter()
                .filter(|w| w.namespace().as_deref() == Some(mailbox.as_str()))
                .map(|w| plugin.landed(w))
                .sum()
        };
        let landed = Landed {
            delivered: landed(planned).delivered,
            ..landed(reported)
        };
        (destination.cluster_id.clone(), landed)
    });
    propagation::summarize(entries(binding).count(), wecs)
}

/// The wrapped objects `inputs.binding` calls for in each of its WECs' mailboxes. An object
/// whose cache is not filled is not known: the error says so, and the WECs keep what they have.
/// An object in error is reported, and keeps on each WEC what the WEC's wrapped objects hold of
/// it (nothing, if they hold nothing of it); the other objects are planned as ever.
pub(crate) fn plan<P: Plugin>(inputs: &Inputs<'_, P>) -> Result<Desired<P::Wrapped>, Error> {
    if let Some((entry, _)) = inputs.objects.iter().find(|(_, c)| matches!(c, Cached::Unfilled)) {
        return Err(Error::Unfilled(entry.object.resource.clone()));
    }
    let binding = inputs.binding;
    let binding_name = binding.name_any();
    let (items, failed, mut errors) = items(inputs, &binding_name);
    let (mut frozen, mut unread) = (BTreeSet::new(), BTreeSet::new());
    let origin = Origin {
        binding: &binding_name,
        binding_uid: &binding.uid().unwrap_or_default(),
        binding_generation: binding.metadata.generation.unwrap_or_default(),
        wds: inputs.wds_name,
    };
    let mut works = BTreeMap::new();
    let mut growth = template::Growth::default();
    for destination in &binding.spec.destinations {
        let mailbox = &inputs.plugin.mailbox(&destination.cluster_id);
        growth.next_wec();
        let (mut items, mut failing) = customized(
            &items,
            &destination.cluster_id,
            inputs.properties,
            &mut growth,
            &mut errors,
        );
        failing.extend(oversized(&items, inputs.limits, &mut errors));
        failing.extend(failed.iter().map(|(key, failed)| (key.clone(), failed.clone())));
        if !failing.is_empty() {
            let to_read = keep_last_good(inputs, mailbox, &failing, items.to_mut());
            if !to_read.is_empty() {
                frozen.insert(mailbox.clone());
                unread.extend(to_read);
                continue;
            }
        }
        // By position in key order from here (see `sharding::assign`).
        let listed: Vec<(&WorkloadRef, &Item)> = items.iter().collect();
        let sizes: Vec<(&WorkloadRef, usize)> = listed.iter().map(|(k, item)| (*k, item.size)).collect();
        let previous = previous_shards(inputs.plugin, inputs.current, &origin, mailbox, &listed);
        let assigned = match sharding::assign(&sizes, &previous, inputs.limits) {
            Ok(assigned) => assigned,
            // Only last good content can be too large now: the limits shrank below it.
            Err(err) => {
                errors.push(format!("{mailbox}: {err}; its wrapped objects stay as they are"));
                frozen.insert(mailbox.clone());
                continue;
            }
        };
        let mut shards: BTreeMap<usize, Vec<&Item>> = BTreeMap::new();
        for ((_, item), shard) in listed.iter().zip(assigned) {
            shards.entry(shard).or_default().push(item);
        }
        let existing = names_in(inputs.current, mailbox);
        let none = BTreeSet::new();
        let in_place = inputs.in_place.get(mailbox).unwrap_or(&none);
        for (shard, mut members) in shards {
            members.sort_by(|a, b| a.place.cmp(&b.place));
            let only_uid = (inputs.limits.max_count == 1).then(|| members[0].uid.as_str());
            let name = shard_work_name(&origin, shard, only_uid, &existing);
            let deliveries: Vec<&Delivery> = members.iter().map(|item| &item.delivery).collect();
            works.insert(
                (mailbox.clone(), name.clone()),
                inputs.plugin.wrap(&origin, mailbox, &name, &deliveries, in_place),
            );
        }
    }
    errors.sort();
    errors.dedup();
    Ok(Desired {
        works,
        errors,
        templated: items.values().any(|item| item.templated),
        frozen,
        unread,
    })
}

/// `items` for `mailbox` with each of `failing` as the mailbox's wrapped objects hold it (its
/// last good content), or without it where they hold nothing of it (it never got there). The
/// wrapped objects that hold some of them when [`Inputs::last_good`] does not have their
/// content: to read before `items` can be delivered.
fn keep_last_good<P: Plugin>(
    inputs: &Inputs<'_, P>,
    mailbox: &str,
    failing: &Failing,
    items: &mut Items,
) -> BTreeSet<WorkKey> {
    let holders: HashMap<&Identity, WorkKey> = inputs
        .current
        .iter()
        .filter(|work| work.namespace().as_deref() == Some(mailbox))
        .flat_map(|work| {
            let key = (mailbox.to_string(), work.name_any());
            inputs.plugin.held(work).iter().map(move |h| (&h.identity, key.clone()))
        })
        .collect();
    let mut unread = BTreeSet::new();
    for (key, failed) in failing {
        items.remove(key);
        let Some(holder) = holders.get(&failed.identity) else {
            continue;
        };
        match inputs.last_good.get(&(mailbox.to_string(), failed.identity.clone())) {
            Some(manifest) => {
                items.insert(key.clone(), failed.kept(manifest));
            }
            None => {
                unread.insert(holder.clone());
            }
        }
    }
    unread
}

/// The names of the wrapped objects in `mailbox` among `current`: a shard keeps the name it has.
fn names_in<W: kube::Resource>(current: &[Arc<W>], mailbox: &str) -> BTreeSet<String> {
    current
        .iter()
        .filter(|w| w.namespace().as_deref() == Some(mailbox))
        .map(|w| w.name_any())
        .collect()
}

/// Where each of `listed` is now, by the existing wrapped objects' contents (one pass over
/// what they hold, however many objects and shards there are).
fn previous_shards<P: Plugin>(
    plugin: &P,
    current: &[Arc<P::Cached>],
    origin: &Origin<'_>,
    mailbox: &str,
    listed: &[(&WorkloadRef, &Item)],
) -> Vec<Option<usize>> {
    let mut held: HashMap<Identity, usize> = HashMap::new();
    for work in current.iter().filter(|w| w.namespace().as_deref() == Some(mailbox)) {
        if let Some(shard) = shard_of(origin, &work.name_any()) {
            // One held twice (kept where it was until it lands where it moves) counts as in the
            // lower shard, whatever order the cache lists them in: a plan that chose by that
            // order moved it back and forth.
            for identity in plugin.held(work).iter().map(|h| &h.identity) {
                held.entry(identity.clone())
                    .and_modify(|held| *held = (*held).min(shard))
                    .or_insert(shard);
            }
        }
    }
    listed
        .iter()
        .map(|(_, item)| held.get(&item.identity).copied())
        .collect()
}
