//! The template engine against Go's own text/template (the oracle): a small Go program, standard
//! library only, runs each case with `Option("missingkey=error")` and a `map[string]string`, and
//! our engine must agree: the same output, or both failing (messages are only shown). Cases our
//! engine deliberately does not support must fail with `is_unsupported`, whatever Go does.
//!
//! Needs the Go toolchain on PATH (CI has it); without it the test fails rather than skips.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use gotemplate::expand;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde::{Deserialize, Serialize};

const ORACLE: &str = r#"package main

import (
	"encoding/json"
	"os"
	"strings"
	"text/template"
)

type testCase struct {
	Template   string            `json:"template"`
	Properties map[string]string `json:"properties"`
}

type result struct {
	Output string `json:"output"`
	Failed bool   `json:"failed"`
	Error  string `json:"error"`
}

func run(c testCase) result {
	t, err := template.New("").Option("missingkey=error").Parse(c.Template)
	if err != nil {
		return result{Failed: true, Error: err.Error()}
	}
	var out strings.Builder
	if err := t.Execute(&out, c.Properties); err != nil {
		return result{Output: out.String(), Failed: true, Error: err.Error()}
	}
	return result{Output: out.String()}
}

func main() {
	var cases []testCase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	results := make([]result, len(cases))
	for i, c := range cases {
		results[i] = run(c)
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		panic(err)
	}
}
"#;

#[derive(Serialize)]
struct Case {
    template: String,
    properties: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct GoResult {
    output: String,
    failed: bool,
    error: String,
}

fn properties() -> BTreeMap<String, String> {
    [
        ("clusterName", "cluster1"),
        ("region", "east"),
        ("n", "3"),
        ("empty", ""),
        ("markup", "<a href='x'>&\"</a>"),
        ("spaced", "a b/c?d=e"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect()
}

/// Hand-written cases: every supported feature, Go's corner cases and error cases.
const TEMPLATES: &[&str] = &[
    // text, fields, dot, variables
    "plain text",
    "{{.clusterName}}",
    "{{ .clusterName }}-{{.region}}",
    "{{.}}",
    "{{$}}",
    "{{$.region}}",
    "{{.empty}}|",
    "{{$x := .region}}{{$x}}",
    "{{$x := 1}}{{$x = 2}}{{$x}}",
    "{{with $x := .n}}{{$x}}{{.}}{{end}}",
    "{{if $x := .region}}{{$x}}{{else}}{{$x}}{{end}}",
    "{{print ($x := 7) $x}}",
    // trim markers and comments
    "a  {{- .region -}}  b",
    "a {{- 3}}",
    "a {{-3}}",
    "{{.region -}}\n\n  x",
    "x {{- /* comment */ -}} y",
    "{{/* a\ncomment */}}z",
    "{{- /* both */ -}}",
    // constants and number printing
    "{{\"a\\tb\\x41\\u00e9\\101\"}}",
    "{{`raw\\n`}}",
    "{{true}} {{false}}",
    "{{42}} {{-7}} {{+5}} {{0x1F}} {{0o17}} {{017}} {{0b101}}",
    "{{1.5}} {{1.0}} {{1e3}} {{1e6}} {{123456.0}} {{1234567.0}} {{0.0001}} {{0.00001}} {{-0.0}} {{.5}} {{5.}}",
    "{{1e21}} {{1.7976931348623157e308}} {{5e-324}} {{0.1}} {{2.5e-5}}",
    "{{if false}}{{18446744073709551615}}{{end}}ok",
    // pipelines and parentheses
    "{{.region | printf \"%s-%s\" \"x\"}}",
    "{{.region | len}}",
    "{{.region |}}",
    "{{(print \"a\" \"b\") | printf \"%q\"}}",
    "{{len (print .region .clusterName)}}",
    "{{print (len .region) (index .region 0)}}",
    // print family
    "{{print 1 2 \"a\" \"b\" 3 true 4.5}}",
    "{{println 1 \"a\" 2}}",
    "{{print}}|{{println}}|",
    "{{printf \"%v|%s|%d|%q|%t|%T|%%\" . .region 7 .markup true 1.5}}",
    "{{printf \"%5s|%-5s|%5d|%-4v|%3t|%6q\" \"ab\" \"é\" 42 1.5 true \"x\"}}",
    "{{printf \"%d %s %t %v\" \"s\" 1 \"x\" 2}}",
    "{{printf \"%s %d\"}}",
    "{{printf \"%s\" 1 \"two\" .}}",
    "{{printf \"100%\"}}",
    "{{printf \"%z %!\" 1 .region}}",
    "{{printf \"%d\" .}}",
    "{{printf \"%q\" \"a\\\"b\\\\c\\n\\x01\\x7f\"}}",
    "{{printf \"%T %T %T\" . (index \"a\" 0) (len .)}}",
    "{{printf \"%p\" \"x\"}}",
    "{{printf \"%.\" 1}}",
    // html, js, urlquery
    "{{html .markup}} {{html 1 \"<\" 2}}",
    "{{js .markup}} {{js \"a=b\\n\"}}",
    "{{urlquery .spaced}} {{urlquery \"ü~-_.\"}} {{.spaced | urlquery}}",
    // len, index, slice
    "{{len .}} {{len \"é\"}} {{len .empty}}",
    "{{index . \"region\"}} {{index . \"missing\"}}| {{index \"abc\" 1}} {{index .}}",
    "{{slice \"abcdef\" 1 3}} {{slice .region 2}} {{slice .region}}",
    // comparisons and logic
    "{{eq 1 1}} {{eq \"a\" \"b\" \"a\"}} {{ne 1 2}} {{eq .region \"east\"}} {{eq 1 1 \"x\"}}",
    "{{lt 1 2}} {{le 2 2}} {{gt \"b\" \"a\"}} {{ge 1.5 2.5}} {{lt 1 (index \"a\" 0)}} {{eq (index \"a\" 0) 97}}",
    "{{and 1 0 2}} {{and 1 2}} {{or 0 \"\" \"x\"}} {{or 0 \"\"}} {{not 0}} {{not .region}}",
    "{{or .region .missing}} {{and .empty .missing}}",
    "{{\"x\" | and 1}} {{0 | or 0}}",
    // if / with / else chains
    "{{if .region}}yes{{else}}no{{end}}",
    "{{if .empty}}yes{{else}}no{{end}}",
    "{{if eq .region \"west\"}}w{{else if eq .region \"east\"}}e{{else}}?{{end}}",
    "{{with .empty}}x{{else with .region}}{{.}}{{end}}",
    "{{with .region}}{{.}} {{$.clusterName}}{{end}}",
    "{{if 0}}a{{else if 0.0}}b{{else if \"\"}}c{{end}}-",
    "{{if .}}{{len .}}{{end}}",
    "{{- if true -}}  t  {{- end -}}",
    // scopes, whitespace and more corners
    "{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}",
    "{{$x := .region | len}}{{$x}}",
    "{{print\n.region\t.n}}",
    "{{`a\r\nb`}}",
    "héllo {{.region}} ü",
    "{{if and .region (eq .n \"3\")}}y{{end}}{{with .empty}}x{{end}}{{if not .empty}}z{{end}}",
    "{{\"\\101\\x42\\u0043\\U00000044\"}}",
    "{{-9223372036854775808}} {{9223372036854775807}}",
    "{{if false}}{{9223372036854775808}}{{end}}",
    "{{printf \"%-3s|%3s|%5T|%-5%|%\\u00e9\" \"abcd\" \"é\" 1 2}}",
    "{{printf \"%-\"}} {{printf \"%5\" 1}}",
    "{{printf \"%v %v %v\" true 1.5e300 (index \"a\" 0)}}",
    "{{printf \"%s\" .region .n | printf \"%s|%s\" \"x\"}}",
    "{{lt (index \"a\" 0) 200}} {{eq (index \"a\" 0) (index \"a\" 0)}}",
    "{{slice \"abc\" 3}}|{{index \"\" 0}}",
    // errors
    "{{if true}}{{$y := 1}}{{end}}{{$y}}",
    "{{with $x := .region}}{{end}}{{$x}}",
    "{{or 1 ($z := 2)}}{{$z}}",
    "{{9223372036854775808}}",
    "{{-9223372036854775809}}",
    "{{\"\\400\"}}",
    "{{\"\\ud800\"}}",
    "{{0x}} {{1e}}",
    "{{.5.5}}",
    "{{$.}}",
    "{{.region.}}",
    "{{with .missing}}x{{end}}",
    "{{slice \"abc\" 4}}",
    "{{slice . 1}}",
    "{{len (index \"a\" 0)}}",
    "{{not}}",
    "{{and}}",
    "{{ge \"a\" 1}}",
    "{{( )}}",
    "{{print (1) }}{{-.region}}",
    "{{/*c*/-}}",
    "{{.missing}}",
    "before {{.missing}} after",
    "{{.region.x}}",
    "{{with .region}}{{.x}}{{end}}",
    "{{.region 1}}",
    "{{\"x\" | .region}}",
    "{{1 2}}",
    "{{nope 1}}",
    "{{$undefined}}",
    "{{.clusterName",
    "{{.clusterName}",
    "{{if .region}}unclosed",
    "{{end}}",
    "{{else}}",
    "{{if}}{{end}}",
    "{{}}",
    "{{(1}}",
    "{{1)}}",
    "{{\"unterminated}}",
    "{{/* unclosed comment }}",
    "{{/* c */ }}",
    "{{.a-}}",
    "{{print 1 | 2}}",
    "{{$x, $y := 1}}",
    "{{$y = 1}}",
    "{{len 1}}",
    "{{len}}",
    "{{not 1 2}}",
    "{{index \"abc\" 3}}",
    "{{index \"abc\" -1}}",
    "{{index . 1}}",
    "{{index 1 1}}",
    "{{slice \"abc\" 2 1}}",
    "{{slice \"abc\" 1 2 3}}",
    "{{eq 1 \"1\"}}",
    "{{eq 1}}",
    "{{eq . .}}",
    "{{lt true false}}",
    "{{lt 1 1.5}}",
    "{{printf 1}}",
    "{{printf .}}",
    "{{18446744073709551615}}",
    "{{99999999999999999999}}",
    "{{1e400}}",
    "{{08}}",
    "{{\"\\q\"}}",
    "{{else if .region}}",
    "{{if .region}}{{else with .n}}{{end}}",
    "{{with .region}}{{else if .n}}{{end}}",
    "{{if .region}}a{{else}}b{{else}}c{{end}}",
    "{{\"a\".x}}",
    "{{1 | printf}}",
    "{{print 1.x}}",
    "{{@}}",
];

/// Random templates: pipelines of functions (called with a number of arguments they accept) over
/// fields and constants, with trim markers, variables and `if`/`with` blocks, and now and then a
/// soup of template words or random characters between delimiters. They check that we accept and
/// reject the same texts as Go, and print the same.
fn generated(count: usize) -> Vec<String> {
    use proptest::collection::vec;
    use proptest::prop_oneof;
    use proptest::sample::select;

    const OPERANDS: &[&str] = &[
        ".clusterName",
        ".region",
        ".n",
        ".empty",
        ".markup",
        ".missing",
        ".",
        "$",
        "$.region",
        "1",
        "-2",
        "0x1F",
        "1.5",
        "1e7",
        "0",
        "2",
        "true",
        "false",
        "\"x\"",
        "\"%s\"",
        "\"%d|%v|%q|%5s|%t\"",
        "`r`",
        "\"\"",
    ];
    /// Functions with the fewest and most arguments to give them.
    const FUNCTIONS: &[(&str, usize, usize)] = &[
        ("print", 0, 3),
        ("printf", 1, 3),
        ("println", 0, 2),
        ("len", 1, 1),
        ("index", 1, 2),
        ("slice", 1, 3),
        ("eq", 2, 3),
        ("ne", 2, 2),
        ("lt", 2, 2),
        ("le", 2, 2),
        ("gt", 2, 2),
        ("ge", 2, 2),
        ("and", 1, 3),
        ("or", 1, 3),
        ("not", 1, 1),
        ("html", 0, 2),
        ("js", 0, 2),
        ("urlquery", 0, 2),
    ];
    const WORDS: &[&str] = &[
        ".region", ".missing", ".", "$x", "$x := ", "$x = ", "|", "(", ")", " ", " ", "print", "len", "eq", "and",
        "\"x\"", "1", "-2", "1.5", "true", ",", "if", "else", "end", "with", "=", "{{", "}}",
    ];
    /// A call of a function with arguments cut or padded to what it accepts (one less when piped).
    fn call(&(name, least, most): &(&str, usize, usize), mut args: Vec<String>, piped: bool) -> String {
        let (least, most) = (
            least.saturating_sub(usize::from(piped)),
            most.saturating_sub(usize::from(piped)),
        );
        args.truncate(most);
        args.resize(args.len().max(least), ".region".to_string());
        format!("{name} {}", args.join(" "))
    }
    let operand = select(OPERANDS)
        .prop_map(str::to_string)
        .prop_recursive(2, 6, 3, |inner| {
            (select(FUNCTIONS), vec(inner, 0..4))
                .prop_map(|(function, args)| format!("({})", call(&function, args, false)))
        });
    let calls =
        |piped| (select(FUNCTIONS), vec(operand.clone(), 0..4)).prop_map(move |(f, args)| call(&f, args, piped));
    let declare = select(&["", "", "$x := ", "$x = "][..]);
    let pipeline = (
        declare,
        prop_oneof![operand.clone(), calls(false)],
        vec(calls(true), 0..2),
    )
        .prop_map(|(declare, first, rest)| {
            std::iter::once(format!("{declare}{first}"))
                .chain(rest)
                .collect::<Vec<_>>()
                .join(" | ")
        });
    let soup = vec(select(WORDS), 1..6).prop_map(|words| words.concat());
    let inside = prop_oneof![8 => pipeline, 1 => soup];
    let left = select(&["{{", "{{", "{{- ", " {{"][..]);
    let right = select(&["}}", "}}", " -}} ", "}} "][..]);
    let action = (left, inside.clone(), right).prop_map(|(left, inside, right)| format!("{left}{inside}{right}"));
    let block = (select(&["if", "with"][..]), inside, action.clone(), action.clone()).prop_map(
        |(kw, condition, then, otherwise)| format!("{{{{{kw} {condition}}}}}{then}{{{{else}}}}{otherwise}{{{{end}}}}"),
    );
    let text =
        select(&["a", "\n", "{{/* c */}}", "{{- /* c */ -}}", "{{else}}", "}}", "{{"][..]).prop_map(str::to_string);
    let noise = proptest::string::string_regex("\\{\\{-? ?[ -~\\né]{0,10}\\}\\}").expect("a valid regex");
    let piece = prop_oneof![6 => action, 2 => block, 1 => text, 1 => noise];
    let template = vec(piece, 1..3).prop_map(|pieces| pieces.concat());
    let mut runner = TestRunner::deterministic();
    (0..count)
        .map(|_| template.new_tree(&mut runner).expect("generate a template").current())
        .collect()
}

fn run_go(cases: &[Case]) -> Vec<GoResult> {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    std::fs::write(dir.path().join("go.mod"), "module templateoracle\n\ngo 1.23\n").expect("write go.mod");
    std::fs::write(dir.path().join("main.go"), ORACLE).expect("write main.go");
    let mut child = Command::new("go")
        .args(["run", "."])
        .current_dir(dir.path())
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("cannot run `go` ({error}): the template oracle test needs the Go toolchain on PATH")
        });
    let input = serde_json::to_vec(cases).expect("encode the cases");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&input)
        .expect("send the cases to go");
    let output = child.wait_with_output().expect("wait for go");
    assert!(output.status.success(), "the Go oracle failed: {}", output.status);
    serde_json::from_slice(&output.stdout).expect("decode Go's results")
}

/// Our result against Go's for every case; the mismatches, described.
fn mismatches(cases: &[Case]) -> (Vec<String>, usize) {
    let go = run_go(cases);
    assert_eq!(go.len(), cases.len());
    let mut unsupported = 0;
    let mut wrong = Vec::new();
    for (case, go) in cases.iter().zip(go) {
        let ours = expand(&case.template, &case.properties);
        let agree = match &ours {
            Err(error) if error.is_unsupported() => {
                unsupported += 1;
                true
            }
            Err(_) => go.failed,
            Ok(output) => !go.failed && *output == go.output,
        };
        if !agree {
            let go = if go.failed {
                format!("error: {}", go.error)
            } else {
                format!("{:?}", go.output)
            };
            wrong.push(format!("{:?}\n    go:   {go}\n    ours: {ours:?}", case.template));
        }
    }
    (wrong, unsupported)
}

#[test]
fn hand_written_cases_match_go() {
    let mut cases: Vec<Case> = TEMPLATES
        .iter()
        .map(|template| Case {
            template: template.to_string(),
            properties: properties(),
        })
        .collect();
    for template in [
        "{{.}}",
        "{{if .}}full{{else}}empty{{end}}",
        "{{len .}}",
        "{{.clusterName}}",
    ] {
        cases.push(Case {
            template: template.to_string(),
            properties: BTreeMap::new(),
        });
    }
    let unsupported = agree_with_go(&cases);
    assert_eq!(unsupported, 0, "hand-written cases use only supported features");
}

#[test]
fn generated_templates_match_go() {
    let cases: Vec<Case> = generated(4000)
        .into_iter()
        .map(|template| Case {
            template,
            properties: properties(),
        })
        .collect();
    let unsupported = agree_with_go(&cases);
    let succeeded = cases
        .iter()
        .filter(|case| expand(&case.template, &case.properties).is_ok())
        .count();
    println!(
        "{} generated templates: {succeeded} expand, {unsupported} unsupported",
        cases.len()
    );
    assert!(
        succeeded >= cases.len() / 10,
        "too few generated templates expand ({succeeded})"
    );
}

/// Asserts that every case our engine supports comes out as Go has it; returns how many cases
/// use unsupported features (those are not compared).
fn agree_with_go(cases: &[Case]) -> usize {
    let (wrong, unsupported) = mismatches(cases);
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ from Go:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    unsupported
}
