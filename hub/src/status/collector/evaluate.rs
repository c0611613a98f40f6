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
use super::estimate::{Scope, Shape};
use super::expression::{Budget, ENV, Expression, to_cel};

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
fn row_variables(report: &WecReport) -> [(&'static str, Cel, Shape); 3] {
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
    let propagation_shape = Shape::record(&propagation.keys().map(|k| (*k, Shape::SCALAR)).collect::<Vec<_>>());
    let returned = HashMap::from([("status", report.status.map_or(Cel::Null, to_cel))]);
    let status_shape = report.status.map_or(Shape::SCALAR, Shape::of);
    let inventory = HashMap::from([("name", Cel::from(report.wec.to_string()))]);
    [
        (
            "inventory",
            inventory.into(),
            Shape::record(&[("name", Shape::text(report.wec.len()))]),
        ),
        ("returned", returned.into(), Shape::record(&[("status", status_shape)])),
        ("propagation", propagation.into(), propagation_shape),
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

    let (root, object_shape) = root(object);
    let left = Budget::per_object();
    let rows: Vec<Row> = reports
        .iter()
        .map(|r| Row::new(&root, &object_shape, r, &left))
        .collect();
    collectors.iter().map(|c| c.evaluate(&rows)).collect()
}

/// For the fuzz target that holds the estimate to what evaluations allocate: compiles
/// `expression` and prepares it as a cell of one WEC's row (`obj` being `object`, and
/// `returned.status` being `status`), then gives `measure` the most bytes it is estimated to
/// hold at once (what it builds and what it holds for a moment) and a function that evaluates it
/// as `combine` does.
#[doc(hidden)]
pub fn probe<T>(
    expression: &str,
    object: &Json,
    status: &Json,
    measure: impl FnOnce(u64, &dyn Fn() -> Result<(), String>) -> T,
) -> Result<T, String> {
    let expression = super::expression::compile(expression)?;
    let (root, object_shape) = root(object);
    let report = WecReport {
        wec: "wec1",
        status: Some(status),
        ..Default::default()
    };
    let left = Budget::per_object();
    let row = Row::new(&root, &object_shape, &report, &left);
    let estimate = expression.estimate(&row.shapes);
    let estimated = estimate.built.saturating_add(estimate.transient);
    Ok(measure(estimated, &|| row.run(&expression).map(drop)))
}

/// The scope every row shares: `obj`, the object without its status, and its bound.
fn root(object: &Json) -> (Context<'static, 'static>, Shape) {
    let object = object_without_status(object);
    let mut root = Context::with_env(ENV.clone());
    root.add_variable_from_value("obj", to_cel(&object));
    (root, Shape::of(&object))
}

fn object_without_status(object: &Json) -> Json {
    let mut object = object.clone();
    if let Json::Object(map) = &mut object {
        map.remove("status");
    }
    object
}

/// One WEC's row: its name, the CEL scope holding its variables, and their bounds.
struct Row<'c> {
    wec: &'c str,
    scope: Context<'c, 'c>,
    shapes: Scope<'static>,
    /// What is left of the object's evaluation budget, shared by its rows.
    left: &'c Budget,
}

impl<'c> Row<'c> {
    fn new(root: &'c Context<'c, 'c>, object: &Shape, report: &WecReport<'c>, left: &'c Budget) -> Row<'c> {
        let mut scope = root.new_inner_scope();
        let mut shapes = vec![("obj", object.clone())];
        for (name, value, shape) in row_variables(report) {
            scope.add_variable_from_value(name, value);
            shapes.push((name, shape));
        }
        Row {
            wec: report.wec,
            scope,
            shapes,
            left,
        }
    }

    fn run(&self, expression: &Expression) -> Result<Cel, String> {
        expression.run(&self.scope, &self.shapes, self.left)
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
mod tests;
