//! A StatusCollector's spec validated and compiled: its filter, `select` columns, `groupBy`
//! columns and `combinedFields` as expressions, or the errors for its `status.errors`.

use ks_shared::api::{NamedAggregator, NamedExpression, StatusCollectorSpec};

use super::expression::{Expression, compile};

/// A valid StatusCollector with its expressions compiled.
#[derive(Debug)]
pub struct Collector {
    pub(super) name: String,
    /// What it was compiled from.
    spec: StatusCollectorSpec,
    pub(super) filter: Option<Expression>,
    pub(super) form: Form,
    /// The most rows reported ([`row_limit`]).
    pub(super) limit: usize,
}

#[derive(Debug)]
pub(super) enum Form {
    /// One row per WEC with these columns.
    Select(Vec<Column>),
    /// One row per group: the `groupBy` values, then the aggregates.
    Aggregate {
        group_by: Vec<Column>,
        combined: Vec<Combined>,
    },
}

#[derive(Debug)]
pub(super) struct Column {
    pub(super) name: String,
    pub(super) program: Expression,
}

#[derive(Debug)]
pub(super) struct Combined {
    pub(super) name: String,
    pub(super) op: Op,
    /// Absent only for COUNT, which then counts rows.
    pub(super) subject: Option<Expression>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Op {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "COUNT" => Op::Count,
            "SUM" => Op::Sum,
            "AVG" => Op::Avg,
            "MIN" => Op::Min,
            "MAX" => Op::Max,
            _ => return None,
        })
    }
}

impl Collector {
    /// Compiles the collector named `name`, or gives the errors for its `status.errors`, worded
    /// as upstream words them (docs/upstream-behaviour.md#statuscollectors). Structural errors come
    /// alone: expressions are checked only once the structure is right.
    ///
    /// Beyond upstream: a negative `limit` and an unknown aggregation type are errors, and COUNT
    /// may have a subject (it then counts the rows where the subject is not null).
    pub fn new(name: &str, spec: &StatusCollectorSpec) -> Result<Collector, Vec<String>> {
        let mut errors = structure_errors(spec);
        if !errors.is_empty() {
            return Err(errors);
        }
        let filter = spec.filter.as_deref().and_then(|filter| {
            compile(filter)
                .map_err(|e| errors.push(format!("filter expression invalid: {e}")))
                .ok()
        });
        let select = compile_columns("select", &spec.select, &mut errors);
        let group_by = compile_columns("groupBy", &spec.group_by, &mut errors);
        let combined: Vec<Combined> = spec
            .combined_fields
            .iter()
            .filter_map(|field| compile_combined(field).map_err(|e| errors.push(e)).ok())
            .collect();
        if !errors.is_empty() {
            return Err(errors);
        }
        let form = if spec.select.is_empty() {
            Form::Aggregate { group_by, combined }
        } else {
            Form::Select(select)
        };
        Ok(Collector {
            name: name.to_string(),
            spec: spec.clone(),
            filter,
            form,
            limit: row_limit(spec.limit),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &StatusCollectorSpec {
        &self.spec
    }
}

/// The most rows a valid (non-negative) `limit` allows: 0 means no limit, because Go clients
/// send 0 for an unset `limit` and a collector reporting nothing is never what was meant.
fn row_limit(limit: i64) -> usize {
    match usize::try_from(limit) {
        Ok(0) | Err(_) => usize::MAX,
        Ok(limit) => limit,
    }
}

fn structure_errors(spec: &StatusCollectorSpec) -> Vec<String> {
    let mut errors = Vec::new();
    let aggregates = !spec.group_by.is_empty() || !spec.combined_fields.is_empty();
    if !spec.select.is_empty() && aggregates {
        errors.push("groupBy and combinedFields must be empty if select is not".to_string());
    }
    if spec.combined_fields.is_empty() && !spec.group_by.is_empty() {
        errors.push("groupBy must be empty if combinedFields is".to_string());
    }
    if spec.limit < 0 {
        errors.push(format!("limit must not be negative, but is {}", spec.limit));
    }
    errors
}

/// Compiles named expressions, recording `<what> expression (<name>) invalid: <err>` for each
/// that does not compile.
fn compile_columns(what: &str, expressions: &[NamedExpression], errors: &mut Vec<String>) -> Vec<Column> {
    expressions
        .iter()
        .filter_map(|e| match compile(&e.def) {
            Ok(program) => Some(Column {
                name: e.name.clone(),
                program,
            }),
            Err(err) => {
                errors.push(format!("{what} expression ({}) invalid: {err}", e.name));
                None
            }
        })
        .collect()
}

fn compile_combined(field: &NamedAggregator) -> Result<Combined, String> {
    let name = &field.name;
    let op = Op::parse(&field.type_).ok_or_else(|| {
        format!(
            "combinedField expression ({name}) invalid: type must be COUNT, SUM, AVG, MIN or MAX, not {:?}",
            field.type_
        )
    })?;
    let subject = match (&field.subject, op) {
        (None, Op::Count) => None,
        (None, _) => {
            return Err(format!(
                "combinedField expression ({name}) invalid: subject must be set"
            ));
        }
        (Some(subject), _) => {
            Some(compile(subject).map_err(|e| format!("combinedField expression ({name}) subject invalid: {e}"))?)
        }
    };
    Ok(Combined {
        name: name.clone(),
        op,
        subject,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::collector::tests::{combining, field, named, selecting};

    fn errors(spec: &StatusCollectorSpec) -> Vec<String> {
        Collector::new("sc", spec).unwrap_err()
    }

    #[test]
    fn structural_errors_come_alone_and_worded_as_upstream() {
        let mut spec = selecting(&[("a", "(")]);
        spec.group_by = named(&[("g", "1")]);
        assert_eq!(
            errors(&spec),
            [
                "groupBy and combinedFields must be empty if select is not",
                "groupBy must be empty if combinedFields is"
            ]
        );
        let negative = StatusCollectorSpec {
            limit: -1,
            ..selecting(&[("a", "1")])
        };
        assert_eq!(errors(&negative), ["limit must not be negative, but is -1"]);
    }

    #[test]
    fn expression_errors_name_their_expression() {
        let mut spec = combining(
            &[("g", "1 +")],
            vec![
                field("s", "SUM", None),
                field("m", "MAX", Some("nope.x")),
                field("x", "MEDIAN", Some("1")),
            ],
        );
        spec.filter = Some("returned.status.x == ".into());
        let errors = errors(&spec);
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].starts_with("filter expression invalid: failed to parse expression: "));
        assert!(errors[1].starts_with("groupBy expression (g) invalid: failed to parse expression: "));
        assert_eq!(errors[2], "combinedField expression (s) invalid: subject must be set");
        assert_eq!(
            errors[3],
            "combinedField expression (m) subject invalid: failed to check expression: undeclared reference to 'nope'"
        );
        assert_eq!(
            errors[4],
            r#"combinedField expression (x) invalid: type must be COUNT, SUM, AVG, MIN or MAX, not "MEDIAN""#
        );
    }

    #[test]
    fn comprehension_variables_type_names_and_count_subjects_are_valid() {
        let spec = combining(
            &[("ready", "returned.status.conditions.exists(c, c.type == 'Ready')")],
            vec![
                field("n", "COUNT", Some("returned.status")),
                field("t", "MAX", Some("type(obj) == map ? 1 : 0")),
            ],
        );
        assert!(Collector::new("sc", &spec).is_ok());
        assert_eq!(
            errors(&selecting(&[("a", "[1].map(x, y)")])),
            ["select expression (a) invalid: failed to check expression: undeclared reference to 'y'"]
        );
    }
}
