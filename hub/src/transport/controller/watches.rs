//! What the watches of wrapped objects and BindingPolicies show, taken as the controller's
//! [`Input`]s.

use std::collections::{BTreeSet, HashMap};

use ks_shared::api::BindingPolicy;
use ks_shared::names::ORIGIN_BINDING_LABEL;
use ks_shared::runtime::Seen;
use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::expectations::{Expectations, Sight};
use super::state::work_key;
use crate::transport::plan::revisions::Revisions;
use crate::transport::types::{Unapplied, WorkKey};

/// What to reconcile.
pub(super) enum Input {
    Binding(String),
    /// Only the status of the Binding's ManifestWorks or of its policy changed.
    Reported(String),
    /// CustomTransforms changed, or a cache was (re-)listed: every Binding may render
    /// differently, or its inputs changed unseen while a watch was down.
    All,
    /// A WEC's inventory object or customization changed: its template properties may have, or
    /// it may have been accepted.
    Cluster(String),
    /// What a wrapped object holds, or has its destination hold for it, changed, or it went: the
    /// [`sharers`] labels of the others in its mailbox may.
    Holdings(String),
    /// The destination of a mailbox reports objects it could not apply, not reported before.
    Unapplied(String, Vec<Unapplied>),
}

/// The mailbox whose [`sharers`] labels may change, when the watch shows a wrapped object whose
/// holdings (by `fingerprint`, kept in `fingerprints`) changed or that went.
pub(super) fn holdings_changed<W: Resource>(
    fingerprints: &mut HashMap<WorkKey, u64>,
    seen: &Seen<'_, W>,
    fingerprint: impl Fn(&W) -> u64,
) -> Option<Input> {
    match seen {
        Seen::Changed(work) => {
            let key = work_key(*work);
            let print = fingerprint(work);
            (fingerprints.insert(key.clone(), print) != Some(print)).then_some(Input::Holdings(key.0))
        }
        Seen::Deleted(work) => {
            let key = work_key(*work);
            fingerprints.remove(&key);
            Some(Input::Holdings(key.0))
        }
        // Every Binding is planned again (`Input::All`), and the next change of each wrapped
        // object counts as one (the list does not show them one by one).
        Seen::Listed => {
            fingerprints.clear();
            None
        }
    }
}

/// What the watch shows a wrapped object's destination could not apply that it had not shown
/// for that wrapped object before (`told`: what it has shown, by wrapped object).
pub(super) fn newly_unapplied<'a, W: Resource + 'a>(
    told: &mut HashMap<WorkKey, BTreeSet<Unapplied>>,
    seen: &Seen<'a, W>,
    unapplied: impl Fn(&'a W) -> &'a [Unapplied],
) -> Option<Input> {
    match seen {
        Seen::Changed(work) => {
            let key = work_key(*work);
            let now: BTreeSet<Unapplied> = unapplied(work).iter().cloned().collect();
            let before = told.remove(&key).unwrap_or_default();
            let new: Vec<Unapplied> = now.difference(&before).cloned().collect();
            if !now.is_empty() {
                told.insert(key.clone(), now);
            }
            (!new.is_empty()).then_some(Input::Unapplied(key.0, new))
        }
        Seen::Deleted(work) => {
            told.remove(&work_key(*work));
            None
        }
        Seen::Listed => None,
    }
}

pub(super) fn seen_work<W: Resource>(
    expectations: &std::sync::Mutex<Expectations<W>>,
    revisions: &mut Revisions<WorkKey>,
    seen: Seen<'_, W>,
) -> Option<Input> {
    let mut expectations = expectations.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (work, gone) = match seen {
        Seen::Changed(work) => (work, false),
        Seen::Deleted(work) => (work, true),
        Seen::Listed => {
            expectations.relisted();
            revisions.clear();
            return Some(Input::All);
        }
    };
    let key = work_key(work);
    let deleted = gone || work.meta().deletion_timestamp.is_some();
    let changed = if gone {
        revisions.forget(&key);
        true
    } else {
        revisions.changed(&key, work.meta())
    };
    let version = work.meta().resource_version.clone().unwrap_or_default();
    let sight = Sight {
        version: &version,
        deleted,
    };
    // Its Binding's plans and propagation counts have read this write since its reply: planning
    // it again for it, one Binding at a time, only delays those with something to write.
    if expectations.observed(&key, sight, Instant::now()) {
        return None;
    }
    let binding = work.labels().get(ORIGIN_BINDING_LABEL)?.clone();
    Some(if changed {
        Input::Binding(binding)
    } else {
        Input::Reported(binding)
    })
}

/// What the watch of BindingPolicies shows, and the input it is. A Binding is planned only while
/// its policy is there and staying (see [`binding::policy_leaving`]), so a policy seen for the first
/// time (also after its Binding), replaced or leaving has its Binding planned again. Its status
/// changing (the binding controller's, or the propagation this controller writes) only needs the
/// propagation written again: once its status exists (the binding controller writes it right
/// after the Binding), and when someone else changed it.
pub(super) fn seen_policy(revisions: &mut Revisions<String>, seen: Seen<'_, BindingPolicy>) -> Option<Input> {
    match seen {
        Seen::Changed(policy) => {
            let name = policy.name_any();
            Some(if revisions.changed(&name, &policy.metadata) {
                Input::Binding(name)
            } else {
                Input::Reported(name)
            })
        }
        Seen::Deleted(policy) => {
            let name = policy.name_any();
            revisions.forget(&name);
            Some(Input::Binding(name))
        }
        Seen::Listed => {
            revisions.clear();
            Some(Input::All)
        }
    }
}
