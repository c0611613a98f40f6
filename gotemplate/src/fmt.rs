//! Go's fmt as templates use it: `%v` of each value ([`go_float`] for floats), `Sprint`,
//! `Sprintln`, the supported part of `Sprintf`, and the escaping of `html`, `js` and `urlquery`.

use crate::fault::Fault;
use crate::limits::MAX_WIDTH;
use crate::value::Value;

/// `%v`, which is also how an action prints its value.
pub(crate) fn display(value: &Value) -> String {
    match value {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => go_float(*f),
        Value::Bool(b) => b.to_string(),
        Value::Byte(b) => b.to_string(),
        Value::Map(map) => {
            let entries: Vec<String> = map.iter().map(|(key, value)| format!("{key}:{value}")).collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// Go's `%v` of a float64, which is also `strconv.FormatFloat(f, 'g', -1, 64)`: the shortest
/// digits that read back, in `%e` form when the exponent is below -4 or at least 6 (with a sign and
/// two digits or more), otherwise in `%f` form; `NaN`, `+Inf` and `-Inf` for the rest.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits = mantissa.replace('.', "");
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{point}{rest}e{exponent_sign}{:02}", exponent.abs());
    }
    if exponent < 0 {
        let zeros = "0".repeat(exponent.unsigned_abs() as usize - 1);
        return format!("{sign}0.{zeros}{digits}");
    }
    let whole = exponent.unsigned_abs() as usize + 1;
    if digits.len() <= whole {
        format!("{sign}{digits}{}", "0".repeat(whole - digits.len()))
    } else {
        format!("{sign}{}.{}", &digits[..whole], &digits[whole..])
    }
}

pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

pub(crate) fn js_escape(s: &str) -> Result<String, Fault> {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '\'' | '"' => {
                out.push('\\');
                out.push(c);
            }
            '<' | '>' | '&' | '=' => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if c < ' ' => out.push_str(&format!("\\u{:04X}", c as u32)),
            c if c.is_ascii() => out.push(c),
            _ => return Err(Fault::unsupported("js of non-ASCII text is not supported")),
        }
    }
    Ok(out)
}

/// Go's `url.QueryEscape`.
pub(crate) fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

// ------------------------------------------------------------------------------------------------
// Sprint, Sprintln and the supported part of Sprintf

/// `fmt.Sprint`: a space between two operands when neither is a string.
pub(crate) fn sprint(values: &[Value]) -> String {
    let mut out = String::new();
    let mut after_string = false;
    for (i, value) in values.iter().enumerate() {
        let is_string = matches!(value, Value::Str(_));
        if i > 0 && !is_string && !after_string {
            out.push(' ');
        }
        out.push_str(&display(value));
        after_string = is_string;
    }
    out
}

pub(crate) fn sprintln(values: &[Value]) -> String {
    let words: Vec<String> = values.iter().map(display).collect();
    format!("{}\n", words.join(" "))
}

/// Width and `-` flag of a printf directive.
#[derive(Debug, Clone, Copy, Default)]
struct Spec {
    width: usize,
    left: bool,
}

pub(crate) fn sprintf(format: &str, args: &[Value]) -> Result<String, Fault> {
    let mut out = String::new();
    let mut used = 0;
    let mut rest = format;
    while let Some(percent) = rest.find('%') {
        out.push_str(&rest[..percent]);
        let (spec, after) = directive(&rest[percent + 1..])?;
        let Some(verb) = after.chars().next() else {
            out.push_str("%!(NOVERB)");
            rest = "";
            break;
        };
        rest = &after[verb.len_utf8()..];
        match (verb, args.get(used)) {
            ('%', _) => out.push('%'),
            ('w', _) => return Err(Fault::unsupported("printf %w is not supported")),
            (_, None) => out.push_str(&format!("%!{verb}(MISSING)")),
            (_, Some(arg)) => {
                format_arg(&mut out, arg, verb, spec)?;
                used += 1;
            }
        }
    }
    out.push_str(rest);
    if used < args.len() {
        out.push_str("%!(EXTRA ");
        for (i, arg) in args[used..].iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(arg.type_name());
            out.push('=');
            format_arg(&mut out, arg, 'v', Spec::default())?;
        }
        out.push(')');
    }
    Ok(out)
}

/// The flags and width after a `%`, and the rest starting at the verb.
fn directive(s: &str) -> Result<(Spec, &str), Fault> {
    let mut spec = Spec::default();
    let mut s = s;
    loop {
        match s.bytes().next() {
            Some(b'-') => spec.left = true,
            Some(b'+' | b'#' | b'0' | b' ') => {
                return Err(Fault::unsupported("printf flags other than - are not supported"));
            }
            _ => break,
        }
        s = &s[1..];
    }
    let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 {
        spec.width = s[..digits]
            .parse()
            .ok()
            .filter(|&width| width <= MAX_WIDTH)
            .ok_or_else(|| Fault::unsupported(format!("printf widths over {MAX_WIDTH} are not supported")))?;
        s = &s[digits..];
    }
    if s.starts_with(['[', '*']) || s.len() > 1 && s.starts_with('.') {
        return Err(Fault::unsupported(
            "printf precision, * and argument indexes are not supported",
        ));
    }
    Ok((spec, s))
}

/// One argument under one verb; a map applies the verb to each key and value.
fn format_arg(out: &mut String, value: &Value, verb: char, spec: Spec) -> Result<(), Fault> {
    match (verb, value) {
        ('T', _) => pad(out, value.type_name(), spec),
        ('p', Value::Map(_)) => return Err(Fault::unsupported("printf %p is not supported")),
        (_, Value::Map(map)) => {
            out.push_str("map[");
            for (i, (key, entry)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                format_leaf(out, &Value::Str(key.clone()), verb, spec)?;
                out.push(':');
                format_leaf(out, &Value::Str(entry.clone()), verb, spec)?;
            }
            out.push(']');
        }
        _ => format_leaf(out, value, verb, spec)?,
    }
    Ok(())
}

/// A value that is not a map. A verb that does not apply to its type prints Go's
/// `%!verb(type=value)`; one that Go implements and this engine does not is an error.
fn format_leaf(out: &mut String, value: &Value, verb: char, spec: Spec) -> Result<(), Fault> {
    let text = match (verb, value) {
        ('v' | 's', Value::Str(s)) => s.clone(),
        ('q', Value::Str(s)) => go_quote(s)?,
        ('v' | 'd', Value::Int(_) | Value::Byte(_)) | ('v', Value::Float(_)) | ('v' | 't', Value::Bool(_)) => {
            display(value)
        }
        _ if go_formats(value, verb) => {
            return Err(Fault::unsupported(format!(
                "printf %{verb} of {} is not supported",
                value.type_name()
            )));
        }
        _ => {
            out.push_str(&format!("%!{verb}({}=", value.type_name()));
            format_leaf(out, value, 'v', spec)?;
            out.push(')');
            return Ok(());
        }
    };
    pad(out, &text, spec);
    Ok(())
}

/// The verbs Go's fmt implements for a type, beyond those handled here.
fn go_formats(value: &Value, verb: char) -> bool {
    let verbs = match value {
        Value::Str(_) => "xX",
        Value::Int(_) | Value::Byte(_) => "bcoOqxXU",
        Value::Float(_) => "beEfFgGxX",
        Value::Bool(_) | Value::Map(_) => "",
    };
    verbs.contains(verb)
}

fn pad(out: &mut String, text: &str, spec: Spec) {
    let fill = " ".repeat(spec.width.saturating_sub(text.chars().count()));
    if spec.left {
        out.push_str(text);
        out.push_str(&fill);
    } else {
        out.push_str(&fill);
        out.push_str(text);
    }
}

/// Go's `strconv.Quote` for ASCII text.
fn go_quote(s: &str) -> Result<String, Fault> {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
            _ => return Err(Fault::unsupported("printf %q of non-ASCII text is not supported")),
        }
    }
    out.push('"');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_float_is_gos_v_of_a_float64() {
        for (number, text) in [
            (0.5, "0.5"),
            (-0.0, "-0"),
            (100.0, "100"),
            (999999.0, "999999"),
            (123456789.0, "1.23456789e+08"),
            (0.000123, "0.000123"),
            (5e-324, "5e-324"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_float(number), text, "{number}");
        }
    }
}
