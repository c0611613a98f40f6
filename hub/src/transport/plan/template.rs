//! Template expansion for one WEC (docs/upstream-behaviour.md#templates).
//!
//! In an object annotated `control.kubestellar.io/expand-templates: "true"`, every string leaf
//! that contains `{{` is a Go `text/template`, run with `Option("missingkey=error")` against the
//! WEC's properties (a `map[string]string`).
//!
//! The engine is the [`gotemplate`] crate (what it implements, what it refuses, and how it is
//! checked against Go: `gotemplate/tests/oracle.rs`); this module runs it over an object's string
//! leaves and builds a WEC's properties from its ManagedCluster and ConfigMap.

use std::collections::BTreeMap;

pub use gotemplate::{MAX_TEXT, Template, TemplateError, expand, has_template};
use serde_json::Value as Json;

type Props = BTreeMap<String, String>;

/// The most that all the templates of one object may print together (2 MiB).
pub const MAX_OBJECT_TEXT: usize = 2 << 20;
/// The most that one Binding's templates may add to its objects for one WEC (printed bytes beyond
/// the templates' own text), and for all its WECs together. Without them, a few MB of templates
/// that each print 10 kB, within every per-object cap, expanded to about a gigabyte across two
/// WECs before anything was written.
pub const MAX_GROWTH_PER_WEC: usize = 4 << 20;
pub const MAX_GROWTH_PER_BINDING: usize = 16 << 20;

/// What one Binding's templates have added so far: for the WEC being expanded, and for all.
/// Past either bound no more of its templates run (for that WEC, or for any WEC after).
#[derive(Debug, Default)]
pub struct Growth {
    wec: usize,
    binding: usize,
}

impl Growth {
    /// The next WEC's expansion starts (the Binding's total goes on).
    pub fn next_wec(&mut self) {
        self.wec = 0;
    }

    fn add(&mut self, bytes: usize) {
        self.wec += bytes;
        self.binding += bytes;
    }

    /// Why no more templates run, once a bound is past.
    fn exhausted(&self) -> Option<String> {
        if self.wec > MAX_GROWTH_PER_WEC {
            Some(format!(
                "the Binding's templates add more than {} MiB for this WEC",
                MAX_GROWTH_PER_WEC >> 20
            ))
        } else if self.binding > MAX_GROWTH_PER_BINDING {
            Some(format!(
                "the Binding's templates add more than {} MiB for all its WECs",
                MAX_GROWTH_PER_BINDING >> 20
            ))
        } else {
            None
        }
    }
}

/// Whether any string leaf of `value` is a template (map keys do not count).
pub fn contains_template(value: &Json) -> bool {
    match value {
        Json::String(text) => has_template(text),
        Json::Array(items) => items.iter().any(contains_template),
        Json::Object(fields) => fields.values().any(contains_template),
        _ => false,
    }
}

/// Expands, in place, every string leaf of `object` that contains `{{` (map keys and other values
/// stay as they are), counting what they add in `growth`. A leaf whose template does not parse
/// becomes `""` and one that fails while running keeps what it printed before the error, as
/// upstream does. The error lists every failed leaf, `; `-separated, each as `<path>: <error>`,
/// e.g. `spec.containers[0].env[1].value: template: 1:2: executing at <.zone>: map has no entry
/// for key "zone"`.
pub fn expand_object(
    object: &mut Json,
    properties: &BTreeMap<String, String>,
    growth: &mut Growth,
) -> Result<(), String> {
    let mut errors = Vec::new();
    let mut printed = 0;
    let mut expansion = Expansion {
        properties,
        printed: &mut printed,
        growth,
        errors: &mut errors,
    };
    expansion.value(object, &mut String::new());
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// One object's expansion: `printed` counts what its templates have printed so far; past
/// [`MAX_OBJECT_TEXT`], or once the Binding's `growth` is past a bound, the remaining leaves are
/// left as they are.
struct Expansion<'a> {
    properties: &'a Props,
    printed: &'a mut usize,
    growth: &'a mut Growth,
    errors: &'a mut Vec<String>,
}

impl Expansion<'_> {
    fn value(&mut self, value: &mut Json, path: &mut String) {
        let len = path.len();
        match value {
            Json::String(text) if has_template(text) => {
                let at = if path.is_empty() { "." } else { path.as_str() };
                let refused = (*self.printed > MAX_OBJECT_TEXT)
                    .then(|| {
                        format!(
                            "the object's templates print more than {} MiB in all",
                            MAX_OBJECT_TEXT >> 20
                        )
                    })
                    .or_else(|| self.growth.exhausted());
                if let Some(reason) = refused {
                    self.errors.push(format!("{at}: not expanded: {reason}"));
                    return;
                }
                let template = Template::parse(text);
                let mut out = String::new();
                let result = template.and_then(|template| template.execute(self.properties, &mut out));
                *self.printed += out.len();
                self.growth.add(out.len().saturating_sub(text.len()));
                *text = out;
                if let Err(error) = result {
                    self.errors.push(format!("{at}: {error}"));
                }
            }
            Json::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    self.value(item, path);
                    path.truncate(len);
                }
            }
            Json::Object(fields) => {
                for (key, item) in fields.iter_mut() {
                    if len > 0 {
                        path.push('.');
                    }
                    path.push_str(key);
                    self.value(item, path);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// The properties of one WEC, from lowest to highest precedence (later sources overwrite earlier
/// ones, docs/upstream-behaviour.md#templates):
///
/// 1. `clusterName`: the inventory object's (ManagedCluster's) name;
/// 2. the ManagedCluster's labels;
/// 3. its annotations;
/// 4. the ConfigMap `customization-properties/<cluster>` in the ITS: its `data`, then its
///    `binaryData` (the bytes read as text, each byte that is not valid UTF-8 becoming U+FFFD, as
///    upstream's JSON encoding of the result does).
///
/// So the ConfigMap beats annotations, which beat labels, which beat the built-in (a label named
/// `clusterName` replaces it). Only keys that are Go identifiers are taken (Go's
/// `token.IsIdentifier`; Kubernetes keys are ASCII, so only ASCII letters count).
pub fn properties(
    config_data: &BTreeMap<String, String>,
    config_binary_data: &BTreeMap<String, Vec<u8>>,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    cluster_name: &str,
) -> BTreeMap<String, String> {
    let mut props = Props::from([("clusterName".to_string(), cluster_name.to_string())]);
    for source in [labels, annotations, config_data] {
        for (key, value) in source.iter().filter(|(key, _)| is_go_identifier(key)) {
            props.insert(key.clone(), value.clone());
        }
    }
    for (key, value) in config_binary_data.iter().filter(|(key, _)| is_go_identifier(key)) {
        props.insert(key.clone(), text_of(value));
    }
    props
}

const GO_KEYWORDS: [&str; 25] = [
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "fallthrough",
    "for",
    "func",
    "go",
    "goto",
    "if",
    "import",
    "interface",
    "map",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "type",
    "var",
];

fn is_go_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !GO_KEYWORDS.contains(&key)
}

fn text_of(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.push_str(valid);
                return out;
            }
            Err(error) => {
                let (valid, after) = rest.split_at(error.valid_up_to());
                out.push_str(&String::from_utf8_lossy(valid));
                let bad = error.error_len().unwrap_or(after.len());
                out.extend(std::iter::repeat_n('\u{FFFD}', bad));
                rest = &after[bad..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn map(pairs: &[(&str, &str)]) -> Props {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    fn wec() -> Props {
        map(&[("clusterName", "cluster1"), ("region", "east"), ("n", "3")])
    }

    #[test]
    fn contains_template_looks_at_string_leaves_only() {
        assert!(contains_template(&json!({"a": [1, {"b": "x {{.y}}"}]})));
        assert!(!contains_template(&json!({"{{.key}}": "plain", "n": 1, "l": ["a"]})));
    }

    #[test]
    fn expand_object_expands_string_leaves_only() {
        let mut object = json!({
            "metadata": {"name": "app-{{.clusterName}}", "labels": {"{{.region}}": "{{.region}}"}},
            "spec": {"replicas": 3, "paused": false, "args": ["{{.n}}", "plain {x}"], "note": null},
        });
        expand_object(&mut object, &wec(), &mut Growth::default()).unwrap();
        let want = json!({
            "metadata": {"name": "app-cluster1", "labels": {"{{.region}}": "east"}},
            "spec": {"replicas": 3, "paused": false, "args": ["3", "plain {x}"], "note": null},
        });
        assert_eq!(object, want);
    }

    #[test]
    fn expand_object_names_each_failed_leaf_and_leaves_it_as_upstream_does() {
        let mut object = json!({"spec": {
            "bad": "{{if}}",
            "containers": [{"env": [{"value": "ok"}, {"value": "a-{{.zone}}-b"}]}],
        }});
        let error = expand_object(&mut object, &wec(), &mut Growth::default()).unwrap_err();
        assert_eq!(
            error,
            "spec.bad: template: 1: missing value for if; spec.containers[0].env[1].value: template: 1:4: \
             executing at <.zone>: map has no entry for key \"zone\""
        );
        assert_eq!(
            object["spec"]["bad"], "",
            "a template that does not parse becomes empty"
        );
        assert_eq!(
            object["spec"]["containers"][0]["env"][1]["value"], "a-",
            "a failed run keeps its output"
        );
    }

    #[test]
    fn properties_follow_upstream_precedence() {
        let data = map(&[("fromData", "data"), ("both", "data"), ("shared", "data")]);
        let binary = BTreeMap::from([("both".to_string(), b"binary".to_vec())]);
        let annotations = map(&[
            ("shared", "annotation"),
            ("clusterName", "annotation"),
            ("zone", "annotation"),
        ]);
        let labels = map(&[("zone", "label"), ("tier", "label")]);
        let props = properties(&data, &binary, &annotations, &labels, "cluster1");
        let want = map(&[
            ("fromData", "data"),
            ("both", "binary"),
            ("shared", "data"),
            ("clusterName", "annotation"),
            ("zone", "annotation"),
            ("tier", "label"),
        ]);
        assert_eq!(props, want);
        let labels = map(&[("clusterName", "label")]);
        assert_eq!(
            properties(&Props::new(), &BTreeMap::new(), &Props::new(), &labels, "c1")["clusterName"],
            "label"
        );
        assert_eq!(
            properties(&Props::new(), &BTreeMap::new(), &Props::new(), &Props::new(), "c1"),
            map(&[("clusterName", "c1")])
        );
    }

    #[test]
    fn properties_take_only_go_identifiers() {
        let labels = map(&[
            ("app.kubernetes.io/name", "x"),
            ("x-y", "x"),
            ("1a", "x"),
            ("type", "x"),
            ("", "x"),
            ("_ok", "y"),
            ("ok2", "y"),
        ]);
        let binary = BTreeMap::from([("bad.key".to_string(), b"x".to_vec())]);
        let props = properties(&Props::new(), &binary, &Props::new(), &labels, "c1");
        assert_eq!(props, map(&[("_ok", "y"), ("ok2", "y"), ("clusterName", "c1")]));
    }

    #[test]
    fn binary_values_are_text_with_each_bad_byte_replaced() {
        assert_eq!(text_of("é".as_bytes()), "é");
        assert_eq!(text_of(b"a\xF0\x9F\x98b\xFF"), "a\u{FFFD}\u{FFFD}\u{FFFD}b\u{FFFD}");
        assert_eq!(text_of(b"\xE2\x82"), "\u{FFFD}\u{FFFD}");
    }

    #[test]
    fn an_objects_templates_print_at_most_two_mib_together() {
        // Each leaf prints 640 KiB.
        let leaf = format!("{}{{{{.n}}}}", "a".repeat((10 << 16) - 1));
        // Four leaves print 2.5 MiB; the fifth is not run.
        let mut object = json!({"data": {"a": leaf, "b": leaf, "c": leaf, "d": leaf, "e": leaf}});
        let error = expand_object(&mut object, &wec(), &mut Growth::default()).unwrap_err();
        assert_eq!(
            error,
            "data.e: not expanded: the object's templates print more than 2 MiB in all"
        );
        assert_eq!(object["data"]["d"].as_str().unwrap().len(), 10 << 16);
        assert_eq!(object["data"]["e"], json!(leaf), "left as it was");
    }

    #[test]
    fn a_bindings_templates_add_at_most_four_mib_per_wec_and_sixteen_in_all() {
        // Each object adds just under 1 MiB: four leaves, each 26 templates printing 10,000 bytes.
        let leaf = r#"{{printf "%10000s" "x"}}"#;
        let object = || {
            let leaves: Vec<String> = (0..26).map(|_| leaf.to_string()).collect();
            let data: serde_json::Map<String, Json> = ["a", "b", "c", "d"]
                .iter()
                .map(|k| (k.to_string(), json!(leaves.concat())))
                .collect();
            json!({"data": data})
        };
        let mut growth = Growth::default();
        let expanded = |growth: &mut Growth| expand_object(&mut object(), &wec(), growth);
        for _ in 0..4 {
            expanded(&mut growth).unwrap();
        }
        let error = expanded(&mut growth).unwrap_err();
        let per_wec = "not expanded: the Binding's templates add more than 4 MiB for this WEC";
        assert!(error.contains(per_wec), "{error}");
        // Each WEC starts again, until the Binding has added 16 MiB.
        for _ in 0..3 {
            growth.next_wec();
            for _ in 0..4 {
                expanded(&mut growth).unwrap();
            }
        }
        growth.next_wec();
        let error = expanded(&mut growth).unwrap_err();
        let in_all = "not expanded: the Binding's templates add more than 16 MiB for all its WECs";
        assert!(error.contains(in_all), "{error}");
    }

    proptest! {
        #[test]
        fn text_without_delimiters_is_left_alone(text in prop_oneof![any::<String>(), "[{} a-z.$|-]{0,30}"]) {
            prop_assume!(!text.contains("{{"));
            let mut value = Json::String(text.clone());
            prop_assert_eq!(expand_object(&mut value, &wec(), &mut Growth::default()), Ok(()));
            prop_assert_eq!(value, Json::String(text));
        }
    }
}
