//! The curve parts: the bulk run at several object counts (`objects`) or WEC counts (`wecs`),
//! each point with each implementation (alternating which goes first). Once an implementation
//! did not finish a point within its cap, its larger points are not tried. What the runs so far
//! measured is kept after each (`keep_so_far`), with the knobs of the whole curve.

use std::collections::BTreeSet;
use std::time::Instant;

use ks_tests::stack::Stack;

use super::markdown::curve_table;
use super::propagation::Load;
use super::results::{Outcome, Output, Part, Point};
use super::{Knobs, knob, list, order, run_once, simulated};

pub async fn run(
    stack: &Stack,
    knobs: &Knobs,
    part: Part,
    mut keep_so_far: impl FnMut(&Output) -> anyhow::Result<()>,
) -> anyhow::Result<Output> {
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
    // Smallest first: a point not finished ends the curve.
    scale.sort_unstable();
    let mut output = Output {
        knobs: curve_knobs(knobs, part),
        ..Output::default()
    };
    let mut unfinished = BTreeSet::new();
    for (n, &(objects, wecs)) in scale.iter().enumerate() {
        let simulated = simulated::names(wecs.saturating_sub(knobs.real_wecs().len()));
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
                keep_so_far(&output)?;
                continue;
            }
            println!("== {i}: {objects} objects × {} WECs", load.wecs());
            let started = Instant::now();
            let (outcome, notes) = run_once(stack, knobs, i, &load).await?;
            if !matches!(outcome, Outcome::Finished(_)) {
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
            keep_so_far(&output)?;
        }
    }
    println!("\n{}", curve_table(&output.points));
    Ok(output)
}

/// The knobs of the whole curve, as `--flag value`.
fn curve_knobs(knobs: &Knobs, part: Part) -> Vec<(String, String)> {
    let mut flags = match part {
        Part::Objects => vec![
            knob("curve-objects", list(&knobs.curve_objects)),
            knob("curve-wecs-fixed", knobs.curve_wecs_fixed),
        ],
        _ => vec![
            knob("curve-wecs", list(&knobs.curve_wecs)),
            knob("curve-wec-objects", knobs.curve_wec_objects),
        ],
    };
    flags.extend([
        knob("namespaces", knobs.namespaces),
        knob("without-real-wecs", knobs.without_real_wecs),
        knob("kubectl-parallel", knobs.kubectl_parallel),
        knob("idle", knobs.idle),
        knob("upstream-cap-minutes", knobs.upstream_cap_minutes),
        knob("ours-cap-minutes", knobs.ours_cap_minutes),
    ]);
    flags
}
