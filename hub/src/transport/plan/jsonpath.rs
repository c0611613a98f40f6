//! The path language of CustomTransform `spec.remove`: `$` followed by `.name` or `["string"]`
//! segments, nothing else (no whitespace, wildcards, indexes, filters or single quotes). Small
//! and exact on purpose: a general JSONPath library would accept paths upstream rejects.

use serde_json::Value;

/// Why a path is not in the language; the position is a byte offset into the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("syntax error at {0}: the path must start with $")]
    NoRoot(usize),
    #[error("syntax error at {0}: extra junk {1:?}")]
    ExtraJunk(usize, String),
    #[error("syntax error at {0}: expected a member name")]
    NoName(usize),
    #[error("syntax error at {0}: unterminated string")]
    Unterminated(usize),
    #[error("syntax error at {0}: invalid escape")]
    BadEscape(usize),
}

fn name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || ('\u{80}'..='\u{D7FF}').contains(&c) || c >= '\u{E000}'
}

fn name_char(c: char) -> bool {
    name_start(c) || c.is_ascii_digit()
}

/// The member names a path selects, from the root down. `$` alone gives no names.
pub fn parse(path: &str) -> Result<Vec<String>, PathError> {
    let mut rest = path.strip_prefix('$').ok_or(PathError::NoRoot(0))?;
    let mut names = Vec::new();
    while !rest.is_empty() {
        let at = path.len() - rest.len();
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(|c: char| !name_char(c)).unwrap_or(after.len());
            let name = &after[..end];
            if !name.chars().next().is_some_and(name_start) {
                return Err(PathError::NoName(at + 1));
            }
            names.push(name.to_string());
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("[\"") {
            let (name, consumed) = string_literal(after, at + 2)?;
            let after = &after[consumed..];
            rest = after
                .strip_prefix(']')
                .ok_or_else(|| PathError::ExtraJunk(path.len() - after.len(), after.into()))?;
            names.push(name);
        } else {
            return Err(PathError::ExtraJunk(at, rest.to_string()));
        }
    }
    Ok(names)
}

/// Decodes a double-quoted string whose opening quote is already consumed; returns the text and
/// how many bytes were read, closing quote included. `offset` positions errors.
fn string_literal(s: &str, offset: usize) -> Result<(String, usize), PathError> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, i + 1)),
            '\\' => {
                let (j, escaped) = chars.next().ok_or(PathError::Unterminated(offset + i))?;
                out.push(match escaped {
                    '"' | '\\' | '/' | '\'' => escaped,
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'u' => {
                        let hex = s.get(j + 1..j + 5).ok_or(PathError::BadEscape(offset + i))?;
                        // Exactly four hex digits: `from_str_radix` would also take a sign.
                        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return Err(PathError::BadEscape(offset + i));
                        }
                        let unit = u32::from_str_radix(hex, 16).map_err(|_| PathError::BadEscape(offset + i))?;
                        for _ in 0..4 {
                            chars.next();
                        }
                        char::from_u32(unit).ok_or(PathError::BadEscape(offset + i))?
                    }
                    _ => return Err(PathError::BadEscape(offset + i)),
                });
            }
            c => out.push(c),
        }
    }
    Err(PathError::Unterminated(offset + s.len()))
}

/// Deletes the member at `names` from `object`; a missing step or a non-object on the way
/// leaves everything as it is. `names` must not be empty.
pub fn remove(object: &mut Value, names: &[String]) {
    let Some((last, parents)) = names.split_last() else {
        return;
    };
    let mut at = object;
    for name in parents {
        match at.get_mut(name.as_str()) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(map) = at.as_object_mut() {
        map.remove(last.as_str());
    }
}

/// A CustomTransform's removals, checked: the usable paths, and one error per bad one worded
/// as upstream does (`Error in spec.remove[i]: ...`, `Invalid spec.remove[i]: ...`).
pub fn compile(remove: &[String]) -> (Vec<Vec<String>>, Vec<String>) {
    let mut paths = Vec::new();
    let mut errors = Vec::new();
    for (i, path) in remove.iter().enumerate() {
        match parse(path) {
            Ok(names) if names.is_empty() => {
                errors.push(format!("Invalid spec.remove[{i}]: it identifies the whole object"))
            }
            Ok(names) => paths.push(names),
            Err(err) => errors.push(format!("Error in spec.remove[{i}]: {err}")),
        }
    }
    (paths, errors)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn accepts_the_subset() {
        assert_eq!(parse("$").unwrap(), Vec::<String>::new());
        assert_eq!(parse("$.spec.template").unwrap(), ["spec", "template"]);
        assert_eq!(
            parse(r#"$.metadata.labels["app.kubernetes.io/name"]"#).unwrap(),
            ["metadata", "labels", "app.kubernetes.io/name"]
        );
        assert_eq!(parse(r#"$["a\"b\\c\u00e9"]"#).unwrap(), ["a\"b\\cé"]);
        // Four hex digits exactly, as JSON has them (found by the fuzz target).
        assert!(parse(r#"$["\u+041"]"#).is_err());
        assert_eq!(parse("$._x9.é").unwrap(), ["_x9", "é"]);
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "spec",
            "$.",
            "$.9a",
            "$[0]",
            "$.a[*]",
            "$..a",
            "$['a']",
            "$. a",
            "$.a ",
            r#"$["a"#,
            r#"$["a\q"]"#,
            "$.a[?(@.b)]",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} must be rejected");
        }
        assert_eq!(
            parse("$.a b").unwrap_err().to_string(),
            "syntax error at 3: extra junk \" b\""
        );
    }

    #[test]
    fn removal_is_exact_and_forgiving() {
        let mut object = json!({"metadata": {"labels": {"owner": "x", "app": "y"}}, "spec": {"paused": true}});
        remove(&mut object, &parse(r#"$.metadata.labels["owner"]"#).unwrap());
        remove(&mut object, &parse("$.spec.paused.deeper").unwrap());
        remove(&mut object, &parse("$.nothing.here").unwrap());
        assert_eq!(
            object,
            json!({"metadata": {"labels": {"app": "y"}}, "spec": {"paused": true}})
        );
    }

    #[test]
    fn compile_words_errors_like_upstream() {
        let (paths, errors) = compile(&["$.a".into(), "$".into(), "a".into()]);
        assert_eq!(paths, [vec!["a".to_string()]]);
        assert_eq!(
            errors,
            [
                "Invalid spec.remove[1]: it identifies the whole object",
                "Error in spec.remove[2]: syntax error at 0: the path must start with $",
            ]
        );
    }

    /// Renders names as a path, quoting those that are not plain names.
    fn render(names: &[String]) -> String {
        let mut path = "$".to_string();
        for name in names {
            if name.chars().next().is_some_and(name_start) && name.chars().all(name_char) {
                path.push('.');
                path.push_str(name);
            } else {
                path.push('[');
                path.push_str(&serde_json::to_string(name).unwrap());
                path.push(']');
            }
        }
        path
    }

    proptest! {
        #[test]
        fn rendered_paths_parse_back(names in prop::collection::vec(".{0,12}", 1..5)) {
            prop_assert_eq!(parse(&render(&names)).unwrap(), names);
        }

        #[test]
        fn arbitrary_text_never_panics(path in "\\$?[.\\[\\]\"a-z\\\\u0-9 ]{0,20}") {
            let _ = parse(&path);
        }

        #[test]
        fn removal_deletes_exactly_the_named_member(names in prop::collection::vec("[a-c]{1,2}", 1..4)) {
            let mut object = json!({"keep": 1});
            let mut at = &mut object;
            for name in &names {
                at = at.as_object_mut().unwrap().entry(name.clone()).or_insert(json!({"sibling": true}));
            }
            let mut expected = object.clone();
            remove(&mut object, &names);
            // The oracle: walk the same names with JSON pointers.
            let pointer: String = names[..names.len() - 1].iter().map(|n| format!("/{n}")).collect();
            expected.pointer_mut(&pointer).unwrap().as_object_mut().unwrap().remove(names.last().unwrap());
            prop_assert_eq!(object, expected);
        }
    }
}
