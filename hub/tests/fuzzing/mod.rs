//! What the fuzz targets share: the runner and the generators of JSON and CEL expressions.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{TestCaseResult, TestRunner};
use serde_json::{Value as Json, json};

/// Runs `test` on cases of `strategy` until `FUZZ_SECONDS` have passed and prints how many ran.
/// A failing (or panicking) case is shrunk by proptest and the test panics with the minimal input.
pub fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> TestCaseResult)
where
    S::Value: Debug,
{
    let seconds =
        std::env::var("FUZZ_SECONDS").map_or(2.0, |s| s.parse().expect("FUZZ_SECONDS is a number of seconds"));
    let budget = Duration::from_secs_f64(seconds);
    let mut runner = TestRunner::default();
    let start = Instant::now();
    let mut cases = 0u64;
    while start.elapsed() < budget {
        let case = strategy.new_tree(&mut runner).expect("generate a case");
        if let Err(failure) = runner.run_one(case, &test) {
            panic!("fuzz {name}: {failure}");
        }
        cases += 1;
    }
    println!("fuzz {name}: {cases} cases in {:.1} s", start.elapsed().as_secs_f64());
}

/// Small JSON values, with `leaf` among the leaves and keys from `key`.
pub fn json_with(
    key: impl Strategy<Value = String> + Clone + 'static,
    leaf: impl Strategy<Value = Json> + 'static,
) -> impl Strategy<Value = Json> {
    let scalar = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z0-9 ]{0,6}".prop_map(Json::from),
        any::<String>().prop_map(Json::from),
    ];
    prop_oneof![scalar, leaf].prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Json::Array),
            btree_map(key.clone(), inner, 0..4).prop_map(|map| Json::Object(map.into_iter().collect())),
        ]
    })
}

/// A generated expression with lower bounds of its syntax tree's depth and of how deeply its
/// comprehensions nest, as the collector counts them: a construct adds to the depth only when it
/// surely is a node of its own (a call, a list, a map, a comprehension), so an expression the
/// collector accepts must be within the limits by these counts too.
#[derive(Clone, Debug)]
pub struct Cel {
    pub text: String,
    pub depth: usize,
    pub nesting: usize,
}

impl Cel {
    pub fn leaf(text: &str) -> Cel {
        Cel {
            text: text.to_string(),
            depth: 1,
            nesting: 0,
        }
    }

    /// A node over `children`, adding `levels` to the depth.
    pub fn node(text: String, levels: usize, children: &[&Cel]) -> Cel {
        Cel {
            text,
            depth: children.iter().map(|c| c.depth).max().unwrap_or(0) + levels,
            nesting: children.iter().map(|c| c.nesting).max().unwrap_or(0),
        }
    }
}

pub const CEL_LEAVES: &[&str] = &[
    "obj",
    "obj.spec",
    "obj.metadata.name",
    "returned.status",
    "returned.status.replicas",
    "inventory.name",
    "propagation.lastGeneration",
    "propagation.lastReturnedUpdateTimestamp",
    "x",
    "y",
    "undeclared",
    "int",
    "1",
    "-1",
    "1u",
    "1.5",
    "-0.0",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615u",
    "'s'",
    "\"é\"",
    "'\\u00e9\\x41'",
    "'''multi\nline'''",
    "r'\\d+'",
    "b'\\xff'",
    "true",
    "null",
    "[]",
    "{}",
    "[1, 2, 3]",
    "{'a': 1}",
    "has(obj.spec)",
    "obj.spec.big",
    "obj.spec.l",
    "obj.spec.m",
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
    "'abcdefghijklmnopqrstuvwxyz'",
];

pub const CEL_BINARY: &[&str] = &[
    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in",
];

pub const CEL_MACROS: &[&str] = &["all", "exists", "exists_one", "filter", "map"];

pub const CEL_FUNCTIONS: &[&str] = &[
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "type",
    "timestamp",
    "duration",
    "dyn",
    "max",
    "nope",
];

pub const CEL_METHODS: &[&str] = &[
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "size",
    "getHours",
    "nope",
];

pub fn cel_grammar() -> impl Strategy<Value = Cel> {
    let leaf = select(CEL_LEAVES).prop_map(Cel::leaf);
    leaf.prop_recursive(6, 48, 4, |inner| {
        let var = select(&["x", "y", "obj", "@it", "1"][..]);
        prop_oneof![
            (inner.clone(), select(CEL_BINARY), inner.clone()).prop_map(|(l, op, r)| Cel::node(
                format!("({} {op} {})", l.text, r.text),
                1,
                &[&l, &r]
            )),
            (select(&["!", "-", "!!", "--"][..]), inner.clone()).prop_map(|(op, e)| Cel::node(
                format!("{op}{}", e.text),
                0,
                &[&e]
            )),
            (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| Cel::node(
                format!("({} ? {} : {})", c.text, a.text, b.text),
                1,
                &[&c, &a, &b]
            )),
            (select(CEL_FUNCTIONS), inner.clone()).prop_map(|(f, e)| Cel::node(format!("{f}({})", e.text), 1, &[&e])),
            (inner.clone(), select(CEL_METHODS), inner.clone()).prop_map(|(t, m, a)| Cel::node(
                format!("({}).{m}({})", t.text, a.text),
                1,
                &[&t, &a]
            )),
            (inner.clone(), inner.clone()).prop_map(|(e, i)| Cel::node(
                format!("({})[{}]", e.text, i.text),
                1,
                &[&e, &i]
            )),
            (inner.clone(), select(&["spec", "status", "a", "?b"][..])).prop_map(|(e, field)| Cel::node(
                format!("({}).{field}", e.text),
                0,
                &[&e]
            )),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Cel::node(
                format!("[{}, {}]", a.text, b.text),
                1,
                &[&a, &b]
            )),
            (inner.clone(), inner.clone()).prop_map(|(k, v)| Cel::node(
                format!("{{{}: {}}}", k.text, v.text),
                1,
                &[&k, &v]
            )),
            inner.clone().prop_map(|e| Cel::node(format!("({})", e.text), 0, &[&e])),
            (inner.clone(), select(CEL_MACROS), var, inner.clone()).prop_map(|(target, m, v, body)| {
                let mut cel = Cel::node(
                    format!("({}).{m}({v}, {})", target.text, body.text),
                    1,
                    &[&target, &body],
                );
                cel.nesting = target.nesting.max(body.nesting + 1);
                cel
            }),
        ]
    })
}
