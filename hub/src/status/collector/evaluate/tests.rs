//! Tests of the evaluation of compiled StatusCollectors.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use ks_shared::api::StatusCollectorSpec;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::status::collector::tests::{collector, combining, field, named, run_one, selecting};

fn cells(result: &NamedStatusCombination) -> Vec<Vec<Json>> {
    let cell = |c: &Cell| -> Json {
        match c.type_.as_str() {
            "String" => json!(c.string),
            "Number" => json!({"n": c.float}),
            "Bool" => json!(c.bool),
            "Object" => json!({"object": c.object}),
            "Array" => json!({"array": c.array}),
            _ => Json::Null,
        }
    };
    result
        .rows
        .iter()
        .map(|r| r.columns.iter().map(cell).collect())
        .collect()
}

// ---- select form ----

#[test]
fn select_gives_one_row_per_wec_with_typed_cells() {
    let spec = selecting(&[
        ("wec", "inventory.name"),
        ("ready", "returned.status.readyReplicas + 1"),
        ("half", "double(returned.status.readyReplicas) / 2.0"),
        ("ok", "returned.status.readyReplicas == obj.spec.replicas"),
        ("conditions", "returned.status.conditions"),
        ("first", "returned.status.conditions[0]"),
        ("none", "null"),
    ]);
    let status = json!({"readyReplicas": 3, "conditions": [{"type": "Ready"}]});
    let result = run_one(&spec, &[status.clone(), status]);
    assert_eq!(result.column_names.len(), 7);
    let row = |wec: &str| {
        vec![
            json!(wec),
            json!({"n": "4"}),
            json!({"n": "1.5"}),
            json!(false),
            json!({"array": [{"type": "Ready"}]}),
            json!({"object": {"type": "Ready"}}),
            Json::Null,
        ]
    };
    assert_eq!(cells(&result), [row("wec0"), row("wec1")]);
    assert!(result.row_errors.is_empty());
}

#[test]
fn select_errors_are_null_cells_reported_once_per_column() {
    let spec = selecting(&[("wec", "inventory.name"), ("x", "returned.status.x")]);
    let result = run_one(&spec, &[json!({}), json!({"x": "a"}), Json::Null]);
    assert_eq!(
        cells(&result),
        [
            vec![json!("wec0"), Json::Null],
            vec![json!("wec1"), json!("a")],
            vec![json!("wec2"), Json::Null]
        ]
    );
    assert_eq!(result.row_errors.len(), 1);
    assert_eq!(result.row_errors[0].wec.cluster_id, "wec0");
    assert_eq!(result.row_errors[0].column_name, "x");
}

#[test]
fn select_stops_at_the_limit() {
    let spec = StatusCollectorSpec {
        limit: 2,
        ..selecting(&[("wec", "inventory.name")])
    };
    let result = run_one(&spec, &[json!({}), json!({}), json!({})]);
    assert_eq!(cells(&result), [[json!("wec0")], [json!("wec1")]]);
}

#[test]
fn a_zero_limit_means_no_limit() {
    // What a Go client sends when `limit` is unset.
    let statuses = [json!({"g": 1}), json!({"g": 2}), json!({"g": 3})];
    let select = StatusCollectorSpec {
        limit: 0,
        ..selecting(&[("wec", "inventory.name")])
    };
    assert_eq!(run_one(&select, &statuses).rows.len(), 3);
    let grouped = StatusCollectorSpec {
        limit: 0,
        ..combining(&[("g", "returned.status.g")], vec![field("n", "COUNT", None)])
    };
    assert_eq!(run_one(&grouped, &statuses).rows.len(), 3);
}

#[test]
fn obj_has_no_status_and_propagation_has_times() {
    let spec = selecting(&[
        ("status", "has(obj.status)"),
        ("name", "obj.metadata.name"),
        ("when", "propagation.lastReturnedUpdateTimestamp"),
        ("generation", "propagation.lastGeneration"),
    ]);
    let result = run_one(&spec, &[json!({})]);
    assert_eq!(
        cells(&result),
        [[
            json!(false),
            json!("web"),
            json!("0001-01-01T00:00:00Z"),
            json!({"n": "0"})
        ]]
    );
    let time = Time("2025-03-04T05:06:07Z".parse::<Timestamp>().unwrap());
    let report = WecReport {
        wec: "c1",
        last_returned_update: Some(&time),
        ..Default::default()
    };
    let result = combine(&[&collector(&spec)], &json!({}), &[report]).remove(0);
    assert_eq!(cells(&result)[0][2], json!("2025-03-04T05:06:07Z"));
}

// ---- filter ----

#[test]
fn only_a_true_filter_keeps_a_row() {
    let spec = StatusCollectorSpec {
        filter: Some("returned.status.keep".into()),
        ..selecting(&[("wec", "inventory.name")])
    };
    let statuses = [
        json!({"keep": true}),
        json!({"keep": false}),
        json!({"keep": null}),
        json!({"keep": 1}),
        json!({}),
    ];
    let result = run_one(&spec, &statuses);
    assert_eq!(cells(&result), [[json!("wec0")]]);
    assert_eq!(result.row_errors.len(), 1, "the filter's first error only");
    assert_eq!(result.row_errors[0].column_name, "");
    assert_eq!(
        result.row_errors[0].error,
        "filter expression has type int but expected bool or null"
    );
}

// ---- aggregation form ----

#[test]
fn groups_are_keyed_by_value_and_sorted() {
    let spec = combining(
        &[("phase", "returned.status.phase")],
        vec![
            field("count", "COUNT", None),
            field("sum", "SUM", Some("returned.status.n")),
        ],
    );
    let statuses = [
        json!({"phase": "Running", "n": 1}),
        json!({"phase": "Pending", "n": 2.5}),
        json!({"phase": "Running", "n": "3"}),
    ];
    let result = run_one(&spec, &statuses);
    assert_eq!(result.column_names, ["phase", "count", "sum"]);
    assert_eq!(
        cells(&result),
        [
            [json!("Pending"), json!({"n": "1"}), json!({"n": "2.5"})],
            [json!("Running"), json!({"n": "2"}), json!({"n": "4"})]
        ]
    );
}

#[test]
fn numbers_equal_in_value_share_a_group() {
    let spec = combining(&[("n", "returned.status.n")], vec![field("count", "COUNT", None)]);
    let result = run_one(&spec, &[json!({"n": 1}), json!({"n": 1.0}), json!({"n": 0.5})]);
    assert_eq!(
        cells(&result),
        [
            [json!({"n": "0.5"}), json!({"n": "1"})],
            [json!({"n": "1"}), json!({"n": "2"})]
        ]
    );
}

#[test]
fn aggregating_nothing_gives_the_identities() {
    let spec = StatusCollectorSpec {
        filter: Some("false".into()),
        ..combining(
            &[],
            vec![
                field("count", "COUNT", None),
                field("max", "MAX", Some("2")),
                field("min", "MIN", Some("2")),
                field("sum", "SUM", Some("2")),
                field("avg", "AVG", Some("2")),
            ],
        )
    };
    let result = run_one(&spec, &[json!({})]);
    let numbers = ["0", "-Inf", "+Inf", "0", "NaN"].map(|n| json!({"n": n}));
    assert_eq!(cells(&result), [numbers]);
    assert!(result.aggregation_errors.is_empty());
    let with_groups = StatusCollectorSpec {
        group_by: named(&[("g", "1")]),
        ..spec
    };
    assert!(run_one(&with_groups, &[]).rows.is_empty());
}

#[test]
fn count_of_a_subject_counts_non_nulls_and_avg_divides_by_values() {
    let spec = combining(
        &[],
        vec![
            field("rows", "COUNT", None),
            field("reported", "COUNT", Some("returned.status")),
            field("avg", "AVG", Some("returned.status.n")),
        ],
    );
    let result = run_one(
        &spec,
        &[json!({"n": 2}), json!({"n": null}), json!({"n": 4}), Json::Null],
    );
    // wec3's status is null, so returned.status.n fails: only the AVG misses it.
    assert_eq!(result.row_errors.len(), 1);
    assert_eq!(result.row_errors[0].column_name, "avg");
    let counts = ["4", "3", "3"].map(|n| json!({"n": n}));
    assert_eq!(cells(&result), [counts]);
}

#[test]
fn bad_subjects_are_skipped_and_reported() {
    let spec = combining(&[], vec![field("sum", "SUM", Some("returned.status.n"))]);
    let result = run_one(&spec, &[json!({"n": "x"}), json!({"n": true}), json!({"n": 5})]);
    assert_eq!(cells(&result), [[json!({"n": "5"})]]);
    assert_eq!(result.aggregation_errors.len(), 1);
    assert_eq!(result.aggregation_errors[0].column_name, "sum");
    assert!(
        result.aggregation_errors[0]
            .error
            .starts_with(r#"for WEC wec0, failed to parse combinedField subject as a float: parsing "x": "#)
    );
    let typed = run_one(&spec, &[json!({"n": true})]);
    assert_eq!(
        typed.aggregation_errors[0].error,
        "for WEC wec0, combinedField subject has unexpected type bool"
    );
}

#[test]
fn an_unhashable_group_value_is_an_error_not_a_crash() {
    let spec = combining(
        &[("c", "returned.status.conditions")],
        vec![field("count", "COUNT", None)],
    );
    let result = run_one(&spec, &[json!({"conditions": [1]}), json!({"conditions": "a"})]);
    assert_eq!(cells(&result), [[json!("a"), json!({"n": "1"})]]);
    assert_eq!(result.row_errors[0].column_name, "c");
    assert_eq!(
        result.row_errors[0].error,
        "groupBy value has type list, but only atomic values can be grouped by"
    );
}

#[test]
fn results_are_sorted_by_collector_once_each() {
    let a = Collector::new("a", &selecting(&[("x", "1")])).unwrap();
    let b = Collector::new("b", &selecting(&[("x", "2")])).unwrap();
    let results = combine(&[&b, &a, &b], &json!({}), &[]);
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}

// ---- properties ----

/// Statuses whose `x` is a number or null.
fn statuses_with_x() -> impl Strategy<Value = Vec<Json>> {
    let x = prop::option::of(-1e9f64..1e9).prop_map(|x| json!({"x": x}));
    prop::collection::vec(x, 0..12)
}

fn one_field(op: &str) -> StatusCollectorSpec {
    combining(&[], vec![field("f", op, Some("returned.status.x"))])
}

fn number(result: &NamedStatusCombination) -> String {
    result.rows[0].columns[0].float.clone().unwrap_or_default()
}

proptest! {
    #[test]
    fn count_is_the_number_of_non_null_subjects(statuses in statuses_with_x()) {
        let result = run_one(&one_field("COUNT"), &statuses);
        let expected = statuses.iter().filter(|s| !s["x"].is_null()).count();
        prop_assert_eq!(number(&result), expected.to_string());
    }

    #[test]
    fn sum_min_max_agree_with_a_direct_computation(statuses in statuses_with_x()) {
        // WECs are named wec0…wec11 and sorted as text, so wec10 comes before wec2.
        let mut named: Vec<(String, f64)> = statuses
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((format!("wec{i}"), s["x"].as_f64()?)))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let xs: Vec<f64> = named.into_iter().map(|(_, x)| x).collect();
        let sum = xs.iter().fold(0.0, |total, x| total + x);
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        prop_assert_eq!(number(&run_one(&one_field("SUM"), &statuses)), go_float(sum));
        prop_assert_eq!(number(&run_one(&one_field("MIN"), &statuses)), go_float(min));
        prop_assert_eq!(number(&run_one(&one_field("MAX"), &statuses)), go_float(max));
    }

    #[test]
    fn the_limit_is_always_respected(
        limit in 0i64..5,
        statuses in prop::collection::vec((0u8..6).prop_map(|g| json!({"g": g})), 0..10),
    ) {
        let select = StatusCollectorSpec { limit, ..selecting(&[("g", "returned.status.g")]) };
        let count = vec![field("n", "COUNT", None)];
        let grouped = StatusCollectorSpec { limit, ..combining(&[("g", "returned.status.g")], count) };
        for spec in [select, grouped] {
            let rows = run_one(&spec, &statuses).rows.len();
            let distinct: BTreeSet<String> = statuses.iter().map(|s| s["g"].to_string()).collect();
            let available = if spec.select.is_empty() { distinct.len() } else { statuses.len() };
            // 0 is no limit.
            let allowed = if limit == 0 { available } else { limit as usize };
            prop_assert_eq!(rows, allowed.min(available));
        }
    }

    #[test]
    fn no_expression_makes_it_panic(
        expression in "[a-z0-9_.()\\[\\]{}'\" +*/%<>=!&|?:,-]{0,40}",
        parts in prop::sample::subsequence(
            vec!["obj", "returned.status", "inventory.name", ".x", ".map(x, x)", "[0]", " + ", "1", "'a'", "null",
                 " ? ", " : ", "{'k': obj}", "size(", ")", "has(", ".exists(c, c", "duration('1s')",
                 "timestamp('x')"],
            0..8,
        ),
    ) {
        for def in [expression, parts.concat()] {
            let specs = [
                selecting(&[("a", def.as_str())]),
                StatusCollectorSpec {
                    filter: Some(def.clone()),
                    ..combining(&[("g", def.as_str())], vec![field("s", "AVG", Some(&def))])
                },
            ];
            for spec in specs {
                if let Ok(collector) = Collector::new("sc", &spec) {
                    let status = json!({"x": [1, "a", {"b": null}], "phase": "Running"});
                    let reports = [WecReport { wec: "c1", status: Some(&status), ..Default::default() }];
                    let _ = combine(&[&collector], &json!({"spec": {"x": 1}}), &reports);
                }
            }
        }
    }
}
