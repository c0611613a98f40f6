//! Kubernetes Events on WDS objects when their health changes on a WEC, and when their status
//! first comes back; on StatusCollectors when their errors change (`kubectl describe` shows
//! them). Published through a paced queue ([`crate::events::Paced`]); kube's recorder folds a
//! repeated event (same object, WEC and verdict) into a series.

use k8s_openapi::api::core::v1::ObjectReference;
use ks_shared::api::{Health, Verdict};
use kube::Client;
use kube::runtime::events::{Event, EventType};
use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;

use crate::events::Paced;

/// Where the status controller's Events are said. Clones share the queue.
#[derive(Clone)]
pub struct StatusEvents {
    paced: Paced,
}

impl StatusEvents {
    /// Starts publishing into the WDS of `client` until `stop`; `dropped` counts what did not fit
    /// the queue.
    pub fn start(client: Client, dropped: Counter, stop: &CancellationToken) -> StatusEvents {
        StatusEvents {
            paced: Paced::start(client, "kubestellar-status", dropped, stop),
        }
    }

    /// Says that the object `regarding` is now `health` on `wec`.
    pub fn changed(&self, regarding: ObjectReference, wec: &str, health: &Health) {
        self.tell(regarding, event(wec, health));
    }

    /// Says that the object `regarding`, which had no status, has the status its WECs report.
    pub fn status_returned(&self, regarding: ObjectReference) {
        let returned = Event {
            type_: EventType::Normal,
            reason: "StatusReturned".into(),
            note: Some("the status its WECs report is returned here for the first time".into()),
            action: "ReturnStatus".into(),
            secondary: None,
        };
        self.tell(regarding, returned);
    }

    /// Says what became of the StatusCollector `regarding`'s errors (`before`, `after`): a new
    /// error, or none left.
    pub fn collector_checked(&self, regarding: ObjectReference, before: &[String], after: &[String]) {
        if let Some(event) = collector_event(before, after) {
            self.tell(regarding, event);
        }
    }

    fn tell(&self, regarding: ObjectReference, event: Event) {
        self.paced.tell(regarding, event);
    }
}

/// The Event for an object that is now `health` on `wec`: its reason the verdict, a warning when
/// degraded, related to the WEC's ManagedCluster (so that each WEC's events form their own
/// series).
fn event(wec: &str, health: &Health) -> Event {
    let note = if health.reason.is_empty() {
        format!("{} on {wec}", health.verdict)
    } else {
        format!("{} on {wec}: {}", health.verdict, health.reason)
    };
    Event {
        type_: match health.verdict {
            Verdict::Degraded => EventType::Warning,
            _ => EventType::Normal,
        },
        reason: health.verdict.to_string(),
        note: Some(crate::events::note(&note)),
        action: "JudgeHealth".into(),
        secondary: Some(ObjectReference {
            api_version: Some("cluster.open-cluster-management.io/v1".into()),
            kind: Some("ManagedCluster".into()),
            name: Some(wec.to_string()),
            ..Default::default()
        }),
    }
}

/// The Event for a StatusCollector whose errors went from `before` to `after`.
fn collector_event(before: &[String], after: &[String]) -> Option<Event> {
    if before == after {
        return None;
    }
    let (type_, reason, note) = match after {
        [] => (
            EventType::Normal,
            "Valid",
            "its expressions are valid and evaluate".to_string(),
        ),
        [only] => (EventType::Warning, "Invalid", only.clone()),
        [first, rest @ ..] => (
            EventType::Warning,
            "Invalid",
            format!("{first} (and {} more)", rest.len()),
        ),
    };
    Some(Event {
        type_,
        reason: reason.into(),
        note: Some(crate::events::note(&note)),
        action: "CheckCollector".into(),
        secondary: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collector_is_told_of_each_new_error_and_of_being_mended() {
        let bad = ["select: undeclared reference to 'x'".to_string()];
        let told = collector_event(&[], &bad).unwrap();
        assert_eq!((told.type_, told.reason.as_str()), (EventType::Warning, "Invalid"));
        assert_eq!(told.note.as_deref(), Some(bad[0].as_str()));
        assert!(collector_event(&bad, &bad).is_none(), "the same errors are told once");
        let two = [bad[0].clone(), "filter: no such field".into()];
        assert!(
            collector_event(&bad, &two)
                .unwrap()
                .note
                .unwrap()
                .ends_with("(and 1 more)")
        );
        let mended = collector_event(&two, &[]).unwrap();
        assert_eq!((mended.type_, mended.reason.as_str()), (EventType::Normal, "Valid"));
        assert!(collector_event(&[], &[]).is_none());
    }

    #[test]
    fn a_degraded_object_is_a_warning_naming_its_wec_and_why() {
        let degraded = Health {
            verdict: Verdict::Degraded,
            reason: "Failed: DeadlineExceeded".into(),
        };
        let said = event("cluster1", &degraded);
        assert_eq!((said.type_, said.reason.as_str()), (EventType::Warning, "Degraded"));
        assert_eq!(
            said.note.as_deref(),
            Some("Degraded on cluster1: Failed: DeadlineExceeded")
        );
        assert_eq!(said.secondary.unwrap().name.as_deref(), Some("cluster1"));
        let healthy = event(
            "cluster2",
            &Health {
                verdict: Verdict::Healthy,
                reason: String::new(),
            },
        );
        assert_eq!(healthy.type_, EventType::Normal);
        assert_eq!(healthy.note.as_deref(), Some("Healthy on cluster2"));
        let long = Health {
            verdict: Verdict::Degraded,
            reason: "é".repeat(2000),
        };
        assert!(event("cluster1", &long).note.unwrap().len() <= 1024);
    }
}
