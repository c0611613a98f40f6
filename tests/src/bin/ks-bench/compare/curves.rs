//! The curve parts: the bulk run at several object counts (`objects`) or WEC counts (`wecs`),
//! each point with each implementation (alternating which goes first), and the objects curve's
//! largest points apart (`objects-large`). Once an implementation did not finish a point within
//! its cap, its larger points are not tried, also in `objects-large` after the `objects` part
//! (`smaller`: the points it kept). What the runs so far measured is kept after each
//! (`keep_so_far`), with the knobs of the whole curve.

use std::collections::BTreeSet;
use std::time::Instant;

use ks_tests::stack::Stack;

use super::markdown::curve_table;
use super::propagation::Load;
use super::report::Implementation;
use super::results::{Outcome, Output, Part, Point};
use super::{Knobs, knob, list, order, run_once, simulated};

pub async fn run(
    stack: &Stack,
    knobs: &Knobs,
    part: Part,
    smaller: &[Point],
    mut keep_so_far: impl FnMut(&Output) -> anyhow::Result<()>,
) -> anyhow::Result<Output> {
    let at_fixed_wecs = |counts: &[usize]| {
        counts
            .iter()
            .map(|&objects| (objects, knobs.curve_wecs_fixed))
            .collect()
    };
    let mut scale: Vec<(usize, usize)> = match part {
        Part::Objects => at_fixed_wecs(&knobs.curve_objects),
        Part::ObjectsLarge => at_fixed_wecs(&knobs.curve_objects_large),
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
    let mut unfinished = unfinished(smaller, knobs.curve_wecs_fixed);
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

/// The implementations that did not finish one of `points` at `wecs` WECs.
fn unfinished(points: &[Point], wecs: usize) -> BTreeSet<Implementation> {
    points
        .iter()
        .filter(|p| p.wecs == wecs && !matches!(p.outcome, Outcome::Finished(_)))
        .map(|p| p.implementation)
        .collect()
}

/// The knobs of the whole curve, as `--flag value`.
fn curve_knobs(knobs: &Knobs, part: Part) -> Vec<(String, String)> {
    let mut flags = match part {
        Part::Objects => vec![
            knob("curve-objects", list(&knobs.curve_objects)),
            knob("curve-wecs-fixed", knobs.curve_wecs_fixed),
        ],
        Part::ObjectsLarge => vec![
            knob("curve-objects-large", list(&knobs.curve_objects_large)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::results::Measured;

    #[test]
    fn the_largest_points_skip_whoever_did_not_finish_a_smaller_one() {
        let point = |implementation, wecs, outcome| Point {
            implementation,
            objects: 5000,
            wecs,
            outcome,
        };
        let smaller = [
            point(Implementation::Ours, 12, Outcome::Finished(Measured::default())),
            point(
                Implementation::Upstream,
                12,
                Outcome::DidNotFinish {
                    cap_minutes: 10.0,
                    so_far: Measured::default(),
                },
            ),
            point(Implementation::Ours, 52, Outcome::Skipped { cap_minutes: 30.0 }),
        ];
        assert_eq!(unfinished(&smaller, 12), BTreeSet::from([Implementation::Upstream]));
        assert_eq!(unfinished(&smaller, 52), BTreeSet::from([Implementation::Ours]));
        assert!(unfinished(&[], 12).is_empty());
    }
}
