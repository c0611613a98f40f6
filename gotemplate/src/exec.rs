//! Execution: a parsed template run against a `map[string]string`.

use std::collections::BTreeMap;

use crate::builtins::{Arity, Callee, Function, apply};
use crate::fault::{Fault, TemplateError};
use crate::fmt::display;
use crate::limits::{MAX_TEXT, MAX_WORK};
use crate::parse::{Arg, ArgKind, Command, Control, Node, Number, Parser, Pipeline, Span};
use crate::value::Value;

// ------------------------------------------------------------------------------------------------
// Execution

type Run<T> = Result<T, TemplateError>;

/// A parsed template.
#[derive(Debug)]
pub struct Template {
    text: String,
    nodes: Vec<Node>,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let nodes = Parser::new(text).root()?;
        Ok(Template {
            text: text.to_string(),
            nodes,
        })
    }

    /// Runs the template against `properties`, appending to `out`. On an error `out` keeps what
    /// was printed before it, as with Go.
    pub fn execute(&self, properties: &BTreeMap<String, String>, out: &mut String) -> Result<(), TemplateError> {
        let mut exec = Exec {
            text: &self.text,
            vars: vec![("$", Value::Map(properties))],
            out,
            work: std::cell::Cell::new(0),
        };
        exec.walk(&self.nodes, &Value::Map(properties))
    }
}

/// Parses and runs `text` against `properties`.
pub fn expand(text: &str, properties: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    let mut out = String::new();
    Template::parse(text)?.execute(properties, &mut out)?;
    Ok(out)
}

struct Exec<'a, 'p> {
    text: &'a str,
    /// Variables in scope, innermost last.
    vars: Vec<(&'a str, Value<'p>)>,
    out: &'a mut String,
    /// Bytes of strings made or copied so far (see [`MAX_WORK`]).
    work: std::cell::Cell<usize>,
}

impl<'a, 'p> Exec<'a, 'p> {
    fn fail(&self, span: Span, fault: Fault) -> TemplateError {
        fault.at(self.text, span.0, Some(span))
    }

    /// Counts a string made or copied; fails past [`MAX_WORK`].
    fn charge(&self, value: &Value<'p>, span: Span) -> Run<()> {
        if let Value::Str(text) = value {
            self.work.set(self.work.get() + text.len());
            if self.work.get() > MAX_WORK {
                let limit = MAX_WORK >> 20;
                return Err(self.fail(
                    span,
                    Fault::go(format!(
                        "the template makes more than {limit} MiB of text in all (the limit)"
                    )),
                ));
            }
        }
        Ok(())
    }

    fn walk(&mut self, nodes: &'a [Node], dot: &Value<'p>) -> Run<()> {
        for node in nodes {
            match node {
                Node::Text(text) => self.out.push_str(text),
                Node::Action(pipe) => {
                    let value = self.pipeline(pipe, dot)?;
                    if pipe.decl.is_empty() {
                        self.out.push_str(&display(&value));
                        if self.out.len() > MAX_TEXT {
                            let limit = MAX_TEXT >> 20;
                            return Err(self.fail(
                                pipe.span,
                                Fault::go(format!("the output is longer than {limit} MiB (the limit)")),
                            ));
                        }
                    }
                }
                Node::If(control) => self.control(control, dot, false)?,
                Node::With(control) => self.control(control, dot, true)?,
            }
        }
        Ok(())
    }

    fn control(&mut self, control: &'a Control, dot: &Value<'p>, with: bool) -> Run<()> {
        let scope = self.vars.len();
        let value = self.pipeline(&control.pipe, dot)?;
        if !value.truth() {
            self.walk(&control.else_list, dot)?;
        } else if with {
            self.walk(&control.list, &value)?;
        } else {
            self.walk(&control.list, dot)?;
        }
        self.vars.truncate(scope);
        Ok(())
    }

    fn pipeline(&mut self, pipe: &'a Pipeline, dot: &Value<'p>) -> Run<Value<'p>> {
        let mut value = self.command(&pipe.first, dot, None)?;
        for cmd in &pipe.rest {
            value = self.command(cmd, dot, Some(value))?;
        }
        for name in &pipe.decl {
            if pipe.is_assign {
                self.assign(name, value.clone(), pipe.span)?;
            } else {
                self.vars.push((name, value.clone()));
            }
        }
        Ok(value)
    }

    /// One command; `piped` is the previous command's value, passed as the last argument.
    fn command(&mut self, cmd: &'a Command, dot: &Value<'p>, piped: Option<Value<'p>>) -> Run<Value<'p>> {
        let head = &cmd.head;
        let has_args = !cmd.args.is_empty() || piped.is_some();
        match &head.kind {
            ArgKind::Field(names) => self.fields(dot.clone(), names, has_args, head.span),
            ArgKind::Variable(name, names) if !names.is_empty() => {
                let receiver = self.variable(name, head.span)?;
                self.fields(receiver, names, has_args, head.span)
            }
            ArgKind::Chain(inner, names) => {
                let receiver = self.arg(inner, dot)?;
                self.fields(receiver, names, has_args, head.span)
            }
            ArgKind::Identifier(function) => self.call(function, &cmd.args, piped, dot, cmd.span),
            _ if has_args => {
                let shown = &self.text[head.span.0..head.span.1];
                Err(self.fail(
                    head.span,
                    Fault::go(format!("can't give argument to non-function {shown}")),
                ))
            }
            _ => self.arg(head, dot),
        }
    }

    fn arg(&mut self, arg: &'a Arg, dot: &Value<'p>) -> Run<Value<'p>> {
        match &arg.kind {
            ArgKind::Dot => Ok(dot.clone()),
            ArgKind::Bool(value) => Ok(Value::Bool(*value)),
            ArgKind::Str(value) => Ok(Value::Str(value.clone())),
            ArgKind::Number(Number::Int(value)) => Ok(Value::Int(*value)),
            ArgKind::Number(Number::Float(value)) => Ok(Value::Float(*value)),
            ArgKind::Number(Number::TooBig) => {
                let shown = &self.text[arg.span.0..arg.span.1];
                Err(self.fail(arg.span, Fault::go(format!("{shown} overflows int"))))
            }
            ArgKind::Field(names) => self.fields(dot.clone(), names, false, arg.span),
            ArgKind::Variable(name, names) => {
                let receiver = self.variable(name, arg.span)?;
                self.fields(receiver, names, false, arg.span)
            }
            ArgKind::Chain(inner, names) => {
                let receiver = self.arg(inner, dot)?;
                self.fields(receiver, names, false, arg.span)
            }
            ArgKind::Pipe(pipe) => self.pipeline(pipe, dot),
            ArgKind::Identifier(function) => self.call(function, &[], None, dot, arg.span),
        }
    }

    /// Field lookups: only the map has fields, and a missing key is an error (`missingkey=error`).
    fn fields(&self, mut receiver: Value<'p>, names: &[String], has_args: bool, span: Span) -> Run<Value<'p>> {
        for (i, name) in names.iter().enumerate() {
            let fault = match receiver {
                Value::Map(_) if has_args && i + 1 == names.len() => {
                    Fault::go(format!("{name} is not a method but has arguments"))
                }
                Value::Map(map) => match map.get(name) {
                    Some(value) => {
                        receiver = Value::Str(value.clone());
                        continue;
                    }
                    None => Fault::go(format!("map has no entry for key {name:?}")),
                },
                _ => Fault::go(format!("can't evaluate field {name} in type {}", receiver.type_name())),
            };
            return Err(self.fail(span, fault));
        }
        Ok(receiver)
    }

    fn variable(&self, name: &str, span: Span) -> Run<Value<'p>> {
        match self.vars.iter().rev().find(|(var, _)| *var == name) {
            Some((_, value)) => {
                self.charge(value, span)?;
                Ok(value.clone())
            }
            None => Err(self.fail(span, Fault::go(format!("undefined variable: {name}")))),
        }
    }

    fn assign(&mut self, name: &str, value: Value<'p>, span: Span) -> Run<()> {
        match self.vars.iter_mut().rev().find(|(var, _)| *var == name) {
            Some((_, slot)) => {
                *slot = value;
                Ok(())
            }
            None => Err(self.fail(span, Fault::go(format!("undefined variable: {name}")))),
        }
    }

    fn call(
        &mut self,
        function: &'static Function,
        args: &'a [Arg],
        piped: Option<Value<'p>>,
        dot: &Value<'p>,
        span: Span,
    ) -> Run<Value<'p>> {
        let count = args.len() + usize::from(piped.is_some());
        let wrong = match function.arity {
            Arity::Exactly(n) if count != n => Some(format!("want {n} got {count}")),
            Arity::AtLeast(n) if count < n => Some(format!("want at least {n} got {}", args.len())),
            _ => None,
        };
        if let Some(wrong) = wrong {
            return Err(self.fail(
                span,
                Fault::go(format!("wrong number of args for {}: {wrong}", function.name)),
            ));
        }
        let builtin = match function.callee {
            Callee::And => return self.and_or(false, args, piped, dot),
            Callee::Or => return self.and_or(true, args, piped, dot),
            Callee::Eager(builtin) => builtin,
        };
        let mut values = Vec::with_capacity(count);
        for arg in args {
            values.push(self.arg(arg, dot)?);
        }
        values.extend(piped);
        let result = apply(builtin, &values).map_err(|fault| self.fail(span, fault.calling(function.name)))?;
        if let Value::Str(text) = &result
            && text.len() > MAX_TEXT
        {
            let limit = MAX_TEXT >> 20;
            let fault = Fault::go(format!("its result is longer than {limit} MiB (the limit)"));
            return Err(self.fail(span, fault.calling(function.name)));
        }
        self.charge(&result, span)?;
        Ok(result)
    }

    /// `and` and `or` evaluate their arguments in order and stop at the first that decides; with
    /// none deciding, the piped value (or else the last argument) is the result.
    fn and_or(&mut self, is_or: bool, args: &'a [Arg], piped: Option<Value<'p>>, dot: &Value<'p>) -> Run<Value<'p>> {
        let mut last = None;
        for arg in args {
            let value = self.arg(arg, dot)?;
            if value.truth() == is_or {
                return Ok(value);
            }
            last = Some(value);
        }
        // The arity check guarantees a value; the fallback is the operation's identity.
        Ok(piped.or(last).unwrap_or(Value::Bool(!is_or)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wec;

    /// `{{$x := "aaaaaaaaaa"}}` then `doublings` times `{{$x = printf "%s%s" $x $x}}`, then `tail`.
    fn doubling(doublings: usize, tail: &str) -> String {
        let mut text = String::from("{{$x := \"aaaaaaaaaa\"}}");
        for _ in 0..doublings {
            text += "{{$x = printf \"%s%s\" $x $x}}";
        }
        text + tail
    }

    #[test]
    fn a_string_doubled_thirty_times_stops_at_the_limit() {
        // 10 × 2^30 bytes (10 GB) if it ran: stops at the first string over 1 MiB.
        let mut out = String::new();
        let error = Template::parse(&doubling(30, "{{$x}}"))
            .unwrap()
            .execute(&wec(), &mut out)
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("error calling printf: its result is longer than 1 MiB"),
            "{error}"
        );
        assert!(out.is_empty());
        // Just under the limit is fine, and printed.
        let fits = expand(&doubling(16, "{{$x}}"), &wec()).unwrap();
        assert_eq!(fits.len(), 10 << 16);
        // Printing the same string twice goes over.
        let error = expand(&doubling(16, "{{$x}}{{$x}}"), &wec()).unwrap_err();
        assert!(error.to_string().contains("the output is longer than 1 MiB"), "{error}");
    }

    #[test]
    fn repeating_costly_steps_stops_at_the_work_limit() {
        // A 640 KiB string read 120 times (75 MiB of copies) prints nothing, yet is stopped.
        let error = expand(&doubling(16, &"{{if $x}}{{end}}".repeat(120)), &wec()).unwrap_err();
        assert!(error.to_string().contains("more than 64 MiB of text in all"), "{error}");
        assert!(expand(&doubling(16, &"{{if $x}}{{end}}".repeat(90)), &wec()).is_ok());
    }
}
