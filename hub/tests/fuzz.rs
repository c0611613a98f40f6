//! Fuzz targets for the code that parses what users write: the template engine, the JSONPath
//! subset of CustomTransform `remove`, label selectors (ks-shared's, here because the hub is the
//! crate that depends on them all) and StatusCollector CEL expressions.
//!
//! Stable Rust has no libFuzzer, so each target is a proptest strategy run for a time rather than
//! a number of cases: `FUZZ_SECONDS` per target, 2 by default so that `cargo test` runs them
//! briefly; `make fuzz` runs them for longer. Every call must return a value (`Ok` or `Err`),
//! never panic, and keep the documented limits; CEL expressions that compile are also run. A
//! failure shows the shrunk input.

mod fuzzing;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use ks_hub::status::collector::{CEL_STACK, Collector, WecReport, combine};
use ks_hub::transport::plan::jsonpath::{self, PathError};
use ks_hub::transport::plan::template::{self, MAX_OBJECT_TEXT, MAX_TEXT};
use ks_shared::api::{NamedAggregator, NamedExpression, StatusCollectorSpec};
use ks_shared::selector::{self, Selector};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value as Json;

use fuzzing::{Cel, cel_grammar, fuzz, json_with};

/// `text` cut at a character boundary: unclosed actions, strings and parentheses.
fn truncated(text: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (text, any::<prop::sample::Index>()).prop_map(|(text, at)| {
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        if cuts.is_empty() {
            text
        } else {
            text[..cuts[at.index(cuts.len())]].to_string()
        }
    })
}

/// The total length of the strings in `value`.
fn text_len(value: &Json) -> usize {
    match value {
        Json::String(text) => text.len(),
        Json::Array(items) => items.iter().map(text_len).sum(),
        Json::Object(fields) => fields.values().map(text_len).sum(),
        _ => 0,
    }
}

// ---- the template engine ----

/// Operands that work with the properties below.
const TEMPLATE_OPERANDS: &[&str] = &[
    ".",
    ".a",
    ".b",
    ".clusterName",
    "$",
    "$.a",
    "\"s\"",
    "\"\"",
    "`raw`",
    "\"%s|%d|%q|%-5v|%t|%T|%%\"",
    "1",
    "-2",
    "3.5",
    "1e3",
    "0x1F",
    "true",
    "false",
];

/// Operands that are errors, unsupported, or near a limit.
const ODD_TEMPLATE_OPERANDS: &[&str] = &[
    ".a.b",
    ".missing",
    ".é",
    "$x",
    "$y",
    "$x.a",
    "\"%10000s\"",
    "\"%10001s\"",
    "\"%!\"",
    "\"\\u00e9\\x41\"",
    "\"\\xff\"",
    "\"\\400\"",
    "+3",
    "1e400",
    "077",
    "0b101",
    "1_000",
    "9223372036854775808",
    "'a'",
    "1i",
    "nil",
    "0x1p4",
    "\"%-10000v\"",
    "\"%99999999999999999999d\"",
    "\"%.s%0s%[1]s%+d%#v%x\"",
    "-9223372036854775808",
    "9223372036854775807",
    "0x8000000000000000",
    "18446744073709551615",
    "1e21",
    "5e-324",
    "-0.0",
    ".5",
    "5.",
];

const TEMPLATE_FUNCTIONS: &[&str] = &[
    "print", "printf", "println", "len", "index", "slice", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not",
    "html", "js", "urlquery",
];

const ODD_TEMPLATE_FUNCTIONS: &[&str] = &["call", "nope", ".a", "$x", "range", "nil"];

/// A pipeline: operands, function calls, parentheses, `|` and declarations, nested.
fn pipeline() -> impl Strategy<Value = String> {
    let operand = prop_oneof![
        8 => select(TEMPLATE_OPERANDS).prop_map(String::from),
        2 => select(ODD_TEMPLATE_OPERANDS).prop_map(String::from),
        1 => any::<String>().prop_map(|s| format!("{s:?}")),
    ];
    let function = prop_oneof![
        8 => select(TEMPLATE_FUNCTIONS),
        1 => select(ODD_TEMPLATE_FUNCTIONS),
    ];
    operand.prop_recursive(4, 24, 3, move |inner| {
        prop_oneof![
            3 => (function.clone(), vec(inner.clone(), 0..3))
                .prop_map(|(function, args)| format!("{function} {}", args.join(" "))),
            1 => inner.clone().prop_map(|p| format!("({p})")),
            2 => (inner.clone(), function.clone()).prop_map(|(p, function)| format!("{p} | {function}")),
            1 => (select(&["$x := ", "$x = ", "$y := ", "$x, $y := ", "$ := ", "$z = "][..]), inner)
                .prop_map(|(declare, p)| format!("{declare}{p}")),
        ]
    })
}

/// `{{$x := "aaaaaaaaaa"}}` doubled `n` times: strings near and over the size limits.
fn doubling(n: usize) -> String {
    String::from("{{$x := \"aaaaaaaaaa\"}}") + &"{{$x = printf \"%s%s\" $x $x}}".repeat(n)
}

/// Template texts: text and actions, blocks (also ones we do not support, and unbalanced ones),
/// strings that near the size limits, and random text.
fn template_text() -> impl Strategy<Value = String> {
    let action = (
        select(&["{{", "{{", "{{- ", "{{-", " {{"][..]),
        pipeline(),
        select(&["}}", "}}", " -}}", "-}}", "}} "][..]),
    )
        .prop_map(|(left, inside, right)| format!("{left}{inside}{right}"));
    let piece = prop_oneof![
        6 => action,
        4 => "[a-z {}\n\\-é]{0,6}",
        1 => select(&["{{/* c */}}", "{{- /* c */ -}}", "{{/*", "{{end}}", "{{else}}", "{{", "}}"][..])
            .prop_map(String::from),
        1 => (0..20usize).prop_map(|n| doubling(n) + "{{$x}}"),
        1 => "\\{\\{[ -~é]{0,12}\\}\\}",
    ];
    let body = vec(piece, 0..5).prop_map(|pieces| pieces.concat());
    let grammar = body.prop_recursive(3, 24, 3, |body| {
        let keyword = prop_oneof![
            8 => select(&["if", "with"][..]),
            1 => select(&["range", "define", "block", "else if", "end"][..]),
        ];
        let otherwise = prop_oneof![
            8 => select(&["else", "else if .a", "else with .b"][..]),
            1 => select(&["else if", "else range .a", "else $x"][..]),
        ];
        let end = prop_oneof![8 => Just("{{end}}"), 1 => select(&["", "{{end}}{{end}}", "{{- end -}}"][..])];
        let block = (
            keyword,
            pipeline(),
            body.clone(),
            proptest::option::of((otherwise, body.clone())),
            end,
        )
            .prop_map(|(keyword, condition, then, otherwise, end)| {
                let otherwise = otherwise.map_or(String::new(), |(word, list)| format!("{{{{{word}}}}}{list}"));
                format!("{{{{{keyword} {condition}}}}}{then}{otherwise}{end}")
            });
        prop_oneof![block, vec(body, 0..3).prop_map(|bodies| bodies.concat())]
    });
    // Variables the pipelines use, declared now and then.
    let declared = (proptest::option::of(Just("{{$x := .a}}{{$y := 1}}")), grammar)
        .prop_map(|(declare, body)| format!("{}{body}", declare.unwrap_or_default()));
    prop_oneof![
        12 => declared.clone(),
        2 => truncated(declared),
        1 => any::<String>(),
        1 => any::<String>().prop_map(|s| format!("{{{{{s}}}}}")),
        1 => (1..=120usize).prop_map(|n| format!("{{{{{}1{}}}}}", "(".repeat(n), ")".repeat(n))),
        1 => (1..=120usize).prop_map(|n| format!("{}x{}", "{{if 1}}".repeat(n), "{{end}}".repeat(n))),
    ]
}

/// WEC properties: keys the templates name (and one no template can), values short, odd or long.
fn properties() -> impl Strategy<Value = BTreeMap<String, String>> {
    let key = select(&["a", "a", "b", "x", "n", "é"][..]).prop_map(String::from);
    let value = prop_oneof![
        4 => "[a-z0-9 ]{0,8}",
        1 => any::<String>(),
        1 => select(&["1", "true", "", "<a href='x'>&\"</a>"][..]).prop_map(String::from),
        1 => (0..20_000usize).prop_map(|n| "v".repeat(n)),
    ];
    // `clusterName` is always there, `.a` most of the time.
    (btree_map(key, value.clone(), 1..5), value).prop_map(|(mut properties, cluster)| {
        properties.insert("clusterName".to_string(), cluster);
        properties
    })
}

#[test]
fn fuzz_template() {
    let leaf = || template_text().prop_map(Json::String);
    // Now and then a list of templates that mostly print 640 KiB each, to reach the object's limit.
    let large = Just(Json::String(doubling(16) + "{{$x}}"));
    let object = prop_oneof![
        19 => json_with("[a-c]", leaf()),
        1 => vec(prop_oneof![1 => leaf(), 3 => large], 2..8).prop_map(Json::Array),
    ];
    fuzz("template", (object, properties()), |(object, properties)| {
        // What `{{.}}` prints: `map[k:v k:v]`.
        let props_len: usize = properties.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>() + 5;
        let mut templates = Vec::new();
        collect_strings(&object, &mut templates);
        for text in templates.iter().filter(|text| template::has_template(text)) {
            match template::expand(text, &properties) {
                // The output is checked against MAX_TEXT after each action, so only the text after
                // the last one can take it further.
                Ok(out) => prop_assert!(out.len() <= MAX_TEXT + text.len(), "printed {} bytes", out.len()),
                Err(error) => {
                    let _ = (error.to_string(), error.is_unsupported());
                }
            }
        }
        let mut expanded = object.clone();
        let _ = template::expand_object(&mut expanded, &properties, &mut template::Growth::default());
        // Leaves stop being expanded once the object's templates printed MAX_OBJECT_TEXT; the
        // last one run may print up to its own limit (plus one action's value when it fails).
        let limit = text_len(&object) + MAX_OBJECT_TEXT + 2 * MAX_TEXT + props_len;
        prop_assert!(
            text_len(&expanded) <= limit,
            "the object's strings grew to {}",
            text_len(&expanded)
        );
        Ok(())
    });
}

fn collect_strings(value: &Json, out: &mut Vec<String>) {
    match value {
        Json::String(text) => out.push(text.clone()),
        Json::Array(items) => items.iter().for_each(|item| collect_strings(item, out)),
        Json::Object(fields) => fields.values().for_each(|item| collect_strings(item, out)),
        _ => {}
    }
}

// ---- the JSONPath subset ----

/// Paths built from segments of the language and pieces that are not, and random text.
fn path_text() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        3 => "\\.[a-cA-Z_é][a-c0-9_]{0,2}",
        2 => "\\[\"([a-c. é'/]|\\\\[\"\\\\/bfnrtu'x]|\\\\u[0-9a-fA-F+ -]{0,4}){0,4}\"\\]",
        1 => select(
            &[
                ".", "[", "]", "[\"", "\"]", "\\", "*", "[0]", "..", " ", "['a']", "$", "\\ud800"
            ][..]
        )
        .prop_map(String::from),
    ];
    prop_oneof![
        8 => (prop_oneof![8 => Just("$"), 1 => select(&["", "$$", " $"][..])], vec(segment, 0..5))
            .prop_map(|(root, segments)| format!("{root}{}", segments.concat())),
        1 => any::<String>(),
    ]
}

/// The member at `names`, stepping only through objects as `remove` does.
fn lookup<'v>(value: &'v Json, names: &[String]) -> Option<&'v Json> {
    names.iter().try_fold(value, |at, name| at.as_object()?.get(name))
}

#[test]
fn fuzz_jsonpath() {
    let key = prop_oneof![
        "[a-c]",
        select(&["é", "", "a.b", "\"", "\\"][..]).prop_map(String::from)
    ];
    let value = json_with(key, Just(Json::Null));
    fuzz("jsonpath", (vec(path_text(), 1..4), value), |(paths, value)| {
        let (compiled, errors) = jsonpath::compile(&paths);
        prop_assert_eq!(compiled.len() + errors.len(), paths.len());
        for path in &paths {
            match jsonpath::parse(path) {
                Ok(names) => {
                    // Written back in the bracket form, the names parse to themselves.
                    let rendered: String = names
                        .iter()
                        .map(|name| format!("[{}]", serde_json::to_string(name).unwrap()))
                        .collect();
                    prop_assert_eq!(jsonpath::parse(&format!("${rendered}")), Ok(names));
                }
                Err(error) => {
                    let (PathError::NoRoot(at)
                    | PathError::ExtraJunk(at, _)
                    | PathError::NoName(at)
                    | PathError::Unterminated(at)
                    | PathError::BadEscape(at)) = error;
                    prop_assert!(at <= path.len(), "{error} is past the end of {path:?}");
                }
            }
        }
        for names in &compiled {
            let mut removed = value.clone();
            jsonpath::remove(&mut removed, names);
            prop_assert_eq!(lookup(&removed, names), None);
            let once = removed.clone();
            jsonpath::remove(&mut removed, names);
            prop_assert_eq!(removed, once, "removing twice changes nothing more");
        }
        Ok(())
    });
}

// ---- label selectors ----

// Kubernetes' limits on label names and key prefixes, restated as the selector code must keep them.
const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

fn label_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9]([-a-z0-9_.]{0,4}[a-z0-9])?",
        2 => "([a-z0-9-]{1,3}\\.){0,2}[a-z0-9-]{1,3}/[a-zA-Z0-9._-]{0,4}",
        1 => select(&["", "/", "a/", "/a", "a/b/c", "A/b", "-a", "a-", "a..b/c", "é", "a b"][..]).prop_map(String::from),
        1 => (NAME_MAX - 1..=NAME_MAX + 1).prop_map(|n| "k".repeat(n)),
        1 => (PREFIX_MAX - 1..=PREFIX_MAX + 1).prop_map(|n| format!("{}/k", "p".repeat(n))),
        1 => any::<String>(),
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "([a-z0-9]([-a-z0-9_.]{0,4}[a-z0-9])?)?",
        1 => (NAME_MAX - 1..=NAME_MAX + 1).prop_map(|n| "v".repeat(n)),
        1 => any::<String>(),
    ]
}

fn label_selector() -> impl Strategy<Value = LabelSelector> {
    let operator = prop_oneof![
        4 => select(&["In", "NotIn", "Exists", "DoesNotExist"][..]).prop_map(String::from),
        1 => select(&["in", "", "Gt", "exists"][..]).prop_map(String::from),
        1 => any::<String>(),
    ];
    let requirement = (label_key(), operator, proptest::option::of(vec(label_value(), 0..3)))
        .prop_map(|(key, operator, values)| LabelSelectorRequirement { key, operator, values });
    (
        proptest::option::of(btree_map(label_key(), label_value(), 0..3)),
        proptest::option::of(vec(requirement, 0..3)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

/// Whether `key` is within Kubernetes' limits: a name of 1 to 63 characters after an optional
/// prefix of at most 253.
fn key_within_limits(key: &str) -> bool {
    let (prefix, name) = key.split_once('/').unwrap_or(("", key));
    prefix.len() <= PREFIX_MAX && (1..=NAME_MAX).contains(&name.len())
}

#[test]
fn fuzz_selector() {
    let labels = btree_map(label_key(), label_value(), 0..4);
    fuzz("selector", (label_selector(), labels), |(selector, labels)| {
        let result = selector::matches(&selector, &labels);
        prop_assert_eq!(
            Selector::try_from(&selector).map(|s| s.matches(&labels)),
            result.clone()
        );
        prop_assert_eq!(
            selector::any_matches(&[selector.clone(), selector.clone()], &labels),
            result.clone()
        );
        match result {
            Ok(matched) => {
                let exprs = selector.match_expressions.iter().flatten();
                for (key, value) in selector.match_labels.iter().flatten() {
                    prop_assert!(key_within_limits(key) && value.len() <= NAME_MAX, "{key:?}={value:?}");
                }
                for expr in exprs.clone() {
                    prop_assert!(key_within_limits(&expr.key), "{:?}", expr.key);
                    prop_assert!(expr.values.iter().flatten().all(|v| v.len() <= NAME_MAX));
                    prop_assert!(["In", "NotIn", "Exists", "DoesNotExist"].contains(&expr.operator.as_str()));
                }
                let everything = selector.match_labels.iter().flatten().next().is_none() && exprs.count() == 0;
                prop_assert!(matched || !everything, "an empty selector matches everything");
            }
            Err(error) => {
                let _ = error.to_string();
            }
        }
        Ok(())
    });
}

// ---- StatusCollector CEL expressions ----

// The documented limits (hub/README.md), restated here so that changing them is deliberate.
const MAX_EXPRESSION_LENGTH: usize = 4096;
const MAX_EXPRESSION_DEPTH: usize = 64;
const MAX_COMPREHENSION_NESTING: usize = 2;

/// Expressions past the depth and nesting limits: `n` more `+ 1`s, or `n` comprehensions nested.
fn cel_deep() -> impl Strategy<Value = Cel> {
    prop_oneof![
        (cel_grammar(), 1..100usize).prop_map(|(e, n)| {
            let text = format!("{}{}{}", "(".repeat(n), e.text, " + 1)".repeat(n));
            Cel::node(text, n, &[&e])
        }),
        (cel_grammar(), 1..5usize).prop_map(|(e, n)| {
            let text = format!("{}{}{}", "[1, 2].all(x, ".repeat(n), e.text, ")".repeat(n));
            let mut cel = Cel::node(text, n, &[&e]);
            cel.nesting = e.nesting + n;
            cel
        }),
        (1..200usize).prop_map(|n| Cel::node(format!("{}1{}", "(".repeat(n), ")".repeat(n)), 0, &[])),
        (MAX_EXPRESSION_LENGTH - 4..MAX_EXPRESSION_LENGTH + 2).prop_map(|n| Cel::node(
            format!("'{}'", "a".repeat(n)),
            1,
            &[]
        )),
    ]
}

/// Random text: nothing is known of its shape.
fn cel_random() -> impl Strategy<Value = Cel> {
    let unknown = |text: String| Cel::node(text, 0, &[]);
    prop_oneof![
        "[-+*/%()\\[\\]{}.,?:!<>=&|'\"\\\\a-z0-9 ]{0,40}".prop_map(unknown),
        any::<String>().prop_map(unknown),
        truncated(cel_grammar().prop_map(|e| e.text)).prop_map(unknown),
    ]
}

#[test]
fn fuzz_cel() {
    // The evaluator recurses as deep as the expression; the hub runs it on threads this big.
    let thread = std::thread::Builder::new().stack_size(CEL_STACK);
    let fuzzing = thread.spawn(|| {
        let expression = prop_oneof![6 => cel_grammar(), 2 => cel_deep(), 2 => cel_random()];
        let form = select(&["select", "COUNT", "SUM", "AVG", "MIN", "MAX"][..]);
        let status = json_with("[a-c]|spec|status|replicas", Just(Json::from(1)));
        let case = (expression, form, vec(status, 1..3));
        fuzz("cel", case, |(expression, form, statuses)| {
            let spec = collector_spec(&expression.text, form);
            let collector = match Collector::new("fuzz", &spec) {
                Ok(collector) => collector,
                Err(errors) => {
                    prop_assert!(!errors.is_empty());
                    return Ok(());
                }
            };
            prop_assert!(expression.text.len() <= MAX_EXPRESSION_LENGTH);
            prop_assert!(
                expression.depth <= MAX_EXPRESSION_DEPTH,
                "accepted at depth {}",
                expression.depth
            );
            prop_assert!(
                expression.nesting <= MAX_COMPREHENSION_NESTING,
                "nesting {}",
                expression.nesting
            );
            // Accepted, it runs: every row gives a value or an error.
            let names: Vec<String> = (0..statuses.len()).map(|i| format!("wec{i}")).collect();
            let reports: Vec<WecReport> = statuses
                .iter()
                .zip(&names)
                .map(|(status, wec)| WecReport {
                    wec,
                    status: Some(status),
                    ..Default::default()
                })
                .collect();
            let results = combine(&[&collector], &statuses[0], &reports);
            prop_assert_eq!(results.len(), 1);
            Ok(())
        })
    });
    if let Err(panic) = fuzzing.expect("a thread for the CEL fuzzer").join() {
        std::panic::resume_unwind(panic);
    }
}

/// A collector with `expression` as its one column (`select`) or as the subject of an aggregate
/// grouped by it.
fn collector_spec(expression: &str, form: &str) -> StatusCollectorSpec {
    let named = vec![NamedExpression {
        name: "e".into(),
        def: expression.into(),
    }];
    if form == "select" {
        return StatusCollectorSpec {
            select: named,
            ..Default::default()
        };
    }
    StatusCollectorSpec {
        group_by: named,
        combined_fields: vec![NamedAggregator {
            name: "agg".into(),
            type_: form.into(),
            subject: Some(expression.into()),
        }],
        ..Default::default()
    }
}
