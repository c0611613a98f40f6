//! Compiled collectors evaluated over one workload object: one row of CEL variables per WEC,
//! filtered, then selected into cells or grouped and aggregated, with every error recorded.

use std::collections::{BTreeMap, HashMap};

use cel::{Context, Value as Cel};
use chrono::{DateTime, FixedOffset};
use gotemplate::fmt::go_float;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ks_shared::api::{
    AggregationError, Destination, NamedStatusCombination, RowError, StatusCombinationRow, StatusDetails, Value as Cell,
};
use serde_json::Value as Json;

use super::cells::{null_cell, number_cell, to_cell};
use super::compile::{Collector, Column, Combined, Form, Op};
use super::expression::{Budget, ENV, Expression, MAX_EVALUATION_COST, to_cel, widest};

/// What one WEC reported on the workload object.
#[derive(Clone, Copy, Debug, Default)]
pub struct WecReport<'a> {
    /// The WEC's name (its mailbox namespace).
    pub wec: &'a str,
    /// The WorkStatus's `.status`; `None` when there is no WorkStatus or its status is null.
    pub status: Option<&'a Json>,
    /// When that status was last written: the latest `managedFields[].time` of the WorkStatus
    /// among entries touching `f:status`; `None` before the first write.
    pub last_returned_update: Option<&'a Time>,
    /// The WorkStatus's `statusDetails`, when the agent has written them.
    pub details: Option<&'a StatusDetails>,
}

/// The CEL variables of one row, for the WEC of `report`
/// (docs/upstream-behaviour.md#combinedstatus):
/// - `inventory`: `{name}`;
/// - `returned`: `{status}`, `null` when nothing was reported;
/// - `propagation`: `{lastReturnedUpdateTimestamp, lastGeneration, lastGenerationIsApplied,
///   lastCurrencyUpdateTime}`, times being the zero time (year 1) before the first update.
fn row_variables(report: &WecReport) -> [(&'static str, Cel); 3] {
    let details = report.details;
    let propagation = HashMap::from([
        ("lastReturnedUpdateTimestamp", timestamp(report.last_returned_update)),
        ("lastGeneration", Cel::Int(details.map_or(0, |d| d.last_generation))),
        (
            "lastGenerationIsApplied",
            Cel::Bool(details.is_some_and(|d| d.last_generation_is_applied)),
        ),
        (
            "lastCurrencyUpdateTime",
            timestamp(details.map(|d| &d.last_currency_update_time)),
        ),
    ]);
    let returned = HashMap::from([("status", report.status.map_or(Cel::Null, to_cel))]);
    let inventory = HashMap::from([("name", Cel::from(report.wec.to_string()))]);
    [
        ("inventory", inventory.into()),
        ("returned", returned.into()),
        ("propagation", propagation.into()),
    ]
}

/// A CEL timestamp; Go's zero time (0001-01-01T00:00:00Z) for none, as upstream.
fn timestamp(time: Option<&Time>) -> Cel {
    const GO_ZERO_TIME: i64 = -62_135_596_800;
    let (seconds, nanos) = time.map_or((GO_ZERO_TIME, 0), |t| (t.0.as_second(), t.0.subsec_nanosecond()));
    let utc = DateTime::from_timestamp(seconds, u32::try_from(nanos).unwrap_or_default()).unwrap_or_default();
    Cel::Timestamp(utc.fixed_offset())
}

/// The CombinedStatus `results` for one workload object: one entry per collector, sorted by
/// name (a name given twice counts once), each computed over one row per WEC report.
///
/// `object` is the WDS object; CEL sees it as `obj` without its `status`, as upstream documents.
pub fn combine(collectors: &[&Collector], object: &Json, reports: &[WecReport]) -> Vec<NamedStatusCombination> {
    let mut collectors = collectors.to_vec();
    collectors.sort_by(|a, b| a.name.cmp(&b.name));
    collectors.dedup_by(|a, b| a.name == b.name);
    let mut reports = reports.to_vec();
    reports.sort_by(|a, b| a.wec.cmp(b.wec));
    reports.dedup_by(|a, b| a.wec == b.wec);

    let mut root = Context::with_env(ENV.clone());
    root.add_variable_from_value("obj", object_without_status(object));
    let object_widest = widest(object);
    let left = Budget::new(MAX_EVALUATION_COST);
    let rows: Vec<Row> = reports
        .iter()
        .map(|report| {
            let mut scope = root.new_inner_scope();
            for (name, value) in row_variables(report) {
                scope.add_variable_from_value(name, value);
            }
            let widest = object_widest.max(report.status.map_or(0, widest));
            Row {
                wec: report.wec,
                scope,
                widest,
                left: &left,
            }
        })
        .collect();
    collectors.iter().map(|c| c.evaluate(&rows)).collect()
}

fn object_without_status(object: &Json) -> Cel {
    match object {
        Json::Object(map) => {
            let mut map = map.clone();
            map.remove("status");
            to_cel(&Json::Object(map))
        }
        other => to_cel(other),
    }
}

/// One WEC's row: its name, the CEL scope holding its variables, and the longest list or map
/// in them.
struct Row<'c> {
    wec: &'c str,
    scope: Context<'c, 'c>,
    widest: usize,
    /// What is left of the object's evaluation budget, shared by its rows.
    left: &'c Budget,
}

impl Row<'_> {
    fn run(&self, expression: &Expression) -> Result<Cel, String> {
        expression.run(&self.scope, self.widest, self.left)
    }
}

/// The first error of each column, by position (0 is the filter), as `rowErrors`.
#[derive(Default)]
struct RowErrors(BTreeMap<usize, RowError>);

impl RowErrors {
    fn record(&mut self, position: usize, column: &str, wec: &str, error: String) {
        self.0.entry(position).or_insert_with(|| RowError {
            wec: Destination {
                cluster_id: wec.to_string(),
            },
            column_name: column.to_string(),
            error,
        });
    }
}

impl Collector {
    fn evaluate(&self, rows: &[Row]) -> NamedStatusCombination {
        let mut errors = RowErrors::default();
        let kept: Vec<&Row> = rows.iter().filter(|row| self.passes(row, &mut errors)).collect();
        let mut result = match &self.form {
            Form::Select(columns) => self.select(columns, &kept, &mut errors),
            Form::Aggregate { group_by, combined } => self.aggregate(group_by, combined, &kept, &mut errors),
        };
        result.row_errors = errors.0.into_values().collect();
        result
    }

    /// Whether the row passes the filter: `true` does; `false`, `null`, another type or an error
    /// (recorded) does not, since the row is not known to pass.
    fn passes(&self, row: &Row, errors: &mut RowErrors) -> bool {
        let Some(filter) = &self.filter else {
            return true;
        };
        let outcome = row.run(filter).and_then(|value| match value {
            Cel::Bool(pass) => Ok(pass),
            Cel::Null => Ok(false),
            other => Err(format!(
                "filter expression has type {} but expected bool or null",
                type_name(&other)
            )),
        });
        outcome.unwrap_or_else(|e| {
            errors.record(0, "", row.wec, e);
            false
        })
    }

    /// The select form: the first `limit` rows by WEC name; a cell that fails is `Null`, its
    /// error recorded.
    fn select(&self, columns: &[Column], rows: &[&Row], errors: &mut RowErrors) -> NamedStatusCombination {
        let rows = rows
            .iter()
            .take(self.limit)
            .map(|row| {
                let cells = columns.iter().enumerate().map(|(i, column)| {
                    row.run(&column.program).map_or_else(
                        |e| {
                            errors.record(i + 1, &column.name, row.wec, e);
                            null_cell()
                        },
                        |v| to_cell(&v),
                    )
                });
                StatusCombinationRow {
                    columns: cells.collect(),
                }
            })
            .collect();
        NamedStatusCombination {
            name: self.name.clone(),
            column_names: columns.iter().map(|c| c.name.clone()).collect(),
            rows,
            ..Default::default()
        }
    }

    /// The aggregation form: rows grouped by their `groupBy` values, the first `limit` groups
    /// in value order. A row whose `groupBy` fails is left out; a subject that fails counts as
    /// null in its column only (upstream drops the row from every column). Errors are recorded.
    fn aggregate(
        &self,
        group_by: &[Column],
        combined: &[Combined],
        rows: &[&Row],
        errors: &mut RowErrors,
    ) -> NamedStatusCombination {
        let mut groups: BTreeMap<Vec<GroupKey>, Group> = BTreeMap::new();
        for row in rows {
            if let Some((key, shown, subjects)) = evaluate_group_row(group_by, combined, row, errors) {
                let group = groups.entry(key).or_insert_with(|| Group { shown, members: vec![] });
                group.members.push((row.wec, subjects));
            }
        }
        if group_by.is_empty() && groups.is_empty() {
            groups.insert(Vec::new(), Group::default());
        }
        let mut aggregation_errors = BTreeMap::new();
        let rows = groups
            .into_values()
            .take(self.limit)
            .map(|group| group.row(combined, &mut aggregation_errors))
            .collect();
        let names = group_by.iter().map(|c| &c.name).chain(combined.iter().map(|c| &c.name));
        NamedStatusCombination {
            name: self.name.clone(),
            column_names: names.cloned().collect(),
            rows,
            aggregation_errors: aggregation_errors.into_values().collect(),
            ..Default::default()
        }
    }
}

/// A row's group key, the `groupBy` values shown for it, and its subjects (`None` for a COUNT
/// without one); `None` when a `groupBy` value failed, the error recorded.
type GroupRow = (Vec<GroupKey>, Vec<Cel>, Vec<Option<Cel>>);

fn evaluate_group_row(
    group_by: &[Column],
    combined: &[Combined],
    row: &Row,
    errors: &mut RowErrors,
) -> Option<GroupRow> {
    let mut key = Vec::with_capacity(group_by.len());
    let mut shown = Vec::with_capacity(group_by.len());
    for (i, column) in group_by.iter().enumerate() {
        match row.run(&column.program).and_then(|v| Ok((GroupKey::of(&v)?, v))) {
            Ok((k, v)) => {
                key.push(k);
                shown.push(v);
            }
            Err(e) => {
                errors.record(i + 1, &column.name, row.wec, e);
                return None;
            }
        }
    }
    let subjects = combined.iter().enumerate().map(|(i, field)| {
        let subject = field.subject.as_ref()?;
        // A failed subject leaves out only this row's value for this column, like a null.
        Some(row.run(subject).unwrap_or_else(|e| {
            errors.record(group_by.len() + i + 1, &field.name, row.wec, e);
            Cel::Null
        }))
    });
    Some((key, shown, subjects.collect()))
}

/// The rows of one group: the values shown for its key, and each member's WEC and subjects.
#[derive(Default)]
struct Group<'r> {
    shown: Vec<Cel>,
    members: Vec<(&'r str, Vec<Option<Cel>>)>,
}

impl Group<'_> {
    fn row(&self, combined: &[Combined], errors: &mut BTreeMap<usize, AggregationError>) -> StatusCombinationRow {
        let mut columns: Vec<Cell> = self.shown.iter().map(to_cell).collect();
        for (i, field) in combined.iter().enumerate() {
            let subjects = self.members.iter().map(|(wec, subjects)| (*wec, subjects[i].as_ref()));
            let (cell, error) = aggregate_column(field.op, subjects);
            if let Some(error) = error {
                errors.entry(i).or_insert_with(|| AggregationError {
                    column_name: field.name.clone(),
                    error,
                });
            }
            columns.push(cell);
        }
        StatusCombinationRow { columns }
    }
}

/// One aggregate over a group's subjects, with the first problem met. Nulls are skipped, as in
/// SQL; SUM, AVG, MIN and MAX take numbers and numeric strings. No values give COUNT 0, SUM 0,
/// MIN `+Inf`, MAX `-Inf` and AVG `NaN` (the identities of the operations, as upstream).
fn aggregate_column<'s>(op: Op, subjects: impl Iterator<Item = (&'s str, Option<&'s Cel>)>) -> (Cell, Option<String>) {
    let mut first_error = None;
    let mut count = 0u64;
    let mut numbers = Vec::new();
    for (wec, subject) in subjects {
        match (op, subject) {
            (_, Some(Cel::Null)) => {}
            (Op::Count, _) => count += 1,
            (_, Some(value)) => match as_number(value) {
                Ok(n) => numbers.push(n),
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("for WEC {wec}, {e}"));
                }
            },
            // Validation requires a subject for every type but COUNT.
            (_, None) => {}
        }
    }
    let result = match op {
        Op::Count => return (number_cell(count.to_string()), first_error),
        Op::Sum => sum(&numbers),
        Op::Avg => sum(&numbers) / numbers.len() as f64,
        Op::Min => numbers.iter().copied().fold(f64::INFINITY, f64::min),
        Op::Max => numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    };
    (number_cell(go_float(result)), first_error)
}

/// The sum from 0, not `Iterator::sum`, whose empty float sum is `-0`.
fn sum(numbers: &[f64]) -> f64 {
    numbers.iter().fold(0.0, |total, n| total + n)
}

/// A subject as a number, with upstream's messages.
fn as_number(value: &Cel) -> Result<f64, String> {
    match value {
        Cel::Int(i) => Ok(*i as f64),
        Cel::UInt(u) => Ok(*u as f64),
        Cel::Float(f) => Ok(*f),
        Cel::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|e| format!("failed to parse combinedField subject as a float: parsing {s:?}: {e}")),
        other => Err(format!(
            "combinedField subject has unexpected type {}",
            type_name(other)
        )),
    }
}

/// A `groupBy` value as a key. Numbers are keyed by value, so `1` and `1.0` share a group and
/// groups come out in numeric order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKey {
    Null,
    Bool(bool),
    /// Ordered by value first; `exact` tells apart integers too large for a double to separate.
    Number {
        value: i64,
        exact: Option<i128>,
    },
    String(String),
    Bytes(Vec<u8>),
    Duration(chrono::Duration),
    Timestamp(DateTime<FixedOffset>),
}

impl GroupKey {
    /// The key of a value; lists, maps and other composite values cannot be grouped by.
    fn of(value: &Cel) -> Result<GroupKey, String> {
        Ok(match value {
            Cel::Null => GroupKey::Null,
            Cel::Bool(b) => GroupKey::Bool(*b),
            Cel::Int(i) => GroupKey::number(*i as f64, Some(i128::from(*i))),
            Cel::UInt(u) => GroupKey::number(*u as f64, Some(i128::from(*u))),
            Cel::Float(f) => GroupKey::number(*f, integral(*f)),
            Cel::String(s) => GroupKey::String(s.to_string()),
            Cel::Bytes(b) => GroupKey::Bytes(b.to_vec()),
            Cel::Duration(d) => GroupKey::Duration(*d),
            Cel::Timestamp(t) => GroupKey::Timestamp(*t),
            other => {
                return Err(format!(
                    "groupBy value has type {}, but only atomic values can be grouped by",
                    type_name(other)
                ));
            }
        })
    }

    fn number(value: f64, exact: Option<i128>) -> GroupKey {
        GroupKey::Number {
            value: total_order(value),
            exact,
        }
    }
}

/// The integer a float holds exactly, if any.
fn integral(f: f64) -> Option<i128> {
    (f.fract() == 0.0 && f.abs() < 1e38).then_some(f as i128)
}

/// An integer that orders like `f64::total_cmp` (with 0.0 and -0.0 together).
fn total_order(f: f64) -> i64 {
    let f = if f == 0.0 { 0.0 } else { f };
    let bits = f.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

/// CEL's name of a value's type, for error messages.
fn type_name(value: &Cel) -> &'static str {
    match value {
        Cel::List(_) => "list",
        Cel::Map(_) => "map",
        Cel::Function(..) => "function",
        Cel::Int(_) => "int",
        Cel::UInt(_) => "uint",
        Cel::Float(_) => "double",
        Cel::String(_) => "string",
        Cel::Bytes(_) => "bytes",
        Cel::Bool(_) => "bool",
        Cel::Duration(_) => "google.protobuf.Duration",
        Cel::Timestamp(_) => "google.protobuf.Timestamp",
        Cel::Opaque(_) => "opaque",
        Cel::Struct(_) => "struct",
        Cel::Null => "null_type",
    }
}

#[cfg(test)]
mod tests {
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
}
