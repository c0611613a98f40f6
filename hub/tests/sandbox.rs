//! StatusCollector evaluations in their worker process (`ks-hub cel-worker`), run as the hub runs
//! them: an evaluation that needs more memory than the worker may hold, or more time than the
//! deadline, is an error for its collectors, the hub goes on, and the next evaluation gets a new
//! worker; a worker that cannot be started is no answer at all, not an empty one.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ks_hub::status::collector::{Collector, WecReport};
use ks_hub::status::sandbox::{Limits, Request, Sandbox};
use ks_shared::api::{NamedExpression, NamedStatusCombination, StatusCollectorSpec};
use serde_json::{Value as Json, json};

/// A collector selecting one column.
fn selecting(name: &str, expression: &str) -> Collector {
    let spec = StatusCollectorSpec {
        select: vec![NamedExpression {
            name: "c".into(),
            def: expression.into(),
        }],
        ..Default::default()
    };
    Collector::new(name, &spec).expect("a valid collector")
}

fn evaluate(sandbox: &Sandbox, collector: &Collector, object: &Json) -> Vec<NamedStatusCombination> {
    let status = json!({"replicas": 2});
    let report = WecReport {
        wec: "wec1",
        status: Some(&status),
        ..Default::default()
    };
    sandbox
        .evaluate(&Request::new(&[collector], object, &[report]))
        .expect("a worker answers")
}

fn sandbox(memory_mib: u64, deadline: Duration) -> Sandbox {
    sandbox_of(PathBuf::from(env!("CARGO_BIN_EXE_ks-hub")), memory_mib, deadline)
}

fn sandbox_of(program: PathBuf, memory_mib: u64, deadline: Duration) -> Sandbox {
    let limits = Limits {
        memory: memory_mib << 20,
        deadline,
    };
    Sandbox::new(program, limits)
}

/// The one error of a failed evaluation, or what the result holds.
fn outcome(results: &[NamedStatusCombination]) -> String {
    match results {
        [result] if result.aggregation_errors.len() == 1 => result.aggregation_errors[0].error.clone(),
        other => format!("{other:?}"),
    }
}

#[test]
fn an_evaluation_beyond_the_workers_memory_or_time_is_an_error_and_the_next_gets_a_new_worker() {
    let sandbox = sandbox(64, Duration::from_secs(1));
    let replicas = selecting("replicas", "returned.status.replicas");
    let small = json!({"metadata": {"name": "web"}});
    let answered = evaluate(&sandbox, &replicas, &small);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].rows.len(), 1, "{answered:?}");

    // The object alone is more than the worker may hold.
    let large = json!({"metadata": {"name": "web"}, "data": {"big": "x".repeat(80 << 20)}});
    let failed = outcome(&evaluate(&sandbox, &replicas, &large));
    assert!(
        failed.contains("it needed more than the 64 MiB it may hold"),
        "{failed}"
    );
    assert!(
        evaluate(&sandbox, &replicas, &small)[0].rows.len() == 1,
        "a new worker answers"
    );

    // Compiling 90 regular expressions, within the estimate's budget, takes longer than 1 s.
    let regexes = selecting("regexes", "obj.l.map(x, 'a'.matches('[\\\\p{L}\\\\p{N}]{200}')).size()");
    let listed = json!({"l": (0..90).collect::<Vec<_>>()});
    let started = Instant::now();
    let failed = outcome(&evaluate(&sandbox, &regexes, &listed));
    assert!(
        failed.contains("the evaluation took longer than 1 s and was stopped"),
        "{failed}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "stopped at its deadline");
    assert!(
        evaluate(&sandbox, &replicas, &small)[0].rows.len() == 1,
        "a new worker answers"
    );
}

#[test]
fn without_a_worker_there_is_no_answer_rather_than_an_empty_one() {
    let missing = sandbox_of(PathBuf::from("/nonexistent/ks-hub"), 64, Duration::from_secs(1));
    let replicas = selecting("replicas", "returned.status.replicas");
    let request = Request::new(&[&replicas], &json!({}), &[]);
    let unavailable = missing.evaluate(&request).expect_err("no worker, no answer");
    assert!(
        unavailable
            .to_string()
            .starts_with("StatusCollectors cannot be evaluated now: no CEL worker: starting /nonexistent/ks-hub"),
        "{unavailable}"
    );
}
