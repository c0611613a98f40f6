//! The curve parts: the bulk run at several object counts (`objects`) or WEC counts (`wecs`),
//! each point with each implementation (alternating which goes first). Once an implementation
//! did not finish a point within its cap, its larger points are not tried.

use std::collections::BTreeSet;
use std::time::Instant;

use ks_tests::stack::Stack;

use super::bulk::POLITE;
use super::markdown::curve_table;
use super::propagation::{Load, its_alone, propagate};
use super::results::{Outcome, Output, Part, Point};
use super::simulated::simulated_wecs;
use super::{Knobs, clean_up, knob, list, order, switch_to};

pub async fn run(stack: &Stack, knobs: &Knobs, part: Part) -> anyhow::Result<Output> {
    let mut scale: Vec<(usize, usize)> = match part {
        Part::Objects => knobs
            .curve_objects
            .iter()
            .map(|&objects| (objects, knobs.curve_wecs_fixed))
            .collect(),
        _ => knobs
            .curve_wecs
            .iter()
            .map(|&wecs| (knobs.curve_wec_objects, wecs))
            .collect(),
    };
    // Smallest first: simulated WECs are only added, and a point not finished ends the curve.
    scale.sort_unstable();
    let mut output = Output::default();
    let mut unfinished = BTreeSet::new();
    for (n, &(objects, wecs)) in scale.iter().enumerate() {
        let simulated = simulated_wecs(stack, wecs.saturating_sub(knobs.real_wecs().len())).await?;
        let load = Load {
            objects,
            namespaces: knobs.namespaces,
            real: knobs.real_wecs(),
            simulated: &simulated,
        };
        for i in order(n) {
            let cap_minutes = knobs.cap(i);
            if unfinished.contains(&i) {
                println!("== {i}: {objects} objects × {wecs} WECs: not tried, a smaller point did not finish");
                output.points.push(Point {
                    implementation: i,
                    objects,
                    wecs: load.wecs(),
                    outcome: Outcome::Skipped { cap_minutes },
                });
                continue;
            }
            println!("== {i}: {objects} objects × {} WECs", load.wecs());
            let started = Instant::now();
            switch_to(stack, i).await?;
            let (mut outcome, mut notes, finals) = propagate(stack, knobs, i, &load).await?;
            let finished = matches!(outcome, Outcome::Finished(_));
            clean_up(stack, finished, POLITE).await?;
            its_alone(stack, i, &load, &mut outcome, &mut notes, finals).await?;
            if !finished {
                unfinished.insert(i);
            }
            output.figures.notes.push(notes);
            output.points.push(Point {
                implementation: i,
                objects,
                wecs: load.wecs(),
                outcome,
            });
            println!("   ({:.0} s)", started.elapsed().as_secs_f64());
        }
    }
    println!("\n{}", curve_table(&output.points));
    output.knobs = match part {
        Part::Objects => vec![
            knob("curve-objects", list(&knobs.curve_objects)),
            knob("curve-wecs-fixed", knobs.curve_wecs_fixed),
        ],
        _ => vec![
            knob("curve-wecs", list(&knobs.curve_wecs)),
            knob("curve-wec-objects", knobs.curve_wec_objects),
        ],
    };
    output.knobs.extend([
        knob("namespaces", knobs.namespaces),
        knob("without-real-wecs", knobs.without_real_wecs),
        knob("kubectl-parallel", knobs.kubectl_parallel),
        knob("idle", knobs.idle),
        knob("upstream-cap-minutes", knobs.upstream_cap_minutes),
        knob("ours-cap-minutes", knobs.ours_cap_minutes),
    ]);
    Ok(output)
}
