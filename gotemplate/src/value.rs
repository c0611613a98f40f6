//! Values: what a template sees, and what its functions take and give.

use std::collections::BTreeMap;

/// The properties a template runs against: a flat string map.
pub(crate) type Props = BTreeMap<String, String>;

/// A Go value as the template sees it: strings from the map, constants, function results.
#[derive(Debug, Clone)]
pub(crate) enum Value<'p> {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A byte of a string, from `index`: Go's `uint8`.
    Byte(u8),
    Map(&'p Props),
}

impl Value<'_> {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Bool(_) => "bool",
            Value::Byte(_) => "uint8",
            Value::Map(_) => "map[string]string",
        }
    }

    pub(crate) fn truth(&self) -> bool {
        match self {
            Value::Str(s) => !s.is_empty(),
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Bool(b) => *b,
            Value::Byte(b) => *b != 0,
            Value::Map(map) => !map.is_empty(),
        }
    }
}
