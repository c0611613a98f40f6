//! CEL expressions as collectors use them: user input for a third-party parser and evaluator, so
//! each is compiled within limits (length, depth, comprehension nesting) and run within a budget
//! shared by one object's evaluations, and a panic in either is an error, not a crash.

use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, Env, IdedExpr, Program, Value as Cel};
use serde_json::Value as Json;

use super::estimate::{Estimate, Scope, estimate};

/// The standard CEL environment; no Kubernetes libraries, as upstream.
pub(super) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

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
/// syntax-tree nodes visited, estimated before each evaluation (`estimate`). A step takes
/// 0.1–0.2 µs in a debug build, so an object's status takes at most about 2 s: a `map` over
/// 100,000 items fits, two nested over 1,000 do not.
pub(super) const MAX_EVALUATION_COST: u64 = 10_000_000;
/// The most bytes the evaluations for one object may build, estimated before each evaluation:
/// strings and lists made by `+`, `map`, `filter`, literals and conversions. With the hub's
/// evaluations running on its two runtime threads, they hold at most 128 MiB of its 1 GiB.
pub(super) const MAX_EVALUATION_BYTES: u64 = 64 << 20;
/// The longest evaluation error kept: the evaluator's messages print the values involved.
const MAX_ERROR_LENGTH: usize = 1024;
/// The stack the CEL parser and evaluator need. The parser recurses up to 96 levels (its own
/// limit) and, in a debug build, a level takes about 100 KiB; 20 nested parentheses overflowed a
/// 2 MiB thread stack and aborted the process. Parsing runs on a thread of this size, and the
/// hub's runtime threads, where expressions are evaluated, get it too.
pub const CEL_STACK: usize = 64 << 20;

/// Parses `expression` and checks that it uses no undeclared variable, with the error prefixes
/// upstream uses, and that it is within the limits above. The parser is third-party code fed
/// user input: a panic in it is an error here, not a crash of the controller.
pub(super) fn compile(expression: &str) -> Result<Expression, String> {
    if expression.len() > MAX_EXPRESSION_LENGTH {
        return Err(format!(
            "failed to parse expression: longer than {MAX_EXPRESSION_LENGTH} bytes"
        ));
    }
    let parsed = std::thread::scope(|scope| {
        let parse = || ks_shared::crash::catching(|| ENV.compile(expression));
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
    let Syntax { depth, nesting } = shape(program.expression());
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
        return Ok(Expression { program });
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

/// A compiled expression.
#[derive(Debug)]
pub(super) struct Expression {
    program: Program,
}

impl Expression {
    /// What evaluating it over variables bounded by `shapes` may take.
    pub(super) fn estimate(&self, shapes: &Scope) -> Estimate {
        estimate(self.program.expression(), &mut shapes.to_vec())
    }

    /// Runs it over `scope`, whose variables `shapes` bound, unless what it may take (steps and
    /// bytes built) is more than the budget `left`, which it then spends. A panic in the
    /// third-party evaluator becomes an error for this row only.
    pub(super) fn run(&self, scope: &Context, shapes: &Scope, left: &Budget) -> Result<Cel, String> {
        let Estimate { steps, built, .. } = self.estimate(shapes);
        if steps > left.steps.get() {
            return Err(format!(
                "evaluation would take up to {steps} steps, more than the {} left of the {MAX_EVALUATION_COST} one object's evaluations may take",
                left.steps.get()
            ));
        }
        if built > left.bytes.get() {
            return Err(format!(
                "evaluation could build up to {built} bytes, more than the {} left of the {MAX_EVALUATION_BYTES} one object's evaluations may build",
                left.bytes.get()
            ));
        }
        left.steps.set(left.steps.get() - steps);
        left.bytes.set(left.bytes.get() - built);
        match ks_shared::crash::catching(|| self.program.execute(scope)) {
            Ok(result) => result.map_err(|e| bounded_message(&e)),
            Err(_) => Err("the CEL evaluator failed".to_string()),
        }
    }
}

/// What is left of the evaluation budget of one object, spent by its expressions in turn.
pub(super) struct Budget {
    steps: Cell<u64>,
    bytes: Cell<u64>,
}

impl Budget {
    pub(super) fn new(steps: u64, bytes: u64) -> Budget {
        Budget {
            steps: Cell::new(steps),
            bytes: Cell::new(bytes),
        }
    }

    /// The budget of one object's evaluations.
    pub(super) fn per_object() -> Budget {
        Budget::new(MAX_EVALUATION_COST, MAX_EVALUATION_BYTES)
    }
}

/// An error's message, at most [`MAX_ERROR_LENGTH`] bytes of it, written no further.
fn bounded_message(error: &impl std::fmt::Display) -> String {
    struct Bounded(String);
    impl std::fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = MAX_ERROR_LENGTH - self.0.len();
            if s.len() <= room {
                self.0.push_str(s);
                return Ok(());
            }
            let cut = (0..=room).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
            self.0.push_str(&s[..cut]);
            Err(std::fmt::Error)
        }
    }
    let mut message = Bounded(String::new());
    if std::fmt::Write::write_fmt(&mut message, format_args!("{error}")).is_err() {
        message.0.push('…');
    }
    message.0
}

/// How deep an expression's syntax tree is.
#[derive(Clone, Copy, Default)]
struct Syntax {
    depth: usize,
    /// How deeply comprehensions nest.
    nesting: usize,
}

/// The shape of `expr`'s syntax tree.
fn shape(expr: &IdedExpr) -> Syntax {
    let deepest = |children: &mut dyn Iterator<Item = &IdedExpr>| {
        children.map(shape).fold(Syntax::default(), |a, b| Syntax {
            depth: a.depth.max(b.depth),
            nesting: a.nesting.max(b.nesting),
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
            Syntax {
                depth: outer.depth.max(inner.depth),
                nesting: outer.nesting.max(inner.nesting + 1),
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Syntax::default(),
    };
    Syntax {
        depth: children.depth + 1,
        nesting: children.nesting,
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

/// JSON as CEL sees it: integers are `int` when they fit (as Kubernetes' unstructured objects
/// give them to cel-go), so `returned.status.readyReplicas + 1` works.
pub(super) fn to_cel(json: &Json) -> Cel {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::estimate::Shape as ShapeBound;
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
        let sum = on_hub_stack(|| program.run(&Context::default(), &Scope::new(), &Budget::per_object()));
        assert_eq!(sum, Ok(Cel::Int(61)));
        let program = compile("[1, 2].map(a, [1, 2].map(b, a * b))").unwrap();
        assert!(on_hub_stack(|| program.run(&Context::default(), &Scope::new(), &Budget::per_object())).is_ok());
    }

    /// A scope with `obj` as `object`, and its bound.
    fn subject(object: &Json) -> (Context<'static, 'static>, Scope<'static>) {
        let mut scope = Context::with_env(ENV.clone());
        scope.add_variable_from_value("obj", to_cel(object));
        (scope, vec![("obj", ShapeBound::of(object))])
    }

    #[test]
    fn work_beyond_the_budget_is_an_error_not_a_stall() {
        let nested = compile("obj.l.map(x, obj.l.map(y, y)).size()").unwrap();
        let single = compile("obj.l.map(x, x).size()").unwrap();
        let big = |n: usize| json!({"l": (0..n).collect::<Vec<_>>()});
        // 100 items nested twice, 100,000 once: within the budget, which they spend.
        let left = Budget::per_object();
        let (scope, shapes) = subject(&big(100));
        assert_eq!(nested.run(&scope, &shapes, &left), Ok(Cel::Int(100)));
        let (scope, shapes) = subject(&big(100_000));
        assert_eq!(single.run(&scope, &shapes, &left), Ok(Cel::Int(100_000)));
        assert!(left.steps.get() < MAX_EVALUATION_COST - 100_000);
        // 100,000 items nested twice would take hours: refused before it starts.
        let refused = nested.run(&scope, &shapes, &Budget::per_object()).unwrap_err();
        assert!(refused.starts_with("evaluation would take up to"), "{refused}");
        assert!(
            refused.ends_with("steps, more than the 10000000 left of the 10000000 one object's evaluations may take"),
            "{refused}"
        );
        // What one object's evaluations spent is not there for the next expression of that object.
        let (scope, shapes) = subject(&big(100));
        assert!(
            single
                .run(&scope, &shapes, &Budget::new(10, MAX_EVALUATION_BYTES))
                .is_err()
        );
    }

    #[test]
    fn literal_ranges_and_the_bytes_they_build_count() {
        // Nested maps over literal lists, each cell a copy of a large annotation: tens of GB if
        // run, with no list in the object longer than one item.
        let list = format!("[{}]", vec!["1"; 150].join(", "));
        let hostile = compile(&format!(
            "{list}.map(a, {list}.map(b, obj.metadata.annotations.big + 'x')).size()"
        ))
        .unwrap();
        let object = json!({"metadata": {"annotations": {"big": "a".repeat(200_000)}}});
        let (scope, shapes) = subject(&object);
        let refused = hostile.run(&scope, &shapes, &Budget::per_object()).unwrap_err();
        assert!(refused.starts_with("evaluation could build up to"), "{refused}");
        assert!(
            refused.ends_with("bytes, more than the 67108864 left of the 67108864 one object's evaluations may build"),
            "{refused}"
        );
        // Steps too: a literal range counts its items.
        let counting = compile(&format!("{list}.map(a, {list}.map(b, {list}.all(c, c == 1)))")).unwrap_err();
        assert!(counting.contains("nested 3 deep"), "{counting}");
        let steps = compile(&format!("{list}.map(a, {list}.map(b, a + b)).size()")).unwrap();
        let spent = Budget::per_object();
        assert_eq!(steps.run(&scope, &shapes, &spent), Ok(Cel::Int(150)));
        assert!(
            spent.steps.get() < MAX_EVALUATION_COST - 150 * 150,
            "{}",
            spent.steps.get()
        );
        // A list grown by `+` counts what it was made of.
        let grown = compile("(obj.l + obj.l + obj.l).map(x, (obj.l + obj.l).map(y, obj.s + obj.s)).size()").unwrap();
        let object = json!({"l": vec![1; 100], "s": "a".repeat(10_000)});
        let (scope, shapes) = subject(&object);
        let refused = grown.run(&scope, &shapes, &Budget::per_object()).unwrap_err();
        assert!(refused.starts_with("evaluation could build up to"), "{refused}");
        // A legitimate collector over a large object runs.
        let usual = compile("obj.spec.containers.map(c, c.name + ':' + c.image)").unwrap();
        let object = json!({
            "metadata": {"annotations": {"last-applied": "a".repeat(100_000)}},
            "spec": {"containers": (0..20).map(|i| json!({"name": format!("c{i}"), "image": "registry/app:1"})).collect::<Vec<_>>()},
        });
        let (scope, shapes) = subject(&object);
        assert!(usual.run(&scope, &shapes, &Budget::per_object()).is_ok());
    }

    #[test]
    fn an_error_message_is_cut_where_it_would_print_a_large_value() {
        let program = compile("obj.s + 1").unwrap();
        let object = json!({"s": "é".repeat(100_000)});
        let (scope, shapes) = subject(&object);
        let error = program.run(&scope, &shapes, &Budget::per_object()).unwrap_err();
        assert!(error.len() <= MAX_ERROR_LENGTH + '…'.len_utf8(), "{}", error.len());
        assert!(error.ends_with('…'), "{error}");
    }
}
