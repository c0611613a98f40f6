//! Go's `text/template`, as run with `Option("missingkey=error")` against a `map[string]string`:
//! [`Template::parse`] and [`Template::execute`], or [`expand`] for both. It has no dependencies;
//! KubeStellar's hub uses it to expand the templates in the objects it delivers to each WEC.
//!
//! The engine implements the part of text/template that means something over a flat string map,
//! and matches Go exactly there (its `tests/oracle.rs` runs the same cases
//! through Go): text, comments, trim markers, `if`/`with` with `else`, `else if` and `else with`,
//! variables (`$x :=`, `$x =`, `$`), pipelines, parentheses, string, number and boolean constants,
//! field access, and the functions `and or not len index slice eq ne lt le gt ge print printf
//! println html js urlquery`. Errors read like Go's, without the template name.
//!
//! What it leaves out fails with an error that [`TemplateError::is_unsupported`] flags, never with
//! a different result: `range`, `define`, `template`, `block`, `break`, `continue`, `nil`, `call`,
//! character and complex constants, numbers with `_`, hexadecimal floats, string constants that
//! are not UTF-8, identifiers that are not ASCII, printf directives other than `%v %s %d %q %t %T
//! %%` with a width and `-`, `%q` and `js` of non-ASCII text, slicing inside a UTF-8 character,
//! and nesting deeper than 100 (each `else if` counts as a level).
//!
//! Limits keep a template from taking its process down: [`MAX_TEXT`] for any string it makes or
//! prints, and bounds on nesting, printf widths and the text it makes in all.
//!
//! The modules follow Go's packages: `lex` and `parse` are text/template/parse, `exec` and
//! `builtins` are text/template, and [`fmt`] is the part of Go's fmt that templates use
//! ([`fmt::go_float`], Go's `%v` of a float64, is public for other Go-compatible output).

mod builtins;
mod exec;
mod fault;
pub mod fmt;
mod lex;
mod limits;
mod parse;
mod value;

pub use exec::{Template, expand};
pub use fault::TemplateError;
pub use limits::MAX_TEXT;

/// Whether a string is a template: one that contains `{{` (KubeStellar expands exactly those).
pub fn has_template(s: &str) -> bool {
    s.contains("{{")
}

#[cfg(test)]
use limits::MAX_DEPTH;
#[cfg(test)]
use value::Props;

/// The properties the unit tests run against.
#[cfg(test)]
fn wec() -> Props {
    [("clusterName", "cluster1"), ("region", "east"), ("n", "3")]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expands_like_go() {
        for (template, want) in [
            ("{{.clusterName}}", "cluster1"),
            ("a {{- .region -}} b {{/* note */}}c", "aeastb c"),
            ("{{.}}", "map[clusterName:cluster1 n:3 region:east]"),
            ("{{$r := .region}}{{$r = print $r \"!\"}}{{$r}}/{{$.n}}", "east!/3"),
            (
                "{{if eq .region \"west\"}}w{{else if eq .region \"east\"}}e{{end}}",
                "e",
            ),
            ("{{with .region}}{{.}}{{else}}none{{end}}", "east"),
            (
                "{{.region | printf \"%s-%5d|%-5v|%q\" \"x\" 7 true}}",
                "x-    7|true |\"east\"",
            ),
            (
                "{{len .region}} {{index .region 0}} {{slice .region 1 3}} {{index . \"zone\"}}|",
                "4 101 as |",
            ),
            (
                "{{and 1 \"\" 2}}|{{or 0 \"x\"}}|{{not .region}}|{{or .region .zone}}",
                "|x|false|east",
            ),
            ("{{print 1 2 \"a\" 3}}{{println}}", "1 2a3\n"),
            ("{{1e6}} {{0.5}} {{-0.0}} {{0x1F}} {{017}}", "1e+06 0.5 -0 31 15"),
            (
                "{{html \"<a&b>\"}} {{urlquery \"a b/c\"}} {{js \"a'b<\"}}",
                "&lt;a&amp;b&gt; a+b%2Fc a\\'b\\u003C",
            ),
            (
                "{{printf \"%d\" \"s\"}} {{printf \"%s\"}} {{printf \"x\" 1}}",
                "%!d(string=s) %!s(MISSING) x%!(EXTRA int=1)",
            ),
        ] {
            assert_eq!(
                expand(template, &wec()).map_err(|error| error.to_string()),
                Ok(want.to_string()),
                "{template}"
            );
        }
    }

    #[test]
    fn errors_read_like_go() {
        for (template, want) in [
            (
                "{{.zone}}",
                r#"template: 1:2: executing at <.zone>: map has no entry for key "zone""#,
            ),
            (
                "x\n {{.region.x}}",
                "template: 2:3: executing at <.region.x>: can't evaluate field x in type string",
            ),
            (
                "{{len 1}}",
                "template: 1:2: executing at <len 1>: error calling len: len of type int",
            ),
            ("{{nope}}", r#"template: 1: function "nope" not defined"#),
            ("{{.region", "template: 1: unclosed action"),
            ("{{if .region}}", "template: 1: unexpected EOF"),
            (
                "{{range .}}{{end}}",
                r#"template: 1: unsupported template action "range""#,
            ),
        ] {
            assert_eq!(
                expand(template, &wec()).map_err(|error| error.to_string()),
                Err(want.to_string())
            );
        }
    }

    #[test]
    fn refuses_what_it_does_not_implement() {
        let deep_parens = format!("{{{{{}1{}}}}}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        let deep_ifs = format!(
            "{}{}",
            "{{if 1}}".repeat(MAX_DEPTH + 1),
            "{{end}}".repeat(MAX_DEPTH + 1)
        );
        let mut templates = vec![deep_parens.as_str(), deep_ifs.as_str()];
        templates.extend([
            "{{range .}}{{end}}",
            "{{define \"x\"}}{{end}}",
            "{{template \"x\"}}",
            "{{block \"x\" .}}{{end}}",
            "{{break}}",
            "{{print nil}}",
            "{{call 1}}",
            "{{'a'}}",
            "{{1i}}",
            "{{1_000}}",
            "{{0x1p4}}",
            "{{\"\\xff\"}}",
            "{{printf \"%x\" 1}}",
            "{{printf \"%05d\" 1}}",
            "{{printf \"%.2f\" 1.5}}",
            "{{printf \"%q\" \"é\"}}",
            "{{js \"é\"}}",
            "{{slice \"é\" 1}}",
            "{{.é}}",
        ]);
        for template in templates {
            let error = expand(template, &wec()).expect_err(template);
            assert!(error.is_unsupported(), "{template}: {error}");
        }
    }

    #[test]
    fn has_template_looks_for_the_left_delimiter() {
        assert!(has_template("a {{b"));
        assert!(!has_template("a {b}} }}"));
        assert!(!has_template(""));
    }

    fn identifier() -> impl Strategy<Value = String> {
        "[A-Za-z_][A-Za-z0-9_]{0,15}"
    }

    /// Text that looks like templates, to reach deep into the lexer and parser.
    fn template_like() -> impl Strategy<Value = String> {
        const PIECES: &[&str] = &[
            "{{",
            "}}",
            "{{-",
            "-}}",
            " ",
            "\n",
            ".",
            ".region",
            "$",
            "$x",
            ":=",
            "=",
            "|",
            "(",
            ")",
            "\"",
            "`",
            "'",
            "/*",
            "*/",
            "if",
            "else",
            "end",
            "with",
            "range",
            "print",
            "printf",
            "len",
            "index",
            "slice",
            "eq",
            "lt",
            "and",
            "or",
            "not",
            "html",
            "js",
            "urlquery",
            "1",
            "-1.5e3",
            "0x",
            "\"%s%d%q%-3v%\"",
            "true",
            "nil",
            ",",
            "é",
            "\\",
            "%",
        ];
        prop_oneof![
            proptest::collection::vec(proptest::sample::select(PIECES), 0..24).prop_map(|pieces| pieces.concat()),
            any::<String>().prop_map(|text| format!("{{{{{text}}}}}")),
        ]
    }

    proptest! {
        #[test]
        fn text_without_delimiters_is_left_alone(text in prop_oneof![any::<String>(), "[{} a-z.$|-]{0,30}"]) {
            prop_assume!(!text.contains("{{"));
            prop_assert!(!has_template(&text));
            prop_assert_eq!(expand(&text, &wec()), Ok(text));
        }

        #[test]
        fn a_field_yields_its_value(key in identifier(), value in any::<String>()) {
            let props = Props::from([(key.clone(), value.clone())]);
            for template in [
                format!("{{{{.{key}}}}}"),
                format!("{{{{- .{key} -}}}}"),
                format!("{{{{$.{key} | printf \"%s\"}}}}"),
                format!("{{{{index . {key:?}}}}}"),
            ] {
                prop_assert_eq!(expand(&template, &props), Ok(value.clone()), "{}", template);
            }
        }

        #[test]
        fn a_missing_key_is_an_error(key in identifier(), value in any::<String>()) {
            let props = Props::from([(format!("{key}_"), value)]);
            let error = expand(&format!("{{{{.{key}}}}}"), &props).unwrap_err();
            let want = format!("map has no entry for key {key:?}");
            prop_assert!(error.to_string().contains(&want), "{}", error);
        }

        #[test]
        fn expansion_never_panics(text in template_like()) {
            let _ = expand(&text, &wec());
        }
    }
}
