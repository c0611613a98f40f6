//! CRD schemas flattened into field lists (`.spec.downsync[].apiGroup string`), so that ours can
//! be checked against upstream's field by field: every upstream field must exist in ours with
//! the same type, format, required-ness and list/map semantics.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// One field of a schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// `.a.b[].c`; `{}` stands for map values.
    pub path: String,
    /// The OpenAPI type; empty when the schema leaves it open.
    pub type_: String,
    pub format: String,
    pub required: bool,
    /// `x-kubernetes-*` markers that change what is accepted or how lists and maps merge.
    pub markers: BTreeMap<String, String>,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            self.path,
            if self.type_.is_empty() { "any" } else { &self.type_ }
        )?;
        if !self.format.is_empty() {
            write!(f, " format={}", self.format)?;
        }
        if self.required {
            write!(f, " required")?;
        }
        for (k, v) in &self.markers {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

const MARKERS: [&str; 5] = [
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
];

/// Every field below the root of an `openAPIV3Schema`, leaving out the implicit `apiVersion`,
/// `kind` and `metadata`.
pub fn fields(schema: &Value) -> Vec<Field> {
    let mut out = Vec::new();
    for (name, sub, required) in properties(schema) {
        if !matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
            walk(sub, format!(".{name}"), required, &mut out);
        }
    }
    out
}

fn properties(schema: &Value) -> Vec<(String, &Value, bool)> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, sub)| (name.clone(), sub, required.contains(&name.as_str())))
        .collect()
}

fn walk(schema: &Value, path: String, required: bool, out: &mut Vec<Field>) {
    let text = |key: &str| match &schema[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let markers = MARKERS
        .iter()
        .filter(|m| !schema[**m].is_null() && schema[**m] != Value::Bool(false))
        .map(|m| (m.to_string(), text(m)))
        .collect();
    out.push(Field {
        path: path.clone(),
        type_: text("type"),
        format: text("format"),
        required,
        markers,
    });
    for (name, sub, required) in properties(schema) {
        walk(sub, format!("{path}.{name}"), required, out);
    }
    if schema["items"].is_object() {
        walk(&schema["items"], format!("{path}[]"), false, out);
    }
    if schema["additionalProperties"].is_object() {
        walk(&schema["additionalProperties"], format!("{path}{{}}"), false, out);
    }
}

/// How one upstream field differs from ours; `None` when ours accepts the same.
pub fn difference(upstream: &Field, ours: Option<&Field>) -> Option<String> {
    let Some(ours) = ours else {
        return Some(format!("{}: missing (upstream: {upstream})", upstream.path));
    };
    let mut problems = Vec::new();
    if upstream.type_ != ours.type_ {
        problems.push(format!("type {:?} vs upstream {:?}", ours.type_, upstream.type_));
    }
    if upstream.format != ours.format {
        problems.push(format!("format {:?} vs upstream {:?}", ours.format, upstream.format));
    }
    if upstream.required != ours.required {
        problems.push(format!(
            "required={} vs upstream required={}",
            ours.required, upstream.required
        ));
    }
    for (marker, value) in &upstream.markers {
        if ours.markers.get(marker) != Some(value) {
            problems.push(format!("{marker}={:?} vs upstream {value:?}", ours.markers.get(marker)));
        }
    }
    (!problems.is_empty()).then(|| format!("{}: {}", upstream.path, problems.join("; ")))
}

/// Every difference between upstream's fields and ours.
pub fn differences(upstream: &[Field], ours: &[Field]) -> Vec<String> {
    let ours: BTreeMap<&str, &Field> = ours.iter().map(|f| (f.path.as_str(), f)).collect();
    upstream
        .iter()
        .filter_map(|u| difference(u, ours.get(u.path.as_str()).copied()))
        .collect()
}

/// Parses the field-list form that [`Field`]'s `Display` writes (one field a line; `#` comments).
pub fn parse_field_list(text: &str) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(path), Some(type_)) = (words.next(), words.next()) else {
            return Err(format!(
                "line {}: want `PATH TYPE [format=F] [required] [x-kubernetes-...=V]`",
                n + 1
            ));
        };
        let mut field = Field {
            path: path.to_string(),
            type_: if type_ == "any" {
                String::new()
            } else {
                type_.to_string()
            },
            format: String::new(),
            required: false,
            markers: BTreeMap::new(),
        };
        for word in words {
            match word.split_once('=') {
                None if word == "required" => field.required = true,
                Some(("format", f)) => field.format = f.to_string(),
                Some((marker, v)) if MARKERS.contains(&marker) => {
                    field.markers.insert(marker.to_string(), v.to_string());
                }
                _ => return Err(format!("line {}: unknown word {word:?}", n + 1)),
            }
        }
        out.push(field);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["limit"],
                    "properties": {
                        "limit": {"type": "integer", "format": "int64"},
                        "names": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "raw": {"x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    #[test]
    fn flattens_every_field() {
        let text: Vec<String> = fields(&schema()).iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                ".spec object",
                ".spec.labels object",
                ".spec.labels{} string",
                ".spec.limit integer format=int64 required",
                ".spec.names array x-kubernetes-list-type=atomic",
                ".spec.names[] string",
                ".spec.raw any x-kubernetes-preserve-unknown-fields=true",
            ]
        );
    }

    #[test]
    fn field_list_round_trips() {
        let listed: String = fields(&schema()).iter().map(|f| format!("{f}\n")).collect();
        assert_eq!(parse_field_list(&listed).unwrap(), fields(&schema()));
        assert!(parse_field_list(".a string sometimes").is_err());
    }

    #[test]
    fn same_schema_has_no_differences() {
        assert!(differences(&fields(&schema()), &fields(&schema())).is_empty());
    }

    #[test]
    fn extra_fields_in_ours_are_fine() {
        let mut ours = schema();
        ours["properties"]["spec"]["properties"]["extra"] = json!({"type": "string"});
        assert!(differences(&fields(&schema()), &fields(&ours)).is_empty());
    }

    #[test]
    fn each_kind_of_change_is_caught() {
        type Change = (&'static str, fn(&mut Value));
        let changes: [Change; 6] = [
            ("missing", |s| {
                s["properties"]["spec"]["properties"]
                    .as_object_mut()
                    .unwrap()
                    .remove("raw");
            }),
            ("type", |s| {
                s["properties"]["spec"]["properties"]["limit"]["type"] = json!("string")
            }),
            ("format", |s| {
                s["properties"]["spec"]["properties"]["limit"]["format"] = json!("int32")
            }),
            ("required", |s| s["properties"]["spec"]["required"] = json!([])),
            ("x-kubernetes-list-type", |s| {
                s["properties"]["spec"]["properties"]["names"]["x-kubernetes-list-type"] = json!("set")
            }),
            ("x-kubernetes-preserve-unknown-fields", |s| {
                s["properties"]["spec"]["properties"]["raw"] = json!({"type": "object"})
            }),
        ];
        for (what, change) in changes {
            let mut ours = schema();
            change(&mut ours);
            let found = differences(&fields(&schema()), &fields(&ours));
            assert_eq!(found.len(), 1, "{what}: {found:?}");
            assert!(found[0].contains(what), "{what}: {found:?}");
        }
    }
}
