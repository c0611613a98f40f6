//! Which `.status` goes into a WDS workload object: the decision table of
//! docs/upstream-behaviour.md#status-return for singleton and multi-WEC status return, as a pure
//! function of what selects the object and what its WECs reported.

use std::collections::{BTreeMap, BTreeSet};

use ks_shared::api::{Destination, DownsyncModulation};
use ks_shared::names::{MULTI_WEC_STATUS_LABEL, SINGLETON_STATUS_LABEL};

/// One Binding's say on an object: the folded modulation of its entry for the object, and the
/// Binding's destinations.
#[derive(Clone, Copy, Debug)]
pub struct Selecting<'a> {
    pub modulation: &'a DownsyncModulation,
    pub destinations: &'a [Destination],
}

/// What a WEC has reported on the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// A WorkStatus exists but its `.status` is still null.
    Pending,
    /// A WorkStatus exists and carries a `.status`.
    Status,
}

/// What to do with the object's `.status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Returned {
    /// Leave the object alone, labels included: its one WEC has not reported a status yet.
    Nothing,
    /// KubeStellar no longer returns status: reset `.status` to `{}` and drop the markers, if a
    /// marker shows KubeStellar wrote the current status.
    Clear,
    /// Copy the status this WEC reported.
    Singleton { wec: String },
    /// Combine the statuses these WECs reported (sorted; at least two).
    Aggregated { wecs: Vec<String> },
}

impl Returned {
    /// The marker label the object should carry once this is written; `None` for [`Returned::Clear`]
    /// (no marker) and [`Returned::Nothing`] (nothing is written). Upstream marks a status copied
    /// from one WEC as singleton even when multi-WEC return asked for it
    /// (docs/upstream-behaviour.md#status-return).
    pub fn marker_label(&self) -> Option<&'static str> {
        match self {
            Returned::Singleton { .. } => Some(SINGLETON_STATUS_LABEL),
            Returned::Aggregated { .. } => Some(MULTI_WEC_STATUS_LABEL),
            Returned::Nothing | Returned::Clear => None,
        }
    }
}

/// Objects whose `.status` KubeStellar never writes, whatever is requested
/// (docs/upstream-behaviour.md#status-return): a Namespace's or CRD's status belongs to the WDS's
/// own controllers.
pub fn status_never_returned(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("", "Namespace") | ("apiextensions.k8s.io", "CustomResourceDefinition")
    )
}

/// Decides the object's `.status` from the Bindings that select it and the reports of its WECs
/// (keyed by WEC name), following docs/upstream-behaviour.md#status-return row by row.
///
/// Only *qualified* WECs count: the destinations of the Bindings that ask for that kind of return.
/// A Binding that selects the object without asking sends it elsewhere without changing the
/// outcome.
pub fn decide<'a>(selecting: impl IntoIterator<Item = Selecting<'a>>, reports: &BTreeMap<String, Report>) -> Returned {
    let Qualified {
        singleton: ws,
        multi_wec: wm,
    } = Qualified::from_bindings(selecting);
    if let (Some(ws), Some(wm)) = (&ws, &wm) {
        let all: BTreeSet<&str> = ws.union(wm).copied().collect();
        return match single(&all) {
            Some(wec) => singleton(wec, reports),
            None => multi(&all, reports),
        };
    }
    // Here at most one kind of return is requested.
    if let Some(wec) = wm.as_ref().or(ws.as_ref()).and_then(single) {
        return singleton(wec, reports);
    }
    match wm {
        Some(wm) if !wm.is_empty() => multi(&wm, reports),
        _ => Returned::Clear,
    }
}

/// The qualified WEC sets; `None` where no Binding asks for that kind of return.
#[derive(Default)]
struct Qualified<'a> {
    singleton: Option<BTreeSet<&'a str>>,
    multi_wec: Option<BTreeSet<&'a str>>,
}

impl<'a> Qualified<'a> {
    fn from_bindings(selecting: impl IntoIterator<Item = Selecting<'a>>) -> Self {
        let mut qualified = Qualified::default();
        for binding in selecting {
            let wecs = binding.destinations.iter().map(|d| d.cluster_id.as_str());
            if binding.modulation.want_singleton_reported_state {
                qualified.singleton.get_or_insert_default().extend(wecs.clone());
            }
            if binding.modulation.want_multi_wec_reported_state {
                qualified.multi_wec.get_or_insert_default().extend(wecs);
            }
        }
        qualified
    }
}

/// The one member of a set of exactly one.
fn single<'s>(wecs: &BTreeSet<&'s str>) -> Option<&'s str> {
    match wecs.len() {
        1 => wecs.first().copied(),
        _ => None,
    }
}

/// Singleton return from `wec`: its status if reported, nothing while it is pending, and a clear
/// when the WEC has no WorkStatus for the object.
fn singleton(wec: &str, reports: &BTreeMap<String, Report>) -> Returned {
    match reports.get(wec) {
        Some(Report::Status) => Returned::Singleton { wec: wec.to_string() },
        Some(Report::Pending) => Returned::Nothing,
        None => Returned::Clear,
    }
}

/// Multi-WEC return from `wecs`: the WECs that reported a status are combined; one alone is
/// copied as a singleton, none clears.
fn multi(wecs: &BTreeSet<&str>, reports: &BTreeMap<String, Report>) -> Returned {
    let mut reported: Vec<String> = wecs
        .iter()
        .filter(|wec| reports.get(**wec) == Some(&Report::Status))
        .map(|wec| wec.to_string())
        .collect();
    match reported.len() {
        0 => Returned::Clear,
        1 => Returned::Singleton {
            wec: reported.remove(0),
        },
        _ => Returned::Aggregated { wecs: reported },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn destinations(wecs: &[&str]) -> Vec<Destination> {
        wecs.iter()
            .map(|w| Destination {
                cluster_id: w.to_string(),
            })
            .collect()
    }

    fn modulation(singleton: bool, multi_wec: bool) -> DownsyncModulation {
        DownsyncModulation {
            want_singleton_reported_state: singleton,
            want_multi_wec_reported_state: multi_wec,
            ..Default::default()
        }
    }

    /// A Binding as (wants singleton, wants multi-WEC, destinations).
    type Spec<'a> = (bool, bool, &'a [&'a str]);

    fn decide_for(bindings: &[Spec], reports: &[(&str, Report)]) -> Returned {
        let owned: Vec<(DownsyncModulation, Vec<Destination>)> = bindings
            .iter()
            .map(|(s, m, wecs)| (modulation(*s, *m), destinations(wecs)))
            .collect();
        let reports = reports.iter().map(|(w, r)| (w.to_string(), *r)).collect();
        let selecting = owned.iter().map(|(modulation, destinations)| Selecting {
            modulation,
            destinations,
        });
        decide(selecting, &reports)
    }

    fn from(wec: &str) -> Returned {
        Returned::Singleton { wec: wec.into() }
    }

    fn aggregated(wecs: &[&str]) -> Returned {
        Returned::Aggregated {
            wecs: wecs.iter().map(|w| w.to_string()).collect(),
        }
    }

    const BOTH_REPORTED: [(&str, Report); 2] = [("cluster1", Report::Status), ("cluster2", Report::Status)];

    #[test]
    fn singleton_with_one_qualified_wec_copies_its_status() {
        assert_eq!(
            decide_for(&[(true, false, &["cluster1"])], &BOTH_REPORTED),
            from("cluster1")
        );
    }

    #[test]
    fn singleton_with_zero_or_several_wecs_clears() {
        assert_eq!(decide_for(&[(true, false, &[])], &BOTH_REPORTED), Returned::Clear);
        let two: Spec = (true, false, &["cluster1", "cluster2"]);
        assert_eq!(decide_for(&[two], &BOTH_REPORTED), Returned::Clear);
    }

    #[test]
    fn an_overlapping_policy_without_the_flag_does_not_stop_the_return() {
        let asking: Spec = (true, false, &["cluster1"]);
        let not_asking: Spec = (false, false, &["cluster2"]);
        assert_eq!(decide_for(&[asking, not_asking], &BOTH_REPORTED), from("cluster1"));
    }

    #[test]
    fn qualified_wecs_are_united_across_policies() {
        let first: Spec = (true, false, &["cluster1"]);
        let second: Spec = (true, false, &["cluster2"]);
        assert_eq!(decide_for(&[first, second], &BOTH_REPORTED), Returned::Clear);
        let same: Spec = (true, false, &["cluster1"]);
        assert_eq!(decide_for(&[first, same], &BOTH_REPORTED), from("cluster1"));
    }

    #[test]
    fn a_pending_status_changes_nothing_and_a_missing_workstatus_clears() {
        let one: Spec = (true, false, &["cluster1"]);
        assert_eq!(decide_for(&[one], &[("cluster1", Report::Pending)]), Returned::Nothing);
        assert_eq!(decide_for(&[one], &[("cluster2", Report::Status)]), Returned::Clear);
    }

    #[test]
    fn multi_wec_aggregates_the_wecs_that_reported() {
        let multi: Spec = (false, true, &["cluster1", "cluster2", "cluster3"]);
        assert_eq!(
            decide_for(&[multi], &BOTH_REPORTED),
            aggregated(&["cluster1", "cluster2"])
        );
        let one_reported = [("cluster2", Report::Status), ("cluster1", Report::Pending)];
        assert_eq!(decide_for(&[multi], &one_reported), from("cluster2"));
        assert_eq!(decide_for(&[multi], &[]), Returned::Clear);
    }

    #[test]
    fn multi_wec_with_one_wec_is_a_singleton_and_with_none_clears() {
        assert_eq!(
            decide_for(&[(false, true, &["cluster2"])], &BOTH_REPORTED),
            from("cluster2")
        );
        assert_eq!(decide_for(&[(false, true, &[])], &BOTH_REPORTED), Returned::Clear);
        assert_eq!(
            decide_for(&[(false, true, &["cluster2"])], &[("cluster2", Report::Pending)]),
            Returned::Nothing
        );
    }

    #[test]
    fn both_requests_use_the_union_of_their_wecs() {
        let singleton: Spec = (true, false, &["cluster1"]);
        let multi: Spec = (false, true, &["cluster2"]);
        assert_eq!(
            decide_for(&[singleton, multi], &BOTH_REPORTED),
            aggregated(&["cluster1", "cluster2"])
        );
        let both_one: Spec = (true, true, &["cluster2"]);
        assert_eq!(decide_for(&[both_one], &BOTH_REPORTED), from("cluster2"));
        assert_eq!(decide_for(&[(true, true, &[])], &BOTH_REPORTED), Returned::Clear);
    }

    #[test]
    fn nothing_requested_clears() {
        assert_eq!(
            decide_for(&[(false, false, &["cluster1"])], &BOTH_REPORTED),
            Returned::Clear
        );
        assert_eq!(decide_for(&[], &BOTH_REPORTED), Returned::Clear);
    }

    #[test]
    fn markers_follow_what_is_written() {
        assert_eq!(from("c").marker_label(), Some(SINGLETON_STATUS_LABEL));
        assert_eq!(aggregated(&["a", "b"]).marker_label(), Some(MULTI_WEC_STATUS_LABEL));
        assert_eq!(Returned::Clear.marker_label(), None);
        assert_eq!(Returned::Nothing.marker_label(), None);
    }

    #[test]
    fn namespaces_and_crds_never_get_status() {
        assert!(status_never_returned("", "Namespace"));
        assert!(status_never_returned(
            "apiextensions.k8s.io",
            "CustomResourceDefinition"
        ));
        assert!(!status_never_returned("apps", "Deployment"));
        assert!(!status_never_returned("example.com", "Namespace"));
    }

    fn binding() -> impl Strategy<Value = (bool, bool, Vec<&'static str>)> {
        let wecs = prop::sample::subsequence(vec!["cluster1", "cluster2", "cluster3"], 0..=3);
        (any::<bool>(), any::<bool>(), wecs)
    }

    fn reports() -> impl Strategy<Value = Vec<(&'static str, Report)>> {
        let report = prop::sample::select(vec![Report::Pending, Report::Status]);
        prop::collection::vec(
            (prop::sample::select(vec!["cluster1", "cluster2", "cluster3"]), report),
            0..4,
        )
    }

    fn decide_owned(bindings: &[(bool, bool, Vec<&str>)], reports: &[(&str, Report)]) -> Returned {
        let specs: Vec<Spec> = bindings.iter().map(|(s, m, w)| (*s, *m, w.as_slice())).collect();
        decide_for(&specs, reports)
    }

    proptest! {
        #[test]
        fn a_binding_asking_for_nothing_never_changes_the_outcome(
            bindings in prop::collection::vec(binding(), 0..4),
            bystander in prop::sample::subsequence(vec!["cluster1", "cluster2", "cluster3"], 0..=3),
            reports in reports(),
        ) {
            let mut with_bystander = bindings.clone();
            with_bystander.push((false, false, bystander));
            prop_assert_eq!(decide_owned(&bindings, &reports), decide_owned(&with_bystander, &reports));
        }

        #[test]
        fn the_order_of_the_bindings_never_matters(
            (bindings, shuffled) in prop::collection::vec(binding(), 0..4)
                .prop_flat_map(|b| (Just(b.clone()), Just(b).prop_shuffle())),
            reports in reports(),
        ) {
            prop_assert_eq!(decide_owned(&bindings, &reports), decide_owned(&shuffled, &reports));
        }
    }
}
