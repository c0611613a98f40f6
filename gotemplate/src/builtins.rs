//! The builtin functions: the table the parser looks names up in, and what each one does (the
//! arity is checked before they run).

use crate::fault::Fault;
use crate::fmt::{display, html_escape, js_escape, query_escape, sprint, sprintf, sprintln};
use crate::value::Value;

#[derive(Debug)]
pub(crate) struct Function {
    pub(crate) name: &'static str,
    pub(crate) callee: Callee,
    pub(crate) arity: Arity,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Callee {
    And,
    Or,
    Eager(Builtin),
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Builtin {
    Not,
    Len,
    Index,
    Slice,
    Print,
    Printf,
    Println,
    Html,
    Js,
    UrlQuery,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Arity {
    Exactly(usize),
    AtLeast(usize),
}

const fn function(name: &'static str, callee: Callee, arity: Arity) -> Function {
    Function { name, callee, arity }
}

pub(crate) static FUNCTIONS: [Function; 18] = [
    function("and", Callee::And, Arity::AtLeast(1)),
    function("or", Callee::Or, Arity::AtLeast(1)),
    function("not", Callee::Eager(Builtin::Not), Arity::Exactly(1)),
    function("len", Callee::Eager(Builtin::Len), Arity::Exactly(1)),
    function("index", Callee::Eager(Builtin::Index), Arity::AtLeast(1)),
    function("slice", Callee::Eager(Builtin::Slice), Arity::AtLeast(1)),
    function("print", Callee::Eager(Builtin::Print), Arity::AtLeast(0)),
    function("printf", Callee::Eager(Builtin::Printf), Arity::AtLeast(1)),
    function("println", Callee::Eager(Builtin::Println), Arity::AtLeast(0)),
    function("html", Callee::Eager(Builtin::Html), Arity::AtLeast(0)),
    function("js", Callee::Eager(Builtin::Js), Arity::AtLeast(0)),
    function("urlquery", Callee::Eager(Builtin::UrlQuery), Arity::AtLeast(0)),
    function("eq", Callee::Eager(Builtin::Eq), Arity::AtLeast(1)),
    function("ne", Callee::Eager(Builtin::Ne), Arity::Exactly(2)),
    function("lt", Callee::Eager(Builtin::Lt), Arity::Exactly(2)),
    function("le", Callee::Eager(Builtin::Le), Arity::Exactly(2)),
    function("gt", Callee::Eager(Builtin::Gt), Arity::Exactly(2)),
    function("ge", Callee::Eager(Builtin::Ge), Arity::Exactly(2)),
];

pub(crate) fn apply<'p>(builtin: Builtin, values: &[Value<'p>]) -> Result<Value<'p>, Fault> {
    match builtin {
        Builtin::Print => Ok(Value::Str(sprint(values))),
        Builtin::Println => Ok(Value::Str(sprintln(values))),
        Builtin::Printf => match values.first() {
            Some(Value::Str(format)) => sprintf(format, &values[1..]).map(Value::Str),
            other => {
                let got = other.map_or("nothing", Value::type_name);
                Err(Fault::go(format!("wrong type for value; expected string; got {got}")))
            }
        },
        Builtin::Html => Ok(Value::Str(html_escape(&args_text(values)))),
        Builtin::Js => js_escape(&args_text(values)).map(Value::Str),
        Builtin::UrlQuery => Ok(Value::Str(query_escape(&args_text(values)))),
        Builtin::Len => length(&values[0]),
        Builtin::Index => index(values),
        Builtin::Slice => slice(values),
        Builtin::Not => Ok(Value::Bool(!values[0].truth())),
        Builtin::Eq => equal_any(values).map(Value::Bool),
        Builtin::Ne => equal_any(values).map(|equal| Value::Bool(!equal)),
        Builtin::Lt => less(&values[0], &values[1]).map(Value::Bool),
        Builtin::Le => less_or_equal(&values[0], &values[1]).map(Value::Bool),
        Builtin::Gt => less_or_equal(&values[0], &values[1]).map(|le| Value::Bool(!le)),
        Builtin::Ge => less(&values[0], &values[1]).map(|lt| Value::Bool(!lt)),
    }
}

fn length<'p>(value: &Value<'p>) -> Result<Value<'p>, Fault> {
    match value {
        Value::Str(s) => Ok(Value::Int(s.len() as i64)),
        Value::Map(map) => Ok(Value::Int(map.len() as i64)),
        other => Err(Fault::go(format!("len of type {}", other.type_name()))),
    }
}

/// `index item k1 k2...`: a string gives its bytes, the map its values ("" for a missing key:
/// `index` does not follow `missingkey`).
fn index<'p>(values: &[Value<'p>]) -> Result<Value<'p>, Fault> {
    let mut item = values[0].clone();
    for key in &values[1..] {
        item = match (&item, key) {
            (Value::Str(s), key) => {
                let i = position(key, s.len())?;
                Value::Byte(
                    *s.as_bytes()
                        .get(i)
                        .ok_or_else(|| Fault::go(format!("index out of range: {i}")))?,
                )
            }
            (Value::Map(map), Value::Str(key)) => Value::Str(map.get(key).cloned().unwrap_or_default()),
            (Value::Map(_), key) => {
                return Err(Fault::go(format!(
                    "value has type {}; should be string",
                    key.type_name()
                )));
            }
            (item, _) => return Err(Fault::go(format!("can't index item of type {}", item.type_name()))),
        };
    }
    Ok(item)
}

/// `slice s i j`: the bytes `i..j` of a string.
fn slice<'p>(values: &[Value<'p>]) -> Result<Value<'p>, Fault> {
    let (item, indexes) = (&values[0], &values[1..]);
    if indexes.len() > 3 {
        return Err(Fault::go(format!("too many slice indexes: {}", indexes.len())));
    }
    let Value::Str(s) = item else {
        return Err(Fault::go(format!("can't slice item of type {}", item.type_name())));
    };
    if indexes.len() == 3 {
        return Err(Fault::go("cannot 3-index slice a string"));
    }
    let mut bounds = [0, s.len()];
    for (bound, index) in bounds.iter_mut().zip(indexes) {
        *bound = position(index, s.len())?;
    }
    let [from, to] = bounds;
    if from > to {
        return Err(Fault::go(format!("invalid slice index: {from} > {to}")));
    }
    let part = s
        .get(from..to)
        .ok_or_else(|| Fault::unsupported("slicing inside a UTF-8 character is not supported"))?;
    Ok(Value::Str(part.to_string()))
}

/// An index argument, at most `cap`.
fn position(index: &Value, cap: usize) -> Result<usize, Fault> {
    let i = match index {
        Value::Int(i) => *i,
        Value::Byte(b) => i64::from(*b),
        other => {
            return Err(Fault::go(format!(
                "cannot index slice/array with type {}",
                other.type_name()
            )));
        }
    };
    usize::try_from(i)
        .ok()
        .filter(|&i| i <= cap)
        .ok_or_else(|| Fault::go(format!("index out of range: {i}")))
}

/// `eq a b c...`: whether `a` equals any of the others, checked in order.
fn equal_any(values: &[Value]) -> Result<bool, Fault> {
    let (first, others) = (&values[0], &values[1..]);
    if others.is_empty() {
        return Err(Fault::go("missing argument for comparison"));
    }
    for other in others {
        if equal(first, other)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn equal(a: &Value, b: &Value) -> Result<bool, Fault> {
    Ok(match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Byte(x), Value::Byte(y)) => x == y,
        (Value::Int(x), Value::Byte(y)) | (Value::Byte(y), Value::Int(x)) => *x == i64::from(*y),
        (Value::Map(_), Value::Map(_)) => {
            return Err(Fault::go(format!(
                "non-comparable type {}: {}",
                display(a),
                a.type_name()
            )));
        }
        _ => return Err(incompatible(a, b)),
    })
}

fn less(a: &Value, b: &Value) -> Result<bool, Fault> {
    Ok(match (a, b) {
        (Value::Map(_), _) | (_, Value::Map(_)) | (Value::Bool(_), Value::Bool(_)) => {
            return Err(Fault::go("invalid type for comparison"));
        }
        (Value::Str(x), Value::Str(y)) => x < y,
        (Value::Int(x), Value::Int(y)) => x < y,
        (Value::Float(x), Value::Float(y)) => x < y,
        (Value::Byte(x), Value::Byte(y)) => x < y,
        (Value::Int(x), Value::Byte(y)) => *x < i64::from(*y),
        (Value::Byte(x), Value::Int(y)) => i64::from(*x) < *y,
        _ => return Err(incompatible(a, b)),
    })
}

fn less_or_equal(a: &Value, b: &Value) -> Result<bool, Fault> {
    Ok(less(a, b)? || equal(a, b)?)
}

fn incompatible(a: &Value, b: &Value) -> Fault {
    Fault::go(format!(
        "incompatible types for comparison: {} and {}",
        a.type_name(),
        b.type_name()
    ))
}

/// The text `html`, `js` and `urlquery` escape: a lone string as is, anything else as `print`.
fn args_text(values: &[Value]) -> String {
    match values {
        [Value::Str(s)] => s.clone(),
        _ => sprint(values),
    }
}
