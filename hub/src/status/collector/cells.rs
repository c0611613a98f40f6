//! CEL values as CombinedStatus cells, written as Kubernetes, CEL and Go write them.

use cel::Value as Cel;
use chrono::SecondsFormat;
// Numbers are written as upstream writes them: Go's `strconv.FormatFloat(f, 'g', -1, 64)`.
use gotemplate::fmt::go_float;
use ks_shared::api::Value as Cell;
use serde_json::Value as Json;

/// A CEL value as a CombinedStatus cell. Fixing upstream's select form
/// (docs/upstream-behaviour.md#combinedstatus): lists are `Array`, `null` is `Null`, and timestamps
/// and durations are `String`s as Kubernetes and CEL write them.
pub(super) fn to_cell(value: &Cel) -> Cell {
    match value {
        Cel::String(s) => string_cell(s.to_string()),
        Cel::Int(i) => number_cell(i.to_string()),
        Cel::UInt(u) => number_cell(u.to_string()),
        Cel::Float(f) => number_cell(go_float(*f)),
        Cel::Bool(b) => Cell {
            type_: "Bool".into(),
            bool: Some(*b),
            ..Default::default()
        },
        Cel::List(_) => Cell {
            type_: "Array".into(),
            array: Some(to_json(value)),
            ..Default::default()
        },
        Cel::Map(_) => Cell {
            type_: "Object".into(),
            object: Some(to_json(value)),
            ..Default::default()
        },
        Cel::Timestamp(_) | Cel::Duration(_) | Cel::Bytes(_) => match to_json(value) {
            Json::String(s) => string_cell(s),
            _ => null_cell(),
        },
        Cel::Null | Cel::Function(..) | Cel::Opaque(_) | Cel::Struct(_) => null_cell(),
    }
}

fn string_cell(s: String) -> Cell {
    Cell {
        type_: "String".into(),
        string: Some(s),
        ..Default::default()
    }
}

pub(super) fn number_cell(float: String) -> Cell {
    Cell {
        type_: "Number".into(),
        float: Some(float),
        ..Default::default()
    }
}

pub(super) fn null_cell() -> Cell {
    Cell {
        type_: "Null".into(),
        ..Default::default()
    }
}

/// A CEL value as JSON: non-finite doubles as Go writes them (`NaN`, `+Inf`), timestamps in
/// RFC 3339 as Kubernetes writes them, durations as CEL writes them (`1.5s`), bytes as text.
fn to_json(value: &Cel) -> Json {
    match value {
        Cel::List(items) => Json::Array(items.iter().map(to_json).collect()),
        Cel::Map(map) => Json::Object(map.map.iter().map(|(k, v)| (k.to_string(), to_json(v))).collect()),
        Cel::Int(i) => Json::from(*i),
        Cel::UInt(u) => Json::from(*u),
        Cel::Float(f) if f.is_finite() => Json::from(*f),
        Cel::Float(f) => Json::from(go_float(*f)),
        Cel::String(s) => Json::from(s.as_str()),
        Cel::Bytes(b) => Json::from(String::from_utf8_lossy(b)),
        Cel::Bool(b) => Json::from(*b),
        Cel::Timestamp(t) => Json::from(t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        Cel::Duration(d) => Json::from(cel_duration(d)),
        Cel::Null | Cel::Function(..) | Cel::Opaque(_) | Cel::Struct(_) => Json::Null,
    }
}

/// A duration as CEL's `string(duration)` writes it: seconds with a fraction only when needed.
fn cel_duration(d: &chrono::Duration) -> String {
    let nanos = d
        .num_nanoseconds()
        .map_or_else(|| d.num_seconds() as f64 * 1e9, |n| n as f64);
    format!("{}s", nanos / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_go_writes_them() {
        let cases = [
            (0.0, "0"),
            (1.5, "1.5"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (1e100, "1e+100"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (number, text) in cases {
            assert_eq!(go_float(number), text, "{number}");
        }
    }
}
