//! The latency part: one object at a time — delivery to both WECs, singleton status return,
//! multi-WEC status — `--repeats` runs per implementation, alternating.

use std::time::Instant;

use ks_tests::stack::Stack;

use super::multi_wec::multi_wec_scale;
use super::report::{Figures, Implementation, Unit};
use super::results::Output;
use super::{DEADLINE, Knobs, knob, order, quiesce, switch_to};
use crate::scenarios::delivery::delivery;
use crate::scenarios::status::singleton;

pub async fn run(stack: &Stack, knobs: &Knobs) -> anyhow::Result<Output> {
    let mut output = Output {
        knobs: vec![
            knob("repeats", knobs.repeats),
            knob("objects", knobs.objects),
            knob("changes", knobs.changes),
        ],
        ..Output::default()
    };
    for repeat in 0..knobs.repeats {
        for implementation in order(repeat) {
            println!("== run {} of {}: {implementation}", repeat + 1, knobs.repeats);
            let started = Instant::now();
            switch_to(stack, implementation).await?;
            one_run(stack, knobs, implementation, &mut output.figures).await?;
            println!("   ({:.0} s)", started.elapsed().as_secs_f64());
        }
    }
    Ok(output)
}

async fn one_run(stack: &Stack, knobs: &Knobs, i: Implementation, figures: &mut Figures) -> anyhow::Result<()> {
    let delivery = delivery(stack, knobs.objects).await?;
    quiesce(stack, DEADLINE).await?;
    figures.percentiles(i, "delivery: WDS create → on both WECs", delivery.total);
    figures.add(
        i,
        "delivery: ManifestWork generations per object",
        Unit::Count,
        delivery.writes as f64 / knobs.objects.max(1) as f64,
    );
    let returned = singleton(stack, knobs.changes).await?;
    figures.percentiles(i, "status: WEC change → WDS .status (singleton)", returned.latencies);
    let per_change = |count: f64| count / knobs.changes.max(1) as f64;
    figures.add(
        i,
        "status: WDS writes per change (singleton)",
        Unit::Count,
        per_change(returned.writes as f64),
    );
    figures.add(
        i,
        "status: Binding writes per change (singleton)",
        Unit::Count,
        per_change(returned.binding_writes as f64),
    );
    quiesce(stack, DEADLINE).await?;
    let multi = multi_wec_scale(stack, i, (knobs.changes / 5).max(2)).await?;
    quiesce(stack, DEADLINE).await?;
    figures.percentiles(i, "status: WDS scale → aggregated readyReplicas (2 WECs)", multi);
    Ok(())
}
