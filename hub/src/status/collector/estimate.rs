//! What evaluating a CEL expression may cost, known before it runs: the steps it may take and
//! the bytes it may build, from an upper bound of every value it can make. Inputs are bounded by
//! their [`Shape`]; literals by what they are; lists built by `map`, `filter` and `+` by the
//! lengths of what they are built from, so a literal `[1, 1, …]` ranged over counts as much as a
//! list in the object; and every value a name or a field selection gives counts again, as the
//! evaluator copies it. Sound for the standard library the collectors' environment has (the only
//! functions that build large values are `+`, the list and map literals, `map`, `filter`,
//! `string` and `bytes`; `matches` holds a compiled regular expression for a moment); any other
//! function counts as if it built the sum of its arguments. The fuzz target
//! `hub/tests/cel_estimate.rs` holds the estimate to what evaluations really hold.

use std::sync::Arc;

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use serde_json::Value as Json;

/// What a value takes beyond its content, in bytes: a CEL value in a list, or a scalar.
const VALUE: u64 = 32;
/// What a map entry takes beyond its key's and value's content, in bytes.
const ENTRY: u64 = 96;
/// The most a `matches` holds while it compiles its regular expression, freed when it returns:
/// the `regex` crate's limits keep it under about 40 MiB, whatever the pattern.
const REGEX_MEMORY: u64 = 48 << 20;
/// What compiling a regular expression costs, in steps: up to some milliseconds, for any pattern.
const REGEX_STEPS: u64 = 100_000;

/// An upper bound of a value: its length (items of a list or map, what a comprehension ranges
/// over), the memory its content takes, and a bound of each of its elements (map values and
/// keys, list items), if it has any.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Shape {
    pub(super) items: u64,
    /// The length of a string or bytes, which a comprehension cannot range over but for which
    /// the evaluator still reserves one item per byte before it finds so.
    pub(super) text: u64,
    pub(super) bytes: u64,
    pub(super) element: Option<Arc<Shape>>,
}

impl Shape {
    /// A number, boolean, null, timestamp or duration.
    pub(super) const SCALAR: Shape = Shape {
        items: 0,
        text: 0,
        bytes: VALUE,
        element: None,
    };

    /// The bound of a JSON value as CEL sees it: the longest list, map or string at each depth,
    /// the most bytes any value at that depth takes, and what the whole takes.
    pub(super) fn of(json: &Json) -> Shape {
        let (items, bytes, element) = match json {
            Json::String(s) => return Shape::text(s.len()),
            Json::Array(items) => {
                let shapes: Vec<Shape> = items.iter().map(Shape::of).collect();
                let bytes = shapes.iter().map(|s| VALUE + s.bytes).sum::<u64>();
                (items.len(), bytes, shapes.into_iter().reduce(|a, b| a.join(&b)))
            }
            Json::Object(map) => {
                let shapes: Vec<(usize, Shape)> = map.iter().map(|(k, v)| (k.len(), Shape::of(v))).collect();
                let bytes = shapes.iter().map(|(k, s)| ENTRY + *k as u64 + s.bytes).sum::<u64>();
                let element = shapes
                    .into_iter()
                    .map(|(k, s)| Shape::text(k).join(&s))
                    .reduce(|a, b| a.join(&b));
                (map.len(), bytes, element)
            }
            _ => return Shape::SCALAR,
        };
        Shape {
            items: items as u64,
            text: 0,
            bytes: VALUE + bytes,
            element: element.map(Arc::new),
        }
    }

    /// A map of these fields, as `inventory`, `returned` and `propagation` are made.
    pub(super) fn record(fields: &[(&str, Shape)]) -> Shape {
        let element = fields
            .iter()
            .map(|(name, shape)| Shape::text(name.len()).join(shape))
            .reduce(|a, b| a.join(&b));
        Shape {
            items: fields.len() as u64,
            text: 0,
            bytes: VALUE
                + fields
                    .iter()
                    .map(|(k, v)| ENTRY + k.len() as u64 + v.bytes)
                    .sum::<u64>(),
            element: element.map(Arc::new),
        }
    }

    /// A string or bytes of `len` bytes: no items to range over.
    pub(super) fn text(len: usize) -> Shape {
        Shape {
            items: 0,
            text: len as u64,
            bytes: VALUE + len as u64,
            element: None,
        }
    }

    /// The bound of a value that is either.
    pub(super) fn join(&self, other: &Shape) -> Shape {
        Shape {
            items: self.items.max(other.items),
            text: self.text.max(other.text),
            bytes: self.bytes.max(other.bytes),
            element: join_elements(&self.element, &other.element),
        }
    }

    /// The bound of the concatenation of the two (`+`).
    fn concat(&self, other: &Shape) -> Shape {
        Shape {
            items: self.items.saturating_add(other.items),
            text: self.text.saturating_add(other.text),
            bytes: self.bytes.saturating_add(other.bytes),
            element: join_elements(&self.element, &other.element),
        }
    }

    /// The bound of an element of this value: a field, an item, a key.
    fn element(&self) -> Shape {
        self.element.as_deref().cloned().unwrap_or(Shape::SCALAR)
    }
}

fn join_elements(a: &Option<Arc<Shape>>, b: &Option<Arc<Shape>>) -> Option<Arc<Shape>> {
    match (a, b) {
        (Some(a), Some(b)) if Arc::ptr_eq(a, b) => Some(a.clone()),
        (Some(a), Some(b)) => Some(Arc::new(a.join(b))),
        (Some(x), None) | (None, Some(x)) => Some(x.clone()),
        (None, None) => None,
    }
}

/// What evaluating an expression may take: its value's bound, the syntax-tree nodes it may
/// visit, the bytes it may allocate, and what it may hold for a moment beyond those.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Estimate {
    pub(super) value: Shape,
    pub(super) steps: u64,
    pub(super) built: u64,
    pub(super) transient: u64,
}

impl Estimate {
    fn of(value: Shape, parts: &[Estimate], built: u64) -> Estimate {
        Estimate {
            value,
            steps: parts.iter().fold(1, |sum, p| sum.saturating_add(p.steps)),
            built: parts.iter().fold(built, |sum, p| sum.saturating_add(p.built)),
            transient: parts.iter().map(|p| p.transient).max().unwrap_or(0),
        }
    }
}

/// The variables in scope and their bounds; later ones hide earlier ones of the same name.
pub(super) type Scope<'a> = Vec<(&'a str, Shape)>;

/// The estimate of evaluating `expr` with the variables of `scope`.
pub(super) fn estimate<'e>(expr: &'e IdedExpr, scope: &mut Scope<'e>) -> Estimate {
    match &expr.expr {
        // The evaluator copies what a name or a chain of field selections gives.
        Expr::Ident(_) | Expr::Select(_) => {
            let mut tests = Vec::new();
            let mut base = expr;
            while let Expr::Select(select) = &base.expr {
                tests.push(select.test);
                base = &select.operand;
            }
            let computed = match &base.expr {
                Expr::Ident(name) => {
                    let value = scope.iter().rev().find(|(n, _)| n == name).map(|(_, s)| s.clone());
                    Estimate::of(value.unwrap_or(Shape::SCALAR), &[], 0)
                }
                _ => estimate(base, scope),
            };
            let value = tests.iter().rev().fold(
                computed.value,
                |value, &test| {
                    if test { Shape::SCALAR } else { value.element() }
                },
            );
            let built = value.bytes;
            Estimate {
                value,
                steps: computed.steps.saturating_add(tests.len() as u64),
                built: computed.built.saturating_add(built),
                transient: computed.transient,
            }
        }
        Expr::Literal(literal) => {
            let value = match literal {
                LiteralValue::String(s) => Shape::text(s.inner().len()),
                LiteralValue::Bytes(b) => Shape::text(b.inner().len()),
                _ => Shape::SCALAR,
            };
            let built = value.bytes;
            Estimate::of(value, &[], built)
        }
        Expr::List(list) => {
            let items: Vec<Estimate> = list.elements.iter().map(|e| estimate(e, scope)).collect();
            let count = items.len() as u64;
            literal(count, VALUE * (count + 1), &items)
        }
        Expr::Map(map) => entries(map.entries.iter().map(|e| &e.expr), scope),
        Expr::Struct(st) => entries(st.entries.iter().map(|e| &e.expr), scope),
        Expr::Call(call) => {
            let parts: Vec<Estimate> = call
                .target
                .iter()
                .map(|t| &**t)
                .chain(&call.args)
                .map(|a| estimate(a, scope))
                .collect();
            let value = result(&call.func_name, &parts);
            let built = if value == Shape::SCALAR || forwards(&call.func_name) {
                0
            } else {
                value.bytes
            };
            let mut estimate = Estimate::of(value, &parts, built);
            let arguments = parts.iter().fold(0u64, |sum, p| sum.saturating_add(p.value.bytes));
            if call.func_name == "matches" {
                estimate.steps = estimate.steps.saturating_add(REGEX_STEPS);
            }
            estimate.transient = estimate.transient.max(match call.func_name.as_str() {
                "matches" => REGEX_MEMORY,
                // A text they cannot parse is copied into the error, more than once: a value
                // to convert, or the timezone of a time function (getHours, getDate, ...).
                f if PARSES.contains(&f) || f.starts_with("get") => arguments.saturating_mul(4),
                _ => 0,
            });
            estimate
        }
        Expr::Comprehension(c) => {
            let range = estimate(&c.iter_range, scope);
            let init = estimate(&c.accu_init, scope);
            let times = range.value.items;
            let item = range.value.element().join(&Shape::SCALAR);
            let before = scope.len();
            scope.push((c.iter_var.as_str(), item.clone()));
            if let Some(second) = &c.iter_var2 {
                scope.push((second.as_str(), item));
            }
            scope.push((c.accu_var.as_str(), init.value.clone()));
            // A macro's loop step adds to the accumulator at most what it adds to the first:
            // one item for `map` and `filter`, nothing for the others.
            let condition = estimate(&c.loop_cond, scope);
            let step = estimate(&c.loop_step, scope);
            let grown = Shape {
                items: grow(init.value.items, step.value.items, times),
                text: grow(init.value.text, step.value.text, times),
                bytes: grow(init.value.bytes, step.value.bytes, times),
                element: join_elements(&init.value.element, &step.value.element),
            };
            scope.last_mut().expect("the accumulator was pushed").1 = grown;
            let result = estimate(&c.result, scope);
            scope.truncate(before);
            let per_item = condition.steps.saturating_add(step.steps);
            let built_per_item = condition.built.saturating_add(step.built);
            Estimate {
                value: result.value,
                steps: [range.steps, init.steps, times.saturating_mul(per_item), result.steps]
                    .into_iter()
                    .fold(1, u64::saturating_add),
                built: [
                    range.built,
                    init.built,
                    VALUE.saturating_mul(range.value.text),
                    times.saturating_mul(built_per_item),
                    result.built,
                ]
                .into_iter()
                .fold(0, u64::saturating_add),
                transient: [
                    range.transient,
                    init.transient,
                    condition.transient,
                    step.transient,
                    result.transient,
                ]
                .into_iter()
                .fold(0, u64::max),
            }
        }
        Expr::Unspecified => Estimate::of(Shape::SCALAR, &[], 0),
    }
}

/// `init` after `times` steps, each adding what one step added to it.
fn grow(init: u64, after_one: u64, times: u64) -> u64 {
    init.saturating_add(after_one.saturating_sub(init).saturating_mul(times))
}

/// A map or struct literal: its entries' keys and values, and the map it builds.
fn entries<'e>(entries: impl Iterator<Item = &'e EntryExpr>, scope: &mut Scope<'e>) -> Estimate {
    let mut parts = Vec::new();
    let mut count = 0u64;
    for entry in entries {
        count += 1;
        match entry {
            EntryExpr::StructField(field) => parts.push(estimate(&field.value, scope)),
            EntryExpr::MapEntry(entry) => {
                parts.push(estimate(&entry.key, scope));
                parts.push(estimate(&entry.value, scope));
            }
        }
    }
    literal(count, VALUE + ENTRY * count, &parts)
}

/// A list or map literal of `items` made of `parts` (items, or keys and values), taking `own`
/// bytes itself. Each part is copied into it.
fn literal(items: u64, own: u64, parts: &[Estimate]) -> Estimate {
    let value = Shape {
        items,
        text: 0,
        bytes: parts.iter().fold(own, |sum, p| sum.saturating_add(p.value.bytes)),
        element: parts
            .iter()
            .map(|p| p.value.clone())
            .reduce(|a, b| a.join(&b))
            .map(Arc::new),
    };
    let built = value.bytes;
    Estimate::of(value, parts, built)
}

/// Functions that parse a string argument, whose error holds it.
const PARSES: &[&str] = &["int", "uint", "double", "bool", "timestamp", "duration"];

/// Functions whose result is one of their arguments or a part of one, built by none.
fn forwards(function: &str) -> bool {
    matches!(
        function,
        operators::CONDITIONAL
            | operators::INDEX
            | operators::OPT_INDEX
            | operators::OPT_SELECT
            | "dyn"
            | "optional.of"
            | "optional.ofNonZeroValue"
            | "value"
            | "orValue"
            | "or"
            | "max"
            | "min"
    )
}

/// The bound of what `function` returns for arguments (the target first) of these estimates.
fn result(function: &str, args: &[Estimate]) -> Shape {
    let joined = || {
        args.iter()
            .map(|a| a.value.clone())
            .reduce(|a, b| a.join(&b))
            .unwrap_or(Shape::SCALAR)
    };
    match function {
        operators::ADD => args
            .iter()
            .map(|a| a.value.clone())
            .reduce(|a, b| a.concat(&b))
            .unwrap_or(Shape::SCALAR),
        operators::CONDITIONAL => match args {
            [_, then, otherwise] => then.value.join(&otherwise.value),
            _ => joined(),
        },
        operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => {
            args.first().map_or(Shape::SCALAR, |a| a.value.element())
        }
        // `max` and `min` take numbers, or a list of them.
        "max" | "min" => joined().join(&joined().element()),
        f if forwards(f) => joined(),
        "string" | "bytes" => {
            let longest = args.iter().map(|a| a.value.bytes).max().unwrap_or(0);
            Shape::text(usize::try_from(longest).unwrap_or(usize::MAX).saturating_add(32))
        }
        f if SCALAR_RESULTS.contains(&f) || f.starts_with("get") => Shape::SCALAR,
        _ => {
            let all = args
                .iter()
                .map(|a| a.value.join(&a.value.element()))
                .reduce(|a, b| a.concat(&b))
                .unwrap_or(Shape::SCALAR);
            Shape {
                bytes: all.bytes.saturating_add(VALUE),
                ..all
            }
        }
    }
}

/// Functions of the standard library that return a number, boolean, type, timestamp or
/// duration whatever their arguments (besides the `get…` accessors of timestamps and durations).
const SCALAR_RESULTS: &[&str] = &[
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::LOGICAL_NOT,
    operators::SUBSTRACT,
    operators::MULTIPLY,
    operators::DIVIDE,
    operators::MODULO,
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::GREATER_EQUALS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::LESS,
    operators::NEGATE,
    operators::NOT_STRICTLY_FALSE,
    operators::IN,
    "has",
    "hasValue",
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "bool",
    "type",
    "timestamp",
    "duration",
    "optional.none",
];
