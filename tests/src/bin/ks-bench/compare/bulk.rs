//! The bulk part, the headline run: `--bulk-objects` objects in `--namespaces` namespaces, each
//! with its own BindingPolicy, created with `kubectl apply`, to both real WECs and
//! `--simulated-wecs` simulated ones; once with each implementation.

use std::time::{Duration, Instant};

use ks_tests::stack::Stack;

use super::propagation::Load;
use super::report::{Figures, Implementation, Unit};
use super::results::{Outcome, Output};
use super::{Knobs, knob, order, run_once, simulated};

pub async fn run(stack: &Stack, knobs: &Knobs) -> anyhow::Result<Output> {
    let simulated = simulated::names(knobs.simulated_wecs);
    let load = Load {
        objects: knobs.bulk_objects,
        namespaces: knobs.namespaces,
        real: knobs.real_wecs(),
        simulated: &simulated,
    };
    Ok(Output {
        figures: runs(stack, knobs, &load).await?,
        knobs: vec![
            knob("bulk-objects", knobs.bulk_objects),
            knob("namespaces", knobs.namespaces),
            knob("simulated-wecs", knobs.simulated_wecs),
            knob("without-real-wecs", knobs.without_real_wecs),
            knob("kubectl-parallel", knobs.kubectl_parallel),
            knob("idle", knobs.idle),
            knob("upstream-cap-minutes", knobs.upstream_cap_minutes),
            knob("ours-cap-minutes", knobs.ours_cap_minutes),
        ]
        .into_iter()
        .chain(
            knobs
                .ocm_status_sync_seconds
                .map(|s| knob("ocm-status-sync-seconds", s)),
        )
        .collect(),
        ..Output::default()
    })
}

/// Once with each implementation; each run starts on a fresh stack, whose OCM agents have OCM's
/// default status sync, so `--ocm-status-sync-seconds` is set again for each.
async fn runs(stack: &Stack, knobs: &Knobs, load: &Load<'_>) -> anyhow::Result<Figures> {
    let mut figures = Figures::default();
    for i in order(0) {
        println!("== {i}: {} objects × {} WECs", load.objects, load.wecs());
        let started = Instant::now();
        if let Some(seconds) = knobs.ocm_status_sync_seconds {
            set_status_sync(stack, knobs, Duration::from_secs(seconds)).await?;
        }
        let (outcome, notes) = run_once(stack, knobs, i, load).await?;
        add_outcome(&mut figures, i, &outcome, knobs.idle);
        figures.notes.push(notes);
        println!("   ({:.0} s)", started.elapsed().as_secs_f64());
    }
    Ok(figures)
}

/// Restarts the real WECs' OCM agents with `every` as their work agents' status-sync interval.
async fn set_status_sync(stack: &Stack, knobs: &Knobs, every: Duration) -> anyhow::Result<()> {
    for wec in knobs.real_wecs() {
        stack.restart_klusterlet(wec, Some(every)).await?;
    }
    Ok(())
}

/// One run's figures; a run that did not finish shows its cap for the times it did not reach,
/// and what it had reached for the rest (lower bounds).
pub fn add_outcome(figures: &mut Figures, i: Implementation, outcome: &Outcome, idle: u64) {
    let (m, cap) = match outcome {
        Outcome::Finished(m) => (m, None),
        Outcome::DidNotFinish { cap_minutes, so_far } => (so_far, Some(*cap_minutes)),
        Outcome::Skipped { .. } => return,
    };
    figures.add(i, "created in the WDS (kubectl)", Unit::Seconds, m.created_seconds);
    let time = |figures: &mut Figures, name: &str, seconds: f64| match cap {
        Some(cap) if seconds == 0.0 => figures.did_not_finish(i, name, cap),
        _ => figures.add(i, name, Unit::Seconds, seconds),
    };
    time(figures, "all in every mailbox", m.in_mailboxes_seconds);
    // The same without the lag of the watch that shows it.
    if m.in_mailboxes_accepted_seconds > 0.0 {
        figures.add(
            i,
            "all in every mailbox, as the ITS accepted it",
            Unit::Seconds,
            m.in_mailboxes_accepted_seconds,
        );
    }
    // The hub's own share at a scale where kubectl's intake takes most of the time.
    if m.in_mailboxes_seconds > 0.0 {
        figures.add(
            i,
            "all in every mailbox, after kubectl finished",
            Unit::Seconds,
            (m.in_mailboxes_seconds - m.created_seconds).max(0.0),
        );
    }
    // Not measured without real WECs (`--without-real-wecs`).
    if m.on_wecs_seconds > 0.0 || cap.is_some() {
        time(figures, "all on both real WECs", m.on_wecs_seconds);
    }
    let count = |figures: &mut Figures, name: &str, unit: Unit, value: f64| match cap {
        Some(_) => figures.at_least(i, name, unit, value),
        None => figures.add(i, name, unit, value),
    };
    count(figures, "hub peak RSS", Unit::MiB, m.hub_peak_rss_mib);
    count(figures, "hub CPU seconds", Unit::Seconds, m.hub_cpu_seconds);
    count(figures, "hub's writes to the WDS", Unit::Count, m.hub_wds_writes as f64);
    count(
        figures,
        "ManifestWork writes",
        Unit::Count,
        m.manifestwork_writes as f64,
    );
    count(figures, "Binding writes", Unit::Count, m.binding_writes as f64);
    if cap.is_none() {
        figures.add(
            i,
            &format!("hub writes in {idle} s idle afterwards"),
            Unit::Count,
            m.idle_writes as f64,
        );
        figures.add(
            i,
            "ITS apiserver alone writes the same ManifestWorks",
            Unit::Seconds,
            m.apiserver_alone_seconds,
        );
    }
}
