//! The syntax tree, and the parser: Go's text/template/parse, token for token, so that exactly the
//! same texts parse.

use crate::builtins::{FUNCTIONS, Function};
pub(crate) use crate::fault::Span;
use crate::fault::{Fault, TemplateError};
use crate::lex::{Kw, Tok, Token, lex};
use crate::limits::MAX_DEPTH;

// ------------------------------------------------------------------------------------------------
// Syntax tree

#[derive(Debug)]
pub(crate) enum Node {
    Text(String),
    Action(Pipeline),
    If(Box<Control>),
    With(Box<Control>),
}

/// An `if` or `with` block; `else if` and `else with` are an else list holding one block.
#[derive(Debug)]
pub(crate) struct Control {
    pub(crate) pipe: Pipeline,
    pub(crate) list: Vec<Node>,
    pub(crate) else_list: Vec<Node>,
}

#[derive(Debug)]
pub(crate) struct Pipeline {
    pub(crate) span: Span,
    pub(crate) decl: Vec<String>,
    pub(crate) is_assign: bool,
    pub(crate) first: Command,
    pub(crate) rest: Vec<Command>,
}

#[derive(Debug)]
pub(crate) struct Command {
    pub(crate) span: Span,
    pub(crate) head: Arg,
    pub(crate) args: Vec<Arg>,
}

#[derive(Debug)]
pub(crate) struct Arg {
    pub(crate) span: Span,
    pub(crate) kind: ArgKind,
}

#[derive(Debug)]
pub(crate) enum ArgKind {
    Dot,
    Bool(bool),
    Number(Number),
    Str(String),
    /// `.a.b`
    Field(Vec<String>),
    /// `$x.a.b`
    Variable(String, Vec<String>),
    /// `(pipeline).a.b` or `function.a`
    Chain(Box<Arg>, Vec<String>),
    Identifier(&'static Function),
    Pipe(Box<Pipeline>),
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
    /// Fits Go's uint64 but not its int: an error only if it is evaluated, as in Go.
    TooBig,
}

// ------------------------------------------------------------------------------------------------
// Parser

type Parsed<T> = Result<T, TemplateError>;

/// What one step at list level produced: a node, or the `{{end}}`/`{{else}}` closing a list.
enum Item {
    Node(Node),
    End,
    Else,
}

pub(crate) struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    next: usize,
    /// Variables in scope, as Go checks them at parse time.
    vars: Vec<String>,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Parser {
            text,
            tokens: lex(text),
            next: 0,
            vars: vec!["$".to_string()],
            depth: 0,
        }
    }

    /// The token at the cursor; the stream ends with `Eof` or `Error`, which repeats forever.
    fn peek(&self) -> &Token {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> Parsed<Token> {
        let token = self.peek().clone();
        self.next += 1;
        match token.tok {
            Tok::Error(fault) => Err(fault.at(self.text, token.start, None)),
            _ => Ok(token),
        }
    }

    fn backup(&mut self) {
        self.next -= 1;
    }

    fn next_non_space(&mut self) -> Parsed<Token> {
        loop {
            let token = self.advance()?;
            if !matches!(token.tok, Tok::Space) {
                return Ok(token);
            }
        }
    }

    /// Skips spaces (for good, as Go does) and shows the next token.
    fn peek_non_space(&mut self) -> Token {
        while matches!(self.peek().tok, Tok::Space) {
            self.next += 1;
        }
        self.peek().clone()
    }

    fn fail(&self, fault: Fault) -> TemplateError {
        let last = self.next.clamp(1, self.tokens.len()) - 1;
        fault.at(self.text, self.tokens[last].start, None)
    }

    fn unexpected(&self, token: &Token, context: &str) -> TemplateError {
        let shown = match token.tok {
            Tok::Eof => "EOF".to_string(),
            Tok::Keyword(kw) => format!("<{}>", kw.word()),
            _ => {
                let text = &self.text[token.start..token.end];
                if text.chars().count() > 10 {
                    format!("{:?}...", text.chars().take(10).collect::<String>())
                } else {
                    format!("{text:?}")
                }
            }
        };
        self.fail(Fault::go(format!("unexpected {shown} in {context}")))
    }

    fn nest(&mut self) -> Parsed<()> {
        if self.depth == MAX_DEPTH {
            return Err(self.fail(Fault::unsupported(format!(
                "nesting deeper than {MAX_DEPTH} is not supported"
            ))));
        }
        self.depth += 1;
        Ok(())
    }

    pub(crate) fn root(&mut self) -> Parsed<Vec<Node>> {
        let mut nodes = Vec::new();
        while !matches!(self.peek().tok, Tok::Eof) {
            match self.text_or_action()? {
                Item::Node(node) => nodes.push(node),
                Item::End => return Err(self.fail(Fault::go("unexpected {{end}}"))),
                Item::Else => return Err(self.fail(Fault::go("unexpected {{else}}"))),
            }
        }
        Ok(nodes)
    }

    /// The nodes up to the `{{end}}` or `{{else}}` that closes them.
    fn item_list(&mut self) -> Parsed<(Vec<Node>, Item)> {
        let mut nodes = Vec::new();
        while !matches!(self.peek_non_space().tok, Tok::Eof) {
            match self.text_or_action()? {
                Item::Node(node) => nodes.push(node),
                closing => return Ok((nodes, closing)),
            }
        }
        Err(self.fail(Fault::go("unexpected EOF")))
    }

    fn text_or_action(&mut self) -> Parsed<Item> {
        let token = self.next_non_space()?;
        match token.tok {
            Tok::Text => Ok(Item::Node(Node::Text(self.text[token.start..token.end].to_string()))),
            Tok::LeftDelim => self.action(),
            _ => Err(self.unexpected(&token, "input")),
        }
    }

    fn action(&mut self) -> Parsed<Item> {
        let token = self.next_non_space()?;
        match token.tok {
            Tok::Keyword(Kw::Else) => {
                if !matches!(self.peek_non_space().tok, Tok::Keyword(Kw::If | Kw::With)) {
                    self.expect_right_delim("else")?;
                }
                Ok(Item::Else)
            }
            Tok::Keyword(Kw::End) => {
                self.expect_right_delim("end")?;
                Ok(Item::End)
            }
            Tok::Keyword(kw @ (Kw::If | Kw::With)) => self.control(kw).map(Item::Node),
            Tok::Keyword(kw) if kw != Kw::Nil => Err(self.fail(Fault::unsupported(format!(
                "unsupported template action {:?}",
                kw.word()
            )))),
            _ => {
                self.backup();
                Ok(Item::Node(Node::Action(self.pipeline("command", false)?)))
            }
        }
    }

    fn expect_right_delim(&mut self, context: &str) -> Parsed<()> {
        let token = self.next_non_space()?;
        match token.tok {
            Tok::RightDelim => Ok(()),
            _ => Err(self.unexpected(&token, context)),
        }
    }

    fn control(&mut self, kw: Kw) -> Parsed<Node> {
        self.nest()?;
        let scope = self.vars.len();
        let pipe = self.pipeline(kw.word(), false)?;
        let (list, closing) = self.item_list()?;
        let else_list = match closing {
            Item::Else => self.else_list(kw)?,
            _ => Vec::new(),
        };
        self.vars.truncate(scope);
        self.depth -= 1;
        let control = Box::new(Control { pipe, list, else_list });
        Ok(if kw == Kw::If {
            Node::If(control)
        } else {
            Node::With(control)
        })
    }

    fn else_list(&mut self, kw: Kw) -> Parsed<Vec<Node>> {
        if matches!(self.peek().tok, Tok::Keyword(next) if next == kw) {
            self.advance()?;
            return Ok(vec![self.control(kw)?]);
        }
        match self.item_list()? {
            (list, Item::End) => Ok(list),
            _ => Err(self.fail(Fault::go("expected end; found {{else}}"))),
        }
    }

    /// A pipeline up to `}}` or, in parentheses, `)`.
    fn pipeline(&mut self, context: &str, in_parens: bool) -> Parsed<Pipeline> {
        let start = self.peek_non_space().start;
        let (decl, is_assign) = self.declaration(context)?;
        let mut cmds = Vec::new();
        let end = loop {
            let token = self.next_non_space()?;
            match token.tok {
                Tok::RightDelim if !in_parens => break token.start,
                Tok::RightParen if in_parens => break token.start,
                Tok::Bool(_)
                | Tok::CharConst
                | Tok::Complex
                | Tok::Dot
                | Tok::Field
                | Tok::Identifier
                | Tok::Number
                | Tok::Keyword(Kw::Nil)
                | Tok::RawStr
                | Tok::Str
                | Tok::Variable
                | Tok::LeftParen => {
                    self.backup();
                    cmds.push(self.command()?);
                }
                _ => return Err(self.unexpected(&token, context)),
            }
        };
        let mut cmds = cmds.into_iter();
        let first = cmds
            .next()
            .ok_or_else(|| self.fail(Fault::go(format!("missing value for {context}"))))?;
        let rest: Vec<Command> = cmds.collect();
        for (i, cmd) in rest.iter().enumerate() {
            if matches!(
                cmd.head.kind,
                ArgKind::Bool(_) | ArgKind::Dot | ArgKind::Number(_) | ArgKind::Str(_)
            ) {
                return Err(self.fail(Fault::go(format!("non executable command in pipeline stage {}", i + 2))));
            }
        }
        Ok(Pipeline {
            span: Span(start, end),
            decl,
            is_assign,
            first,
            rest,
        })
    }

    /// `$x :=` or `$x =` at the start of a pipeline; the names and whether it assigns.
    fn declaration(&mut self, context: &str) -> Parsed<(Vec<String>, bool)> {
        if !matches!(self.peek_non_space().tok, Tok::Variable) {
            return Ok((Vec::new(), false));
        }
        let at = self.next;
        let variable = self.advance()?;
        let name = self.text[variable.start..variable.end].to_string();
        match self.peek_non_space().tok {
            Tok::Assign | Tok::Declare => {
                let is_assign = matches!(self.advance()?.tok, Tok::Assign);
                self.vars.push(name.clone());
                Ok((vec![name], is_assign))
            }
            Tok::Char(',') => {
                self.advance()?;
                Err(self.fail(Fault::go(format!("too many declarations in {context}"))))
            }
            _ => {
                self.next = at;
                Ok((Vec::new(), false))
            }
        }
    }

    fn command(&mut self) -> Parsed<Command> {
        let start = self.peek_non_space().start;
        let mut args = Vec::new();
        loop {
            self.peek_non_space();
            if let Some(arg) = self.operand()? {
                args.push(arg);
            }
            let token = self.advance()?;
            match token.tok {
                Tok::Space => continue,
                Tok::RightDelim | Tok::RightParen => self.backup(),
                Tok::Pipe => {}
                _ => return Err(self.unexpected(&token, "operand")),
            }
            break;
        }
        let mut args = args.into_iter();
        let head = args.next().ok_or_else(|| self.fail(Fault::go("empty command")))?;
        let args: Vec<Arg> = args.collect();
        let end = args.last().unwrap_or(&head).span.1;
        Ok(Command {
            span: Span(start, end),
            head,
            args,
        })
    }

    /// A term followed by any `.field`s.
    fn operand(&mut self) -> Parsed<Option<Arg>> {
        let Some(term) = self.term()? else { return Ok(None) };
        let mut fields = Vec::new();
        let mut end = term.span.1;
        while matches!(self.peek().tok, Tok::Field) {
            let field = self.advance()?;
            fields.push(self.text[field.start + 1..field.end].to_string());
            end = field.end;
        }
        if fields.is_empty() {
            return Ok(Some(term));
        }
        let span = Span(term.span.0, end);
        let kind = match term.kind {
            ArgKind::Field(mut names) => {
                names.extend(fields);
                ArgKind::Field(names)
            }
            ArgKind::Variable(name, mut names) => {
                names.extend(fields);
                ArgKind::Variable(name, names)
            }
            ArgKind::Dot | ArgKind::Bool(_) | ArgKind::Number(_) | ArgKind::Str(_) => {
                let shown = &self.text[term.span.0..term.span.1];
                return Err(self.fail(Fault::go(format!("unexpected . after term {shown:?}"))));
            }
            kind => ArgKind::Chain(Box::new(Arg { span: term.span, kind }), fields),
        };
        Ok(Some(Arg { span, kind }))
    }

    fn term(&mut self) -> Parsed<Option<Arg>> {
        let token = self.next_non_space()?;
        let src = self.text;
        let text = &src[token.start..token.end];
        let kind = match token.tok {
            Tok::Identifier => ArgKind::Identifier(self.function(text)?),
            Tok::Dot => ArgKind::Dot,
            Tok::Keyword(Kw::Nil) => return Err(self.fail(Fault::unsupported("nil is not supported"))),
            Tok::Variable => {
                if !self.vars.iter().any(|var| var == text) {
                    return Err(self.fail(Fault::go(format!("undefined variable {text:?}"))));
                }
                ArgKind::Variable(text.to_string(), Vec::new())
            }
            Tok::Field => ArgKind::Field(vec![text[1..].to_string()]),
            Tok::Bool(value) => ArgKind::Bool(value),
            Tok::CharConst | Tok::Complex | Tok::Number => {
                ArgKind::Number(parse_number(text).map_err(|fault| self.fail(fault))?)
            }
            Tok::Str | Tok::RawStr => ArgKind::Str(unquote(text).map_err(|fault| self.fail(fault))?),
            Tok::LeftParen => {
                self.nest()?;
                let pipe = self.pipeline("parenthesized pipeline", true)?;
                self.depth -= 1;
                let span = Span(token.start, pipe.span.1 + 1);
                return Ok(Some(Arg {
                    span,
                    kind: ArgKind::Pipe(Box::new(pipe)),
                }));
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        };
        Ok(Some(Arg {
            span: Span(token.start, token.end),
            kind,
        }))
    }

    fn function(&self, name: &str) -> Parsed<&'static Function> {
        match FUNCTIONS.iter().find(|function| function.name == name) {
            Some(function) => Ok(function),
            None if name == "call" => Err(self.fail(Fault::unsupported("function \"call\" is not supported"))),
            None => Err(self.fail(Fault::go(format!("function {name:?} not defined")))),
        }
    }
}

/// A number constant as Go's template parser reads it: integers (decimal, `0x`, `0o`, `0b`,
/// leading-`0` octal) are `int`, anything with a `.` or an exponent is `float64`.
fn parse_number(text: &str) -> Result<Number, Fault> {
    let unsupported = || Fault::unsupported(format!("the number constant {text} is not supported"));
    let illegal = || Fault::go(format!("illegal number syntax: {text:?}"));
    if text.starts_with('\'') || text.contains('_') || text.ends_with('i') {
        return Err(unsupported());
    }
    let (negative, body) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let decimal = !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit());
    let (radix, digits) = match body.get(..2) {
        Some("0x" | "0X") if body.contains(['.', 'p', 'P']) => return Err(unsupported()),
        Some("0x" | "0X") => (16, &body[2..]),
        Some("0o" | "0O") => (8, &body[2..]),
        Some("0b" | "0B") => (2, &body[2..]),
        _ if decimal && body.len() > 1 && body.starts_with('0') => (8, &body[1..]),
        _ if decimal => (10, body),
        _ => {
            let value: f64 = text.parse().map_err(|_| illegal())?;
            return if value.is_finite() {
                Ok(Number::Float(value))
            } else {
                Err(illegal())
            };
        }
    };
    let magnitude = u64::from_str_radix(digits, radix).map_err(|_| illegal())?;
    let signed = if negative {
        -i128::from(magnitude)
    } else {
        i128::from(magnitude)
    };
    match i64::try_from(signed) {
        Ok(value) => Ok(Number::Int(value)),
        Err(_) if text.as_bytes()[0].is_ascii_digit() => Ok(Number::TooBig),
        Err(_) => Err(Fault::go(format!("integer overflow: {text:?}"))),
    }
}

/// The value of a quoted string constant, with Go's escapes.
fn unquote(token: &str) -> Result<String, Fault> {
    let inner = &token[1..token.len() - 1];
    if token.starts_with('`') {
        return Ok(inner.replace('\r', ""));
    }
    let invalid = || Fault::go("invalid syntax");
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            continue;
        }
        let escaped = chars.next().ok_or_else(invalid)?;
        let byte = match escaped {
            'a' => 7,
            'b' => 8,
            'f' => 12,
            'n' => b'\n',
            'r' => b'\r',
            't' => b'\t',
            'v' => 11,
            '\\' | '"' => escaped as u8,
            '0'..='7' => {
                let value = u32::from(escaped as u8 - b'0') * 64 + number_in(&mut chars, 8, 2).ok_or_else(invalid)?;
                u8::try_from(value).map_err(|_| invalid())?
            }
            'x' => u8::try_from(number_in(&mut chars, 16, 2).ok_or_else(invalid)?).map_err(|_| invalid())?,
            'u' | 'U' => {
                let value = number_in(&mut chars, 16, if escaped == 'u' { 4 } else { 8 }).ok_or_else(invalid)?;
                let c = char::from_u32(value).ok_or_else(invalid)?;
                bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            _ => return Err(invalid()),
        };
        bytes.push(byte);
    }
    String::from_utf8(bytes).map_err(|_| Fault::unsupported("string constants that are not UTF-8 are not supported"))
}

/// The next `count` characters read as digits in `radix`.
fn number_in(chars: &mut std::str::Chars<'_>, radix: u32, count: usize) -> Option<u32> {
    (0..count).try_fold(0, |value, _| Some(value * radix + chars.next()?.to_digit(radix)?))
}
