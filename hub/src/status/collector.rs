//! StatusCollectors: their validation (docs/upstream-behaviour.md#statuscollectors) and the
//! CombinedStatus they compute with CEL (docs/upstream-behaviour.md#combinedstatus), free of the
//! upstream defects listed there: a null filter drops the row, `limit` is enforced (0, what a Go
//! client sends when it is unset, is no limit), COUNT of a subject counts its non-null values, AVG
//! divides by the values it averaged, a failing subject spoils only its own column, every
//! evaluation error is reported, and an unhashable `groupBy` value is an error.
//!
//! A collector is compiled once ([`Collector::new`]) and evaluated against one workload object
//! and the reports of its WECs ([`combine`]); everything is sorted, so equal inputs give equal
//! results and a controller can compare them to decide whether to write.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, IdedExpr, Program, Value as Cel};
use chrono::{DateTime, FixedOffset, SecondsFormat};
// Numbers are written as upstream writes them: Go's `strconv.FormatFloat(f, 'g', -1, 64)`.
use gotemplate::fmt::go_float;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use ks_shared::api::{
    AggregationError, Destination, NamedAggregator, NamedExpression, NamedStatusCombination, RowError,
    StatusCollectorSpec, StatusCombinationRow, StatusDetails, Value as Cell,
};
use ks_shared::names::{REPORT_NAMESPACE, combined_status_label};
use serde_json::Value as Json;

use crate::binding::ObjectIdentity;

// ---- compiling and validating ----

/// A valid StatusCollector with its expressions compiled.
#[derive(Debug)]
pub struct Collector {
    name: String,
    filter: Option<Expression>,
    form: Form,
    /// The most rows reported ([`row_limit`]).
    limit: usize,
}

#[derive(Debug)]
enum Form {
    /// One row per WEC with these columns.
    Select(Vec<Column>),
    /// One row per group: the `groupBy` values, then the aggregates.
    Aggregate {
        group_by: Vec<Column>,
        combined: Vec<Combined>,
    },
}

#[derive(Debug)]
struct Column {
    name: String,
    program: Expression,
}

#[derive(Debug)]
struct Combined {
    name: String,
    op: Op,
    /// Absent only for COUNT, which then counts rows.
    subject: Option<Expression>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "COUNT" => Op::Count,
            "SUM" => Op::Sum,
            "AVG" => Op::Avg,
            "MIN" => Op::Min,
            "MAX" => Op::Max,
            _ => return None,
        })
    }
}

impl Collector {
    /// Compiles the collector named `name`, or gives the errors for its `status.errors`, worded
    /// as upstream words them (docs/upstream-behaviour.md#statuscollectors). Structural errors come
    /// alone: expressions are checked only once the structure is right.
    ///
    /// Beyond upstream: a negative `limit` and an unknown aggregation type are errors, and COUNT
    /// may have a subject (it then counts the rows where the subject is not null).
    pub fn new(name: &str, spec: &StatusCollectorSpec) -> Result<Collector, Vec<String>> {
        let mut errors = structure_errors(spec);
        if !errors.is_empty() {
            return Err(errors);
        }
        let filter = spec.filter.as_deref().and_then(|filter| {
            compile(filter)
                .map_err(|e| errors.push(format!("filter expression invalid: {e}")))
                .ok()
        });
        let select = compile_columns("select", &spec.select, &mut errors);
        let group_by = compile_columns("groupBy", &spec.group_by, &mut errors);
        let combined: Vec<Combined> = spec
            .combined_fields
            .iter()
            .filter_map(|field| compile_combined(field).map_err(|e| errors.push(e)).ok())
            .collect();
        if !errors.is_empty() {
            return Err(errors);
        }
        let form = if spec.select.is_empty() {
            Form::Aggregate { group_by, combined }
        } else {
            Form::Select(select)
        };
        Ok(Collector {
            name: name.to_string(),
            filter,
            form,
            limit: row_limit(spec.limit),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The most rows a valid (non-negative) `limit` allows: 0 means no limit, because Go clients
/// send 0 for an unset `limit` and a collector reporting nothing is never what was meant.
fn row_limit(limit: i64) -> usize {
    match usize::try_from(limit) {
        Ok(0) | Err(_) => usize::MAX,
        Ok(limit) => limit,
    }
}

fn structure_errors(spec: &StatusCollectorSpec) -> Vec<String> {
    let mut errors = Vec::new();
    let aggregates = !spec.group_by.is_empty() || !spec.combined_fields.is_empty();
    if !spec.select.is_empty() && aggregates {
        errors.push("groupBy and combinedFields must be empty if select is not".to_string());
    }
    if spec.combined_fields.is_empty() && !spec.group_by.is_empty() {
        errors.push("groupBy must be empty if combinedFields is".to_string());
    }
    if spec.limit < 0 {
        errors.push(format!("limit must not be negative, but is {}", spec.limit));
    }
    errors
}

/// Compiles named expressions, recording `<what> expression (<name>) invalid: <err>` for each
/// that does not compile.
fn compile_columns(what: &str, expressions: &[NamedExpression], errors: &mut Vec<String>) -> Vec<Column> {
    expressions
        .iter()
        .filter_map(|e| match compile(&e.def) {
            Ok(program) => Some(Column {
                name: e.name.clone(),
                program,
            }),
            Err(err) => {
                errors.push(format!("{what} expression ({}) invalid: {err}", e.name));
                None
            }
        })
        .collect()
}

fn compile_combined(field: &NamedAggregator) -> Result<Combined, String> {
    let name = &field.name;
    let op = Op::parse(&field.type_).ok_or_else(|| {
        format!(
            "combinedField expression ({name}) invalid: type must be COUNT, SUM, AVG, MIN or MAX, not {:?}",
            field.type_
        )
    })?;
    let subject = match (&field.subject, op) {
        (None, Op::Count) => None,
        (None, _) => {
            return Err(format!(
                "combinedField expression ({name}) invalid: subject must be set"
            ));
        }
        (Some(subject), _) => {
            Some(compile(subject).map_err(|e| format!("combinedField expression ({name}) subject invalid: {e}"))?)
        }
    };
    Ok(Combined {
        name: name.clone(),
        op,
        subject,
    })
}

/// The standard CEL environment; no Kubernetes libraries, as upstream.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// The variables an expression may use (docs/upstream-behaviour.md#combinedstatus).
const VARIABLES: [&str; 4] = ["inventory", "obj", "propagation", "returned"];
/// CEL's type names, which are identifiers too (`type(x) == int`).
const TYPE_NAMES: [&str; 13] = [
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// The longest expression accepted, in bytes.
const MAX_EXPRESSION_LENGTH: usize = 4096;
/// How deep an expression's syntax tree may be: the evaluator recurses once per level, with
/// large frames, so depth (`1+1+…+1`), not length, decides the stack it needs.
const MAX_EXPRESSION_DEPTH: usize = 64;
/// How deeply comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) may nest: each
/// level multiplies the work by the length of a list.
const MAX_COMPREHENSION_NESTING: usize = 2;
/// The most work the evaluations for one object (every collector, row and cell) may take, in
/// syntax-tree nodes visited, estimated before each evaluation: the expression's nodes times
/// the longest list (or map) in its inputs once per level of comprehension nesting. A step takes
/// 0.1–0.2 µs in a debug build, so an object's status takes at most about 2 s: a `map` over
/// 100,000 items fits, two nested over 1,000 do not.
const MAX_EVALUATION_COST: u64 = 10_000_000;
/// The stack the CEL parser and evaluator need. The parser recurses up to 96 levels (its own
/// limit) and, in a debug build, a level takes about 100 KiB; 20 nested parentheses overflowed a
/// 2 MiB thread stack and aborted the process. Parsing runs on a thread of this size, and the
/// hub's runtime threads, where expressions are evaluated, get it too.
pub const CEL_STACK: usize = 64 << 20;

/// Parses `expression` and checks that it uses no undeclared variable, with the error prefixes
/// upstream uses, and that it is within the limits above. The parser is third-party code fed
/// user input: a panic in it is an error here, not a crash of the controller.
fn compile(expression: &str) -> Result<Expression, String> {
    if expression.len() > MAX_EXPRESSION_LENGTH {
        return Err(format!(
            "failed to parse expression: longer than {MAX_EXPRESSION_LENGTH} bytes"
        ));
    }
    let parsed = std::thread::scope(|scope| {
        let parse = || catch_unwind(AssertUnwindSafe(|| ENV.compile(expression)));
        std::thread::Builder::new()
            .name("cel-parser".into())
            .stack_size(CEL_STACK)
            .spawn_scoped(scope, parse)
            .map_err(|e| format!("failed to parse expression: no thread for the CEL parser: {e}"))?
            .join()
            .map_err(|_| "failed to parse expression: the CEL parser failed".to_string())?
            .map_err(|_| "failed to parse expression: the CEL parser failed".to_string())
    })?;
    let program = parsed.map_err(|e| format!("failed to parse expression: {e}"))?;
    let Shape { depth, nesting, nodes } = shape(program.expression());
    if depth > MAX_EXPRESSION_DEPTH {
        return Err(format!(
            "failed to check expression: nested {depth} deep, more than {MAX_EXPRESSION_DEPTH}"
        ));
    }
    if nesting > MAX_COMPREHENSION_NESTING {
        return Err(format!(
            "failed to check expression: comprehensions (all, exists, exists_one, map, filter) nested {nesting} deep, more than {MAX_COMPREHENSION_NESTING}"
        ));
    }
    let mut undeclared = BTreeSet::new();
    collect_undeclared(program.expression(), &mut Vec::new(), &mut undeclared);
    if undeclared.is_empty() {
        return Ok(Expression {
            program,
            nodes,
            nesting,
        });
    }
    let names: Vec<String> = undeclared.iter().map(|n| format!("'{n}'")).collect();
    Err(format!(
        "failed to check expression: undeclared reference to {}",
        names.join(", ")
    ))
}

/// The identifiers `expr` uses that are neither variables, type names, nor bound by an enclosing
/// comprehension (`x` in `list.map(x, …)`).
fn collect_undeclared<'e>(expr: &'e IdedExpr, bound: &mut Vec<&'e str>, out: &mut BTreeSet<&'e str>) {
    match &expr.expr {
        Expr::Ident(name) => {
            let known = VARIABLES.contains(&name.as_str()) || TYPE_NAMES.contains(&name.as_str());
            if !known && !bound.contains(&name.as_str()) && !name.starts_with('@') {
                out.insert(name);
            }
        }
        Expr::Select(select) => collect_undeclared(&select.operand, bound, out),
        Expr::Call(call) => {
            call.target.iter().for_each(|t| collect_undeclared(t, bound, out));
            call.args.iter().for_each(|a| collect_undeclared(a, bound, out));
        }
        Expr::List(list) => list.elements.iter().for_each(|e| collect_undeclared(e, bound, out)),
        Expr::Map(map) => map.entries.iter().for_each(|e| collect_entry(&e.expr, bound, out)),
        Expr::Struct(st) => st.entries.iter().for_each(|e| collect_entry(&e.expr, bound, out)),
        Expr::Comprehension(c) => {
            collect_undeclared(&c.iter_range, bound, out);
            collect_undeclared(&c.accu_init, bound, out);
            let before = bound.len();
            bound.extend([c.iter_var.as_str(), c.accu_var.as_str()]);
            bound.extend(c.iter_var2.as_deref());
            for inner in [&c.loop_cond, &c.loop_step, &c.result] {
                collect_undeclared(inner, bound, out);
            }
            bound.truncate(before);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// A compiled expression, with what bounds the work of evaluating it.
#[derive(Debug)]
struct Expression {
    program: Program,
    nodes: usize,
    nesting: usize,
}

impl Expression {
    /// Runs it over `scope`, whose longest list or map has `widest` items, unless that would
    /// cost more than the budget `left`, which it then spends. A panic in the third-party
    /// evaluator becomes an error for this row only.
    fn run(&self, scope: &Context, widest: usize, left: &Budget) -> Result<Cel, String> {
        let cost = evaluation_cost(self.nodes, self.nesting, widest);
        if cost > left.get() {
            return Err(format!(
                "evaluation would take up to {cost} steps ({} nodes, comprehensions nested {} deep over up to {widest} items), more than the {} left of the {MAX_EVALUATION_COST} one object's evaluations may take",
                self.nodes,
                self.nesting,
                left.get()
            ));
        }
        left.set(left.get() - cost);
        match catch_unwind(AssertUnwindSafe(|| self.program.execute(scope))) {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("the CEL evaluator failed".to_string()),
        }
    }
}

/// What is left of the evaluation budget of one object, spent by its expressions in turn.
type Budget = std::cell::Cell<u64>;

/// The estimated work of evaluating an expression of `nodes` nodes with comprehensions nested
/// `nesting` deep over inputs whose longest list or map has `widest` items.
fn evaluation_cost(nodes: usize, nesting: usize, widest: usize) -> u64 {
    let per_level = widest.max(1) as u64;
    (0..nesting).fold(nodes as u64, |cost, _| cost.saturating_mul(per_level))
}

/// The length of the longest list or map in `json`, at any depth.
fn widest(json: &Json) -> usize {
    match json {
        Json::Array(items) => items.iter().map(widest).fold(items.len(), usize::max),
        Json::Object(map) => map.values().map(widest).fold(map.len(), usize::max),
        _ => 0,
    }
}

/// How big an expression's syntax tree is.
#[derive(Clone, Copy, Default)]
struct Shape {
    depth: usize,
    /// How deeply comprehensions nest.
    nesting: usize,
    nodes: usize,
}

/// The shape of `expr`'s syntax tree.
fn shape(expr: &IdedExpr) -> Shape {
    let deepest = |children: &mut dyn Iterator<Item = &IdedExpr>| {
        children.map(shape).fold(Shape::default(), |a, b| Shape {
            depth: a.depth.max(b.depth),
            nesting: a.nesting.max(b.nesting),
            nodes: a.nodes + b.nodes,
        })
    };
    let children = match &expr.expr {
        Expr::Select(select) => deepest(&mut std::iter::once(&*select.operand)),
        Expr::Call(call) => deepest(&mut call.target.iter().map(|t| &**t).chain(call.args.iter())),
        Expr::List(list) => deepest(&mut list.elements.iter()),
        Expr::Map(map) => deepest(&mut map.entries.iter().flat_map(|e| entry_values(&e.expr))),
        Expr::Struct(st) => deepest(&mut st.entries.iter().flat_map(|e| entry_values(&e.expr))),
        Expr::Comprehension(c) => {
            let outer = deepest(&mut [&c.iter_range, &c.accu_init].into_iter());
            let inner = deepest(&mut [&c.loop_cond, &c.loop_step, &c.result].into_iter());
            Shape {
                depth: outer.depth.max(inner.depth),
                nesting: outer.nesting.max(inner.nesting + 1),
                nodes: outer.nodes + inner.nodes,
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Shape::default(),
    };
    Shape {
        depth: children.depth + 1,
        nesting: children.nesting,
        nodes: children.nodes + 1,
    }
}

/// The expressions of a map entry (key and value) or struct field (value).
fn entry_values(entry: &EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
    }
}

fn collect_entry<'e>(entry: &'e EntryExpr, bound: &mut Vec<&'e str>, out: &mut BTreeSet<&'e str>) {
    for value in entry_values(entry) {
        collect_undeclared(value, bound, out);
    }
}

// ---- inputs ----

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

/// JSON as CEL sees it: integers are `int` when they fit (as Kubernetes' unstructured objects
/// give them to cel-go), so `returned.status.readyReplicas + 1` works.
fn to_cel(json: &Json) -> Cel {
    match json {
        Json::Null => Cel::Null,
        Json::Bool(b) => Cel::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Cel::String(Arc::new(s.clone())),
        Json::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Json::Object(map) => {
            let entries: HashMap<Key, Cel> = map.iter().map(|(k, v)| (Key::from(k.as_str()), to_cel(v))).collect();
            Cel::Map(CelMap::from(entries))
        }
    }
}

// ---- evaluating ----

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

// ---- cells ----

/// A CEL value as a CombinedStatus cell. Fixing upstream's select form
/// (docs/upstream-behaviour.md#combinedstatus): lists are `Array`, `null` is `Null`, and timestamps
/// and durations are `String`s as Kubernetes and CEL write them.
fn to_cell(value: &Cel) -> Cell {
    match value {
        Cel::String(s) => string_cell(s.to_string()),
        Cel::Int(i) => number_cell(i.to_string()),
        Cel::UInt(u) => number_cell(u.to_string()),
        Cel::Float(f) => number_cell(go_float(*f)),
        Cel::Bool(b) => Cell {
            type_: "Bool".into(),
            bool: Some(*b),
            ..Default::default()
        },
        Cel::List(_) => Cell {
            type_: "Array".into(),
            array: Some(to_json(value)),
            ..Default::default()
        },
        Cel::Map(_) => Cell {
            type_: "Object".into(),
            object: Some(to_json(value)),
            ..Default::default()
        },
        Cel::Timestamp(_) | Cel::Duration(_) | Cel::Bytes(_) => match to_json(value) {
            Json::String(s) => string_cell(s),
            _ => null_cell(),
        },
        Cel::Null | Cel::Function(..) | Cel::Opaque(_) | Cel::Struct(_) => null_cell(),
    }
}

fn string_cell(s: String) -> Cell {
    Cell {
        type_: "String".into(),
        string: Some(s),
        ..Default::default()
    }
}

fn number_cell(float: String) -> Cell {
    Cell {
        type_: "Number".into(),
        float: Some(float),
        ..Default::default()
    }
}

fn null_cell() -> Cell {
    Cell {
        type_: "Null".into(),
        ..Default::default()
    }
}

/// A CEL value as JSON: non-finite doubles as Go writes them (`NaN`, `+Inf`), timestamps in
/// RFC 3339 as Kubernetes writes them, durations as CEL writes them (`1.5s`), bytes as text.
fn to_json(value: &Cel) -> Json {
    match value {
        Cel::List(items) => Json::Array(items.iter().map(to_json).collect()),
        Cel::Map(map) => Json::Object(map.map.iter().map(|(k, v)| (k.to_string(), to_json(v))).collect()),
        Cel::Int(i) => Json::from(*i),
        Cel::UInt(u) => Json::from(*u),
        Cel::Float(f) if f.is_finite() => Json::from(*f),
        Cel::Float(f) => Json::from(go_float(*f)),
        Cel::String(s) => Json::from(s.as_str()),
        Cel::Bytes(b) => Json::from(String::from_utf8_lossy(b)),
        Cel::Bool(b) => Json::from(*b),
        Cel::Timestamp(t) => Json::from(t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        Cel::Duration(d) => Json::from(cel_duration(d)),
        Cel::Null | Cel::Function(..) | Cel::Opaque(_) | Cel::Struct(_) => Json::Null,
    }
}

/// A duration as CEL's `string(duration)` writes it: seconds with a fraction only when needed.
fn cel_duration(d: &chrono::Duration) -> String {
    let nanos = d
        .num_nanoseconds()
        .map_or_else(|| d.num_seconds() as f64 * 1e9, |n| n as f64);
    format!("{}s", nanos / 1e9)
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

// ---- the CombinedStatus object ----

/// Name, namespace, the five labels and the owner reference of the CombinedStatus for an object
/// and a BindingPolicy (docs/upstream-behaviour.md#combinedstatus): named `<objectUID>.<policyUID>`,
/// in the object's namespace or `kubestellar-report` for a cluster-scoped object, owned (not
/// controlled) by the object. A label whose value cannot be a label value (object and policy names
/// may be longer than 63 characters, RBAC names hold `:`) is left out: the apiserver would refuse
/// the whole CombinedStatus, as it does upstream's.
pub fn combined_status_metadata(
    object: &ObjectIdentity,
    object_uid: &str,
    policy: &str,
    policy_uid: &str,
) -> ObjectMeta {
    let namespace = if object.is_cluster_scoped() {
        REPORT_NAMESPACE
    } else {
        object.namespace.as_str()
    };
    let labels = [
        (combined_status_label::API_GROUP, object.group.as_str()),
        (combined_status_label::RESOURCE, object.resource.as_str()),
        (combined_status_label::NAMESPACE, object.namespace.as_str()),
        (combined_status_label::NAME, object.name.as_str()),
        (combined_status_label::BINDING_POLICY, policy),
    ];
    let api_version = if object.group.is_empty() {
        object.version.clone()
    } else {
        format!("{}/{}", object.group, object.version)
    };
    ObjectMeta {
        name: Some(format!("{object_uid}.{policy_uid}")),
        namespace: Some(namespace.to_string()),
        labels: Some(
            labels
                .iter()
                .filter(|(_, v)| is_label_value(v))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        owner_references: Some(vec![OwnerReference {
            api_version,
            kind: object.kind.clone(),
            name: object.name.clone(),
            uid: object_uid.to_string(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Whether the apiserver accepts `value` as a label value: at most 63 characters, alphanumeric
/// at both ends, `-`, `_` and `.` inside.
fn is_label_value(value: &str) -> bool {
    let alphanumeric = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && alphanumeric(value.chars().next())
        && alphanumeric(value.chars().last())
}

/// Lines for a StatusCollector's `status.errors` from one of its results, for the object that
/// `subject` names (e.g. `apps/deployments ns1/web`): evaluation errors reach the collector's
/// owner, not only the CombinedStatus (fixing upstream's defect,
/// docs/upstream-behaviour.md#combinedstatus).
pub fn evaluation_errors(subject: &str, result: &NamedStatusCombination) -> Vec<String> {
    let column = |name: &str| {
        if name.is_empty() {
            "filter".to_string()
        } else {
            format!("column {name:?}")
        }
    };
    let rows = result.row_errors.iter().map(|e| {
        format!(
            "{subject}, WEC {}, {}: {}",
            e.wec.cluster_id,
            column(&e.column_name),
            e.error
        )
    });
    let aggregations = result
        .aggregation_errors
        .iter()
        .map(|e| format!("{subject}, {}: {}", column(&e.column_name), e.error));
    rows.chain(aggregations).collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Runs `f` on a thread with the stack of the hub's runtime threads.
    fn on_hub_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new().stack_size(CEL_STACK);
            thread.spawn_scoped(scope, f).unwrap().join().unwrap()
        })
    }

    #[test]
    fn hostile_expressions_are_errors_not_crashes() {
        // 20 nested parentheses overflowed a 2 MiB stack in the parser (abort, not a panic), and
        // a chain of 64 additions overflowed it in the evaluator.
        for (expression, error) in [
            (format!("{}1{}", "(".repeat(200), ")".repeat(200)), "Recursion limit"),
            (format!("1{}", "+1".repeat(100)), "nested 101 deep, more than 64"),
            (
                "[1, 2].map(a, [1, 2].map(b, [1, 2].map(c, c)))".to_string(),
                "comprehensions (all, exists, exists_one, map, filter) nested 3 deep, more than 2",
            ),
            ("x".repeat(5000), "longer than 4096 bytes"),
        ] {
            let got = compile(&expression).map(|_| ()).unwrap_err();
            assert!(got.contains(error), "{got}");
        }
    }

    #[test]
    fn expressions_at_the_limits_run_on_the_hubs_stack() {
        let program = compile(&format!("1{}", "+1".repeat(60))).unwrap();
        let budget = || Budget::new(MAX_EVALUATION_COST);
        let sum = on_hub_stack(|| program.run(&Context::default(), 0, &budget()));
        assert_eq!(sum, Ok(Cel::Int(61)));
        let program = compile("[1, 2].map(a, [1, 2].map(b, a * b))").unwrap();
        assert!(on_hub_stack(|| program.run(&Context::default(), 0, &budget())).is_ok());
    }

    #[test]
    fn work_beyond_the_budget_is_an_error_not_a_stall() {
        let nested = compile("obj.l.map(x, obj.l.map(y, y)).size()").unwrap();
        let single = compile("obj.l.map(x, x).size()").unwrap();
        let big = |n: usize| json!({"l": (0..n).collect::<Vec<_>>()});
        let subject = |n: usize| {
            let mut scope = Context::with_env(ENV.clone());
            scope.add_variable_from_value("obj", to_cel(&big(n)));
            scope
        };
        // 100 items nested twice, 100,000 once: within the budget, which they spend.
        let left = Budget::new(MAX_EVALUATION_COST);
        assert_eq!(nested.run(&subject(100), widest(&big(100)), &left), Ok(Cel::Int(100)));
        assert_eq!(
            single.run(&subject(100_000), widest(&big(100_000)), &left),
            Ok(Cel::Int(100_000))
        );
        assert!(left.get() < MAX_EVALUATION_COST - 1_000_000);
        // 100,000 items nested twice would take hours: refused before it starts.
        let refused = nested
            .run(
                &subject(100_000),
                widest(&big(100_000)),
                &Budget::new(MAX_EVALUATION_COST),
            )
            .unwrap_err();
        assert!(refused.starts_with("evaluation would take up to"), "{refused}");
        assert!(
            refused.ends_with("over up to 100000 items), more than the 10000000 left of the 10000000 one object's evaluations may take"),
            "{refused}"
        );
        // What one object's evaluations spent is not there for the next expression of that object.
        let spent = Budget::new(10);
        assert!(single.run(&subject(100), widest(&big(100)), &spent).is_err());
    }

    fn named(pairs: &[(&str, &str)]) -> Vec<NamedExpression> {
        pairs
            .iter()
            .map(|(name, def)| NamedExpression {
                name: name.to_string(),
                def: def.to_string(),
            })
            .collect()
    }

    fn field(name: &str, type_: &str, subject: Option<&str>) -> NamedAggregator {
        NamedAggregator {
            name: name.into(),
            type_: type_.into(),
            subject: subject.map(String::from),
        }
    }

    fn selecting(pairs: &[(&str, &str)]) -> StatusCollectorSpec {
        StatusCollectorSpec {
            select: named(pairs),
            limit: 20,
            ..Default::default()
        }
    }

    fn combining(group_by: &[(&str, &str)], fields: Vec<NamedAggregator>) -> StatusCollectorSpec {
        StatusCollectorSpec {
            group_by: named(group_by),
            combined_fields: fields,
            limit: 20,
            ..Default::default()
        }
    }

    fn collector(spec: &StatusCollectorSpec) -> Collector {
        Collector::new("sc", spec).unwrap()
    }

    fn errors(spec: &StatusCollectorSpec) -> Vec<String> {
        Collector::new("sc", spec).unwrap_err()
    }

    /// Runs one collector over WECs named after their statuses' position (`wec0`, `wec1`, …).
    fn run_one(spec: &StatusCollectorSpec, statuses: &[Json]) -> NamedStatusCombination {
        let names: Vec<String> = (0..statuses.len()).map(|i| format!("wec{i}")).collect();
        let reports: Vec<WecReport> = names
            .iter()
            .zip(statuses)
            .map(|(wec, status)| WecReport {
                wec,
                status: (!status.is_null()).then_some(status),
                ..Default::default()
            })
            .collect();
        let object = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}, "status": {"secret": 1}});
        combine(&[&collector(spec)], &object, &reports).remove(0)
    }

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

    // ---- validation ----

    #[test]
    fn structural_errors_come_alone_and_worded_as_upstream() {
        let mut spec = selecting(&[("a", "(")]);
        spec.group_by = named(&[("g", "1")]);
        assert_eq!(
            errors(&spec),
            [
                "groupBy and combinedFields must be empty if select is not",
                "groupBy must be empty if combinedFields is"
            ]
        );
        let negative = StatusCollectorSpec {
            limit: -1,
            ..selecting(&[("a", "1")])
        };
        assert_eq!(errors(&negative), ["limit must not be negative, but is -1"]);
    }

    #[test]
    fn expression_errors_name_their_expression() {
        let mut spec = combining(
            &[("g", "1 +")],
            vec![
                field("s", "SUM", None),
                field("m", "MAX", Some("nope.x")),
                field("x", "MEDIAN", Some("1")),
            ],
        );
        spec.filter = Some("returned.status.x == ".into());
        let errors = errors(&spec);
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].starts_with("filter expression invalid: failed to parse expression: "));
        assert!(errors[1].starts_with("groupBy expression (g) invalid: failed to parse expression: "));
        assert_eq!(errors[2], "combinedField expression (s) invalid: subject must be set");
        assert_eq!(
            errors[3],
            "combinedField expression (m) subject invalid: failed to check expression: undeclared reference to 'nope'"
        );
        assert_eq!(
            errors[4],
            r#"combinedField expression (x) invalid: type must be COUNT, SUM, AVG, MIN or MAX, not "MEDIAN""#
        );
    }

    #[test]
    fn comprehension_variables_type_names_and_count_subjects_are_valid() {
        let spec = combining(
            &[("ready", "returned.status.conditions.exists(c, c.type == 'Ready')")],
            vec![
                field("n", "COUNT", Some("returned.status")),
                field("t", "MAX", Some("type(obj) == map ? 1 : 0")),
            ],
        );
        assert!(Collector::new("sc", &spec).is_ok());
        assert_eq!(
            errors(&selecting(&[("a", "[1].map(x, y)")])),
            ["select expression (a) invalid: failed to check expression: undeclared reference to 'y'"]
        );
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

    // ---- rendering and metadata ----

    #[test]
    fn numbers_are_written_as_go_writes_them() {
        let cases = [
            (0.0, "0"),
            (1.5, "1.5"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (1e100, "1e+100"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (number, text) in cases {
            assert_eq!(go_float(number), text, "{number}");
        }
    }

    #[test]
    fn combined_status_is_named_placed_and_labelled_as_upstream() {
        let web = ObjectIdentity {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: "ns1".into(),
            name: "web".into(),
            kind: "Deployment".into(),
        };
        let meta = combined_status_metadata(&web, "u1", "bp", "u2");
        assert_eq!(meta.name.as_deref(), Some("u1.u2"));
        assert_eq!(meta.namespace.as_deref(), Some("ns1"));
        let labels = meta.labels.unwrap();
        assert_eq!(labels.len(), 5);
        assert_eq!(labels[combined_status_label::BINDING_POLICY], "bp");
        assert_eq!(labels[combined_status_label::API_GROUP], "apps");
        let owner = &meta.owner_references.unwrap()[0];
        assert_eq!((owner.api_version.as_str(), owner.uid.as_str()), ("apps/v1", "u1"));
        assert_eq!(owner.controller, None);

        let namespace = ObjectIdentity {
            group: "".into(),
            version: "v1".into(),
            resource: "namespaces".into(),
            name: "ns1".into(),
            kind: "Namespace".into(),
            ..Default::default()
        };
        let meta = combined_status_metadata(&namespace, "u3", "bp", "u2");
        assert_eq!(meta.namespace.as_deref(), Some(REPORT_NAMESPACE));
        assert_eq!(meta.labels.unwrap()[combined_status_label::NAMESPACE], "");
        assert_eq!(meta.owner_references.unwrap()[0].api_version, "v1");

        let long_policy = "p".repeat(64);
        let role = ObjectIdentity {
            name: "system:admin".into(),
            ..web
        };
        let labels = combined_status_metadata(&role, "u4", &long_policy, "u2")
            .labels
            .unwrap();
        assert!(!labels.contains_key(combined_status_label::BINDING_POLICY));
        assert!(!labels.contains_key(combined_status_label::NAME));
        assert_eq!(labels.len(), 3);
    }

    #[test]
    fn evaluation_errors_become_status_lines() {
        let spec = StatusCollectorSpec {
            filter: Some("returned.status.x".into()),
            ..combining(&[], vec![field("sum", "SUM", Some("'a'"))])
        };
        let result = run_one(&spec, &[json!({"x": 1}), json!({"x": true})]);
        assert_eq!(
            evaluation_errors("apps/deployments ns1/web", &result),
            [
                "apps/deployments ns1/web, WEC wec0, filter: filter expression has type int but expected bool or null",
                concat!(
                    r#"apps/deployments ns1/web, column "sum": for WEC wec1, "#,
                    r#"failed to parse combinedField subject as a float: parsing "a": invalid float literal"#
                ),
            ]
        );
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
