//! Label selectors (`metav1.LabelSelector`) as pure functions, with the semantics and
//! validation of Kubernetes' `LabelSelectorAsSelector`: an invalid selector is an error value,
//! never a panic, and `{}` matches everything.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a label selector cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue { key: String, value: String, reason: String },
    #[error("{operator:?} is not a valid label selector operator (key {key:?})")]
    InvalidOperator { key: String, operator: String },
    #[error("for 'In' and 'NotIn' operators the values set can't be empty (key {key:?})")]
    MissingValues { key: String },
    #[error("for 'Exists' and 'DoesNotExist' operators the values set must be empty (key {key:?})")]
    UnexpectedValues { key: String },
}

/// A validated selector: all requirements must hold. No requirements matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    test: Test,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Test {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

impl Selector {
    /// True when the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.test {
                Test::In(values) => value.is_some_and(|v| values.contains(v)),
                Test::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
                Test::Exists => value.is_some(),
                Test::DoesNotExist => value.is_none(),
            }
        })
    }

    /// True when the selector has no requirements, so it matches everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl TryFrom<&LabelSelector> for Selector {
    type Error = SelectorError;

    fn try_from(selector: &LabelSelector) -> Result<Self, Self::Error> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            validate_key(key)?;
            validate_value(key, value)?;
            requirements.push(Requirement {
                key: key.clone(),
                test: Test::In(BTreeSet::from([value.clone()])),
            });
        }
        for expr in selector.match_expressions.iter().flatten() {
            validate_key(&expr.key)?;
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            for value in &values {
                validate_value(&expr.key, value)?;
            }
            let key = expr.key.clone();
            let test = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => return Err(SelectorError::MissingValues { key }),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::UnexpectedValues { key });
                }
                "In" => Test::In(values),
                "NotIn" => Test::NotIn(values),
                "Exists" => Test::Exists,
                "DoesNotExist" => Test::DoesNotExist,
                other => {
                    return Err(SelectorError::InvalidOperator {
                        key,
                        operator: other.to_string(),
                    });
                }
            };
            requirements.push(Requirement { key, test });
        }
        Ok(Selector { requirements })
    }
}

/// Whether `labels` satisfy `selector`, or why the selector is invalid.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
    Selector::try_from(selector).map(|s| s.matches(labels))
}

/// Whether any selector in the list matches; an empty list matches nothing.
pub fn any_matches(selectors: &[LabelSelector], labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
    let mut found = false;
    for selector in selectors {
        // Every selector is validated, so a bad one is reported even after a match.
        found |= matches(selector, labels)?;
    }
    Ok(found)
}

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

/// Label names and values: alphanumeric at both ends, `-`, `_` and `.` inside.
fn name_syntax(s: &str) -> Result<(), String> {
    if s.len() > NAME_MAX {
        return Err(format!("must be no more than {NAME_MAX} characters"));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let inner_ok = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if s.is_empty() || (inner_ok && alnum(s.chars().next()) && alnum(s.chars().last())) {
        Ok(())
    } else {
        Err("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into())
    }
}

/// A DNS-1123 subdomain: lowercase labels separated by dots.
fn subdomain_syntax(s: &str) -> Result<(), String> {
    if s.len() > PREFIX_MAX {
        return Err(format!("prefix must be no more than {PREFIX_MAX} characters"));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.split('.').all(label_ok) {
        Ok(())
    } else {
        Err("prefix must be a lowercase RFC 1123 subdomain".into())
    }
}

fn validate_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason: String| SelectorError::InvalidKey {
        key: key.to_string(),
        reason,
    };
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            subdomain_syntax(prefix).map_err(invalid)?;
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err(invalid("name part must be non-empty".into()));
    }
    name_syntax(name).map_err(invalid)
}

fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    name_syntax(value).map_err(|reason| SelectorError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use proptest::prelude::*;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn with_exprs(exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(exprs),
            match_labels: None,
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        let empty = LabelSelector::default();
        assert_eq!(matches(&empty, &labels(&[])), Ok(true));
        assert_eq!(matches(&empty, &labels(&[("a", "b")])), Ok(true));
    }

    #[test]
    fn empty_list_matches_nothing() {
        assert_eq!(any_matches(&[], &labels(&[("a", "b")])), Ok(false));
    }

    #[test]
    fn operators() {
        let l = labels(&[("region", "east"), ("tier", "web")]);
        let check = |e| matches(&with_exprs(vec![e]), &l).unwrap();
        assert!(check(expr("region", "In", &["east", "west"])));
        assert!(!check(expr("region", "In", &["west"])));
        assert!(!check(expr("zone", "In", &["east"])));
        assert!(check(expr("region", "NotIn", &["west"])));
        assert!(!check(expr("region", "NotIn", &["east"])));
        assert!(
            check(expr("zone", "NotIn", &["east"])),
            "NotIn holds when the key is absent"
        );
        assert!(check(expr("tier", "Exists", &[])));
        assert!(!check(expr("zone", "Exists", &[])));
        assert!(check(expr("zone", "DoesNotExist", &[])));
        assert!(!check(expr("tier", "DoesNotExist", &[])));
    }

    #[test]
    fn requirements_are_anded() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("tier", "web")])),
            match_expressions: Some(vec![expr("region", "In", &["east"])]),
        };
        assert_eq!(
            matches(&selector, &labels(&[("tier", "web"), ("region", "east")])),
            Ok(true)
        );
        assert_eq!(
            matches(&selector, &labels(&[("tier", "web"), ("region", "west")])),
            Ok(false)
        );
        assert_eq!(matches(&selector, &labels(&[("region", "east")])), Ok(false));
    }

    #[test]
    fn invalid_selectors_are_errors() {
        let l = labels(&[]);
        let err = |e| matches(&with_exprs(vec![e]), &l).unwrap_err();
        assert!(matches!(
            err(expr("a", "Equals", &["x"])),
            SelectorError::InvalidOperator { .. }
        ));
        assert!(matches!(err(expr("a", "In", &[])), SelectorError::MissingValues { .. }));
        assert!(matches!(
            err(expr("a", "Exists", &["x"])),
            SelectorError::UnexpectedValues { .. }
        ));
        assert!(matches!(
            err(expr("-a", "Exists", &[])),
            SelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            err(expr("Upper.io/a", "Exists", &[])),
            SelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            err(expr("x.io/", "Exists", &[])),
            SelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            err(expr("a", "In", &["bad value"])),
            SelectorError::InvalidValue { .. }
        ));
        let long = "v".repeat(64);
        assert!(matches!(
            err(expr("a", "In", &[long.as_str()])),
            SelectorError::InvalidValue { .. }
        ));
        let bad_labels = LabelSelector {
            match_labels: Some(labels(&[("a", "-x")])),
            match_expressions: None,
        };
        assert!(matches!(
            matches(&bad_labels, &l),
            Err(SelectorError::InvalidValue { .. })
        ));
    }

    #[test]
    fn error_messages_name_the_problem() {
        let e = matches(&with_exprs(vec![expr("app", "Equals", &["x"])]), &labels(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#""Equals" is not a valid label selector operator (key "app")"#
        );
    }

    #[test]
    fn any_matches_reports_a_bad_selector_even_after_a_match() {
        let good = LabelSelector::default();
        let bad = with_exprs(vec![expr("a", "In", &[])]);
        assert!(any_matches(&[good, bad], &labels(&[])).is_err());
    }

    // Independent oracle: reads the LabelSelector directly, for selectors known to be valid.
    fn oracle(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
        let by_labels = selector
            .match_labels
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k) == Some(v));
        let by_exprs = selector.match_expressions.iter().flatten().all(|e| {
            let vals = e.values.clone().unwrap_or_default();
            match (e.operator.as_str(), labels.get(&e.key)) {
                ("In", Some(v)) => vals.contains(v),
                ("In", None) => false,
                ("NotIn", Some(v)) => !vals.contains(v),
                ("NotIn", None) => true,
                ("Exists", found) => found.is_some(),
                ("DoesNotExist", found) => found.is_none(),
                _ => unreachable!("generator makes valid operators only"),
            }
        });
        by_labels && by_exprs
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![Just("app"), Just("tier"), Just("region"), Just("example.io/zone")].prop_map(String::from)
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![Just(""), Just("a"), Just("b"), Just("c-1")].prop_map(String::from)
    }

    fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map(key(), value(), 0..4)
    }

    fn valid_expr() -> impl Strategy<Value = LabelSelectorRequirement> {
        let with_values = (
            key(),
            prop_oneof![Just("In"), Just("NotIn")],
            prop::collection::vec(value(), 1..3),
        )
            .prop_map(|(key, op, values)| LabelSelectorRequirement {
                key,
                operator: op.into(),
                values: Some(values),
            });
        let without =
            (key(), prop_oneof![Just("Exists"), Just("DoesNotExist")]).prop_map(|(key, op)| LabelSelectorRequirement {
                key,
                operator: op.into(),
                values: None,
            });
        prop_oneof![with_values, without]
    }

    fn valid_selector() -> impl Strategy<Value = LabelSelector> {
        (
            prop::option::of(label_map()),
            prop::option::of(prop::collection::vec(valid_expr(), 0..3)),
        )
            .prop_map(|(match_labels, match_expressions)| LabelSelector {
                match_labels,
                match_expressions,
            })
    }

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![key(), value(), ".*", "[a-z/.-]{0,70}"]
    }

    proptest! {
        #[test]
        fn agrees_with_oracle(selector in valid_selector(), labels in label_map()) {
            prop_assert_eq!(matches(&selector, &labels), Ok(oracle(&selector, &labels)));
        }

        #[test]
        fn subset_of_own_labels_matches(labels in label_map(), keep in prop::collection::vec(any::<bool>(), 4)) {
            let subset = labels.iter().zip(keep.iter().cycle())
                .filter(|(_, k)| **k).map(|((k, v), _)| (k.clone(), v.clone())).collect();
            let selector = LabelSelector { match_labels: Some(subset), match_expressions: None };
            prop_assert_eq!(matches(&selector, &labels), Ok(true));
        }

        #[test]
        fn arbitrary_input_never_panics(
            key in any_text(), op in any_text(),
            values in prop::option::of(prop::collection::vec(any_text(), 0..3)),
            labels in label_map(),
        ) {
            let selector = with_exprs(vec![LabelSelectorRequirement { key, operator: op, values }]);
            let _ = matches(&selector, &labels);
        }
    }
}
