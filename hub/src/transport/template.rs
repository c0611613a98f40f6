//! Template expansion for one WEC (docs/upstream-behaviour.md#templates).
//!
//! In an object annotated `control.kubestellar.io/expand-templates: "true"`, every string leaf
//! that contains `{{` is a Go `text/template`, run with `Option("missingkey=error")` against the
//! WEC's properties (a `map[string]string`).
//!
//! The engine implements the part of text/template that means something over a flat string map,
//! and matches Go exactly there (`tests/template_oracle.rs` runs the same cases through Go): text,
//! comments, trim markers, `if`/`with` with `else`, `else if` and `else with`, variables (`$x :=`,
//! `$x =`, `$`), pipelines, parentheses, string, number and boolean constants, field access, and
//! the functions `and or not len index slice eq ne lt le gt ge print printf println html js
//! urlquery`. Errors read like Go's, without the template name.
//!
//! What it leaves out fails with an error that [`TemplateError::is_unsupported`] flags, never with
//! a different result: `range`, `define`, `template`, `block`, `break`, `continue`, `nil`, `call`,
//! character and complex constants, numbers with `_`, hexadecimal floats, string constants that
//! are not UTF-8, identifiers that are not ASCII, printf directives other than `%v %s %d %q %t %T
//! %%` with a width and `-`, `%q` and `js` of non-ASCII text, slicing inside a UTF-8 character,
//! and nesting deeper than 100 (each `else if` counts as a level).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value as Json;

type Props = BTreeMap<String, String>;

/// How deep `if`/`with` blocks and parentheses may nest (Go allows 10000 parentheses); it keeps
/// the recursive parser and evaluator well inside a thread's stack.
const MAX_DEPTH: usize = 100;
/// The widest printf field allowed, so that a template cannot ask for a huge allocation.
const MAX_WIDTH: usize = 10_000;
/// The longest string a template may make or print (1 MiB): an etcd object holds at most
/// 1.5 MiB, so nothing longer could be delivered, and a template that doubles a string 30 times
/// would otherwise make 10 GB and take the hub down.
pub const MAX_TEXT: usize = 1 << 20;
/// The bytes of strings one template may make or copy in all (64 MiB). Templates have no loops,
/// but a large one can repeat costly steps; this bounds the time an expansion takes.
const MAX_WORK: usize = 64 << 20;
/// The most that all the templates of one object may print together (2 MiB).
pub const MAX_OBJECT_TEXT: usize = 2 << 20;

/// Whether a string is a template: upstream expands exactly the strings that contain `{{`.
pub fn has_template(s: &str) -> bool {
    s.contains("{{")
}

/// Whether any string leaf of `value` is a template (map keys do not count).
pub fn contains_template(value: &Json) -> bool {
    match value {
        Json::String(text) => has_template(text),
        Json::Array(items) => items.iter().any(contains_template),
        Json::Object(fields) => fields.values().any(contains_template),
        _ => false,
    }
}

/// Expands, in place, every string leaf of `object` that contains `{{` (map keys and other values
/// stay as they are). A leaf whose template does not parse becomes `""` and one that fails while
/// running keeps what it printed before the error, as upstream does. The error lists every failed
/// leaf, `; `-separated, each as `<path>: <error>`, e.g.
/// `spec.containers[0].env[1].value: template: 1:2: executing at <.zone>: map has no entry for key "zone"`.
pub fn expand_object(object: &mut Json, properties: &BTreeMap<String, String>) -> Result<(), String> {
    let mut errors = Vec::new();
    let mut printed = 0;
    expand_value(object, &mut String::new(), properties, &mut printed, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// `printed` counts what the object's templates have printed so far; past [`MAX_OBJECT_TEXT`]
/// the remaining leaves are left as they are.
fn expand_value(
    value: &mut Json,
    path: &mut String,
    properties: &Props,
    printed: &mut usize,
    errors: &mut Vec<String>,
) {
    let len = path.len();
    match value {
        Json::String(text) if has_template(text) => {
            let at = if path.is_empty() { "." } else { path.as_str() };
            if *printed > MAX_OBJECT_TEXT {
                errors.push(format!(
                    "{at}: not expanded: the object's templates print more than {} MiB in all",
                    MAX_OBJECT_TEXT >> 20
                ));
                return;
            }
            let template = Template::parse(text);
            let mut out = String::new();
            let result = template.and_then(|template| template.execute(properties, &mut out));
            *printed += out.len();
            *text = out;
            if let Err(error) = result {
                errors.push(format!("{at}: {error}"));
            }
        }
        Json::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push_str(&format!("[{i}]"));
                expand_value(item, path, properties, printed, errors);
                path.truncate(len);
            }
        }
        Json::Object(fields) => {
            for (key, item) in fields.iter_mut() {
                if len > 0 {
                    path.push('.');
                }
                path.push_str(key);
                expand_value(item, path, properties, printed, errors);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// The properties of one WEC, from lowest to highest precedence (later sources overwrite earlier
/// ones, docs/upstream-behaviour.md#templates):
///
/// 1. `clusterName`: the inventory object's (ManagedCluster's) name;
/// 2. the ManagedCluster's labels;
/// 3. its annotations;
/// 4. the ConfigMap `customization-properties/<cluster>` in the ITS: its `data`, then its
///    `binaryData` (the bytes read as text, each byte that is not valid UTF-8 becoming U+FFFD, as
///    upstream's JSON encoding of the result does).
///
/// So the ConfigMap beats annotations, which beat labels, which beat the built-in (a label named
/// `clusterName` replaces it). Only keys that are Go identifiers are taken (Go's
/// `token.IsIdentifier`; Kubernetes keys are ASCII, so only ASCII letters count).
pub fn properties(
    config_data: &BTreeMap<String, String>,
    config_binary_data: &BTreeMap<String, Vec<u8>>,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    cluster_name: &str,
) -> BTreeMap<String, String> {
    let mut props = Props::from([("clusterName".to_string(), cluster_name.to_string())]);
    for source in [labels, annotations, config_data] {
        for (key, value) in source.iter().filter(|(key, _)| is_go_identifier(key)) {
            props.insert(key.clone(), value.clone());
        }
    }
    for (key, value) in config_binary_data.iter().filter(|(key, _)| is_go_identifier(key)) {
        props.insert(key.clone(), text_of(value));
    }
    props
}

const GO_KEYWORDS: [&str; 25] = [
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "fallthrough",
    "for",
    "func",
    "go",
    "goto",
    "if",
    "import",
    "interface",
    "map",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "type",
    "var",
];

fn is_go_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !GO_KEYWORDS.contains(&key)
}

fn text_of(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.push_str(valid);
                return out;
            }
            Err(error) => {
                let (valid, after) = rest.split_at(error.valid_up_to());
                out.push_str(&String::from_utf8_lossy(valid));
                let bad = error.error_len().unwrap_or(after.len());
                out.extend(std::iter::repeat_n('\u{FFFD}', bad));
                rest = &after[bad..];
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Errors

/// A parse or execution error, worded like Go's `template: <name>:<line>[:<col>]: ...` without the
/// name: `template: 1: function "foo" not defined`, `template: 1:2: executing at <.foo>: map has no
/// entry for key "foo"` (columns are 0-based byte offsets, as in Go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    line: usize,
    /// For execution errors: the column and the text of the part that failed.
    at: Option<(usize, String)>,
    message: String,
    unsupported: bool,
}

impl TemplateError {
    /// Whether the template uses a part of text/template this engine deliberately leaves out (Go
    /// might accept it).
    pub fn is_unsupported(&self) -> bool {
        self.unsupported
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            None => write!(f, "template: {}: {}", self.line, self.message),
            Some((col, context)) => {
                write!(
                    f,
                    "template: {}:{col}: executing at <{context}>: {}",
                    self.line, self.message
                )
            }
        }
    }
}

impl std::error::Error for TemplateError {}

/// What went wrong, before it is placed in the template.
#[derive(Debug, Clone)]
struct Fault {
    message: String,
    unsupported: bool,
}

impl Fault {
    fn go(message: impl Into<String>) -> Self {
        Fault {
            message: message.into(),
            unsupported: false,
        }
    }

    fn unsupported(message: impl Into<String>) -> Self {
        Fault {
            message: message.into(),
            unsupported: true,
        }
    }

    fn calling(self, function: &str) -> Self {
        Fault {
            message: format!("error calling {function}: {}", self.message),
            ..self
        }
    }

    fn at(self, text: &str, pos: usize, context: Option<Span>) -> TemplateError {
        let before = &text.as_bytes()[..pos];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let at = context.map(|span| {
            let col = pos - before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            (col, excerpt(&text[span.0..span.1]))
        });
        TemplateError {
            line,
            at,
            message: self.message,
            unsupported: self.unsupported,
        }
    }
}

/// Go shows at most 20 characters of the failing part.
fn excerpt(text: &str) -> String {
    if text.len() > 20 {
        format!("{}...", text.chars().take(20).collect::<String>())
    } else {
        text.to_string()
    }
}

// ------------------------------------------------------------------------------------------------
// Lexer: the token stream of Go's text/template/parse lexer, spaces included (they separate
// arguments), ending with `Eof` or with the first `Error`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kw {
    Block,
    Break,
    Continue,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl Kw {
    fn from_word(word: &str) -> Option<Kw> {
        Some(match word {
            "block" => Kw::Block,
            "break" => Kw::Break,
            "continue" => Kw::Continue,
            "define" => Kw::Define,
            "else" => Kw::Else,
            "end" => Kw::End,
            "if" => Kw::If,
            "nil" => Kw::Nil,
            "range" => Kw::Range,
            "template" => Kw::Template,
            "with" => Kw::With,
            _ => return None,
        })
    }

    fn word(self) -> &'static str {
        match self {
            Kw::Block => "block",
            Kw::Break => "break",
            Kw::Continue => "continue",
            Kw::Define => "define",
            Kw::Else => "else",
            Kw::End => "end",
            Kw::If => "if",
            Kw::Nil => "nil",
            Kw::Range => "range",
            Kw::Template => "template",
            Kw::With => "with",
        }
    }
}

#[derive(Debug, Clone)]
enum Tok {
    Text,
    LeftDelim,
    RightDelim,
    Space,
    Bool(bool),
    /// A printable ASCII character with no other meaning, e.g. `,`.
    Char(char),
    CharConst,
    Complex,
    Number,
    Str,
    RawStr,
    Field,
    Variable,
    Identifier,
    Dot,
    LeftParen,
    RightParen,
    Pipe,
    Assign,
    Declare,
    Keyword(Kw),
    Eof,
    Error(Fault),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

enum Mode {
    Text,
    Action,
    Done,
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    parens: usize,
    tokens: Vec<Token>,
}

fn lex(src: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        src,
        pos: 0,
        parens: 0,
        tokens: Vec::new(),
    };
    let mut mode = Mode::Text;
    loop {
        let step = match mode {
            Mode::Text => lexer.text(),
            Mode::Action => lexer.action(),
            Mode::Done => return lexer.tokens,
        };
        match step {
            Ok(next) => mode = next,
            Err(fault) => {
                lexer.emit(Tok::Error(fault), lexer.pos);
                return lexer.tokens;
            }
        }
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn has_left_trim(s: &str) -> bool {
    s.starts_with('-') && s[1..].starts_with(is_space)
}

/// Whether `s` starts with a right delimiter, and whether that has a trim marker (` -}}`).
fn at_right_delim(s: &str) -> (bool, bool) {
    if s.starts_with(is_space) && s[1..].starts_with("-}}") {
        (true, true)
    } else {
        (s.starts_with("}}"), false)
    }
}

/// Go's `%#U`, e.g. `U+0021 '!'`.
fn go_rune(c: char) -> String {
    format!("U+{:04X} '{c}'", c as u32)
}

impl<'a> Lexer<'a> {
    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek_char(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn emit(&mut self, tok: Tok, start: usize) {
        self.tokens.push(Token {
            tok,
            start,
            end: self.pos,
        });
    }

    fn text(&mut self) -> Result<Mode, Fault> {
        let start = self.pos;
        let Some(offset) = self.rest().find("{{") else {
            self.pos = self.src.len();
            if self.pos > start {
                self.emit(Tok::Text, start);
            }
            self.emit(Tok::Eof, self.pos);
            return Ok(Mode::Done);
        };
        let delim = start + offset;
        self.pos = if has_left_trim(&self.src[delim + 2..]) {
            start + self.src[start..delim].trim_end_matches(is_space).len()
        } else {
            delim
        };
        if self.pos > start {
            self.emit(Tok::Text, start);
        }
        self.left_delim(delim)
    }

    fn left_delim(&mut self, delim: usize) -> Result<Mode, Fault> {
        let mut after = delim + 2;
        if has_left_trim(&self.src[after..]) {
            after += 2;
        }
        if self.src[after..].starts_with("/*") {
            self.pos = after;
            return self.comment();
        }
        self.pos = delim + 2;
        self.emit(Tok::LeftDelim, delim);
        self.pos = after;
        self.parens = 0;
        Ok(Mode::Action)
    }

    fn comment(&mut self) -> Result<Mode, Fault> {
        let body = self.pos + 2;
        let close = self.src[body..]
            .find("*/")
            .ok_or_else(|| Fault::go("unclosed comment"))?;
        self.pos = body + close + 2;
        match at_right_delim(self.rest()) {
            (false, _) => Err(Fault::go("comment ends before closing delimiter")),
            (true, trim) => {
                self.pos += if trim { 4 } else { 2 };
                if trim {
                    self.skip_spaces();
                }
                Ok(Mode::Text)
            }
        }
    }

    fn skip_spaces(&mut self) {
        self.pos = self.src.len() - self.rest().trim_start_matches(is_space).len();
    }

    fn right_delim(&mut self) -> Mode {
        let (_, trim) = at_right_delim(self.rest());
        if trim {
            self.pos += 2;
        }
        let start = self.pos;
        self.pos += 2;
        self.emit(Tok::RightDelim, start);
        if trim {
            self.skip_spaces();
        }
        Mode::Text
    }

    fn action(&mut self) -> Result<Mode, Fault> {
        if at_right_delim(self.rest()).0 {
            return if self.parens == 0 {
                Ok(self.right_delim())
            } else {
                Err(Fault::go("unclosed left paren"))
            };
        }
        let start = self.pos;
        let c = self.peek_char().ok_or_else(|| Fault::go("unclosed action"))?;
        if is_space(c) {
            return Ok(self.space());
        }
        self.pos += c.len_utf8();
        let tok = match c {
            '=' => Tok::Assign,
            ':' if self.rest().starts_with('=') => {
                self.pos += 1;
                Tok::Declare
            }
            ':' => return Err(Fault::go("expected :=")),
            '|' => Tok::Pipe,
            '"' => self.quoted('"', Tok::Str, "unterminated quoted string")?,
            '\'' => self.quoted('\'', Tok::CharConst, "unterminated character constant")?,
            '`' => self.raw_quoted()?,
            '$' => self.variable()?,
            '.' if self.rest().bytes().next().is_some_and(|b| !b.is_ascii_digit()) => self.field()?,
            '.' | '+' | '-' | '0'..='9' => {
                self.pos = start;
                self.number()?
            }
            '(' => {
                self.parens += 1;
                Tok::LeftParen
            }
            ')' if self.parens == 0 => return Err(Fault::go("unexpected right paren")),
            ')' => {
                self.parens -= 1;
                Tok::RightParen
            }
            c if c == '_' || c.is_ascii_alphanumeric() => self.identifier(start)?,
            c if c.is_ascii_graphic() => Tok::Char(c),
            c if c.is_alphanumeric() => return Err(non_ascii_identifier()),
            c => return Err(Fault::go(format!("unrecognized character in action: {}", go_rune(c)))),
        };
        self.emit(tok, start);
        Ok(Mode::Action)
    }

    /// A run of spaces; its last space belongs to the right delimiter if that is ` -}}`.
    fn space(&mut self) -> Mode {
        let start = self.pos;
        self.skip_spaces();
        let last = self.pos - 1;
        if at_right_delim(&self.src[last..]) == (true, true) {
            self.pos = last;
            if last == start {
                return self.right_delim();
            }
        }
        self.emit(Tok::Space, start);
        Mode::Action
    }

    /// The rest of an identifier, field or variable name, which must end at a terminator.
    fn finish_word(&mut self) -> Result<(), Fault> {
        let rest = self.rest();
        self.pos += rest
            .find(|c: char| c != '_' && !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        match self.peek_char() {
            Some(c) if c.is_alphanumeric() => Err(non_ascii_identifier()),
            Some(c) if !self.at_terminator() => Err(Fault::go(format!("bad character {}", go_rune(c)))),
            _ => Ok(()),
        }
    }

    fn at_terminator(&self) -> bool {
        let rest = self.rest();
        rest.chars().next().is_none_or(|c| is_space(c) || ".,|:)(".contains(c)) || rest.starts_with("}}")
    }

    fn identifier(&mut self, start: usize) -> Result<Tok, Fault> {
        self.finish_word()?;
        Ok(match &self.src[start..self.pos] {
            "true" => Tok::Bool(true),
            "false" => Tok::Bool(false),
            word => Kw::from_word(word).map_or(Tok::Identifier, Tok::Keyword),
        })
    }

    fn field(&mut self) -> Result<Tok, Fault> {
        if self.at_terminator() {
            return Ok(Tok::Dot);
        }
        self.finish_word()?;
        Ok(Tok::Field)
    }

    fn variable(&mut self) -> Result<Tok, Fault> {
        if !self.at_terminator() {
            self.finish_word()?;
        }
        Ok(Tok::Variable)
    }

    fn quoted(&mut self, quote: char, tok: Tok, unterminated: &str) -> Result<Tok, Fault> {
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            // An escape covers the next character, but not a newline.
            let escape_ok = c != '\\' || chars.next().is_some_and(|(_, escaped)| escaped != '\n');
            if c == '\n' || !escape_ok {
                break;
            }
            if c == quote {
                self.pos += i + 1;
                return Ok(tok);
            }
        }
        Err(Fault::go(unterminated))
    }

    fn raw_quoted(&mut self) -> Result<Tok, Fault> {
        let close = self
            .rest()
            .find('`')
            .ok_or_else(|| Fault::go("unterminated raw quoted string"))?;
        self.pos += close + 1;
        Ok(Tok::RawStr)
    }

    fn number(&mut self) -> Result<Tok, Fault> {
        let start = self.pos;
        let bad = |lexer: &Self| Fault::go(format!("bad number syntax: {:?}", &lexer.src[start..lexer.pos]));
        if !self.scan_number() {
            return Err(bad(self));
        }
        if !self.rest().starts_with(['+', '-']) {
            return Ok(Tok::Number);
        }
        if !self.scan_number() || !self.src[..self.pos].ends_with('i') {
            return Err(bad(self));
        }
        Ok(Tok::Complex)
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.peek_char() {
            Some(c) if valid.contains(c) => {
                self.pos += c.len_utf8();
                true
            }
            _ => false,
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    /// Go's number scanner: it accepts more than valid numbers, the parser judges the text.
    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let (mut digits, mut exponent) = ("0123456789_", "eE");
        if self.accept("0") {
            if self.accept("xX") {
                (digits, exponent) = ("0123456789abcdefABCDEF_", "pP");
            } else if self.accept("oO") {
                (digits, exponent) = ("01234567_", "");
            } else if self.accept("bB") {
                (digits, exponent) = ("01_", "");
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if self.accept(exponent) {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        match self.peek_char() {
            Some(c) if c == '_' || c.is_alphanumeric() => {
                self.pos += c.len_utf8();
                false
            }
            _ => true,
        }
    }
}

fn non_ascii_identifier() -> Fault {
    Fault::unsupported("identifiers with non-ASCII characters are not supported")
}

// ------------------------------------------------------------------------------------------------
// Syntax tree

/// Byte offsets `start..end` in the template text.
#[derive(Debug, Clone, Copy)]
struct Span(usize, usize);

#[derive(Debug)]
enum Node {
    Text(String),
    Action(Pipeline),
    If(Box<Control>),
    With(Box<Control>),
}

/// An `if` or `with` block; `else if` and `else with` are an else list holding one block.
#[derive(Debug)]
struct Control {
    pipe: Pipeline,
    list: Vec<Node>,
    else_list: Vec<Node>,
}

#[derive(Debug)]
struct Pipeline {
    span: Span,
    decl: Vec<String>,
    is_assign: bool,
    first: Command,
    rest: Vec<Command>,
}

#[derive(Debug)]
struct Command {
    span: Span,
    head: Arg,
    args: Vec<Arg>,
}

#[derive(Debug)]
struct Arg {
    span: Span,
    kind: ArgKind,
}

#[derive(Debug)]
enum ArgKind {
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
enum Number {
    Int(i64),
    Float(f64),
    /// Fits Go's uint64 but not its int: an error only if it is evaluated, as in Go.
    TooBig,
}

#[derive(Debug)]
struct Function {
    name: &'static str,
    callee: Callee,
    arity: Arity,
}

#[derive(Debug, Clone, Copy)]
enum Callee {
    And,
    Or,
    Eager(Builtin),
}

#[derive(Debug, Clone, Copy)]
enum Builtin {
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
enum Arity {
    Exactly(usize),
    AtLeast(usize),
}

const fn function(name: &'static str, callee: Callee, arity: Arity) -> Function {
    Function { name, callee, arity }
}

static FUNCTIONS: [Function; 18] = [
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

// ------------------------------------------------------------------------------------------------
// Parser: Go's text/template/parse, token for token, so that exactly the same texts parse.

type Parsed<T> = Result<T, TemplateError>;

/// What one step at list level produced: a node, or the `{{end}}`/`{{else}}` closing a list.
enum Item {
    Node(Node),
    End,
    Else,
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    next: usize,
    /// Variables in scope, as Go checks them at parse time.
    vars: Vec<String>,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
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

    fn root(&mut self) -> Parsed<Vec<Node>> {
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

// ------------------------------------------------------------------------------------------------
// Values

/// A Go value as the template sees it: strings from the map, constants, function results.
#[derive(Debug, Clone)]
enum Value<'p> {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A byte of a string, from `index`: Go's `uint8`.
    Byte(u8),
    Map(&'p Props),
}

impl Value<'_> {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Bool(_) => "bool",
            Value::Byte(_) => "uint8",
            Value::Map(_) => "map[string]string",
        }
    }

    fn truth(&self) -> bool {
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

/// `%v`, which is also how an action prints its value.
fn display(value: &Value) -> String {
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

/// Go's `%v` of a float64: the shortest digits that read back, in `%e` form when the exponent is
/// below -4 or at least 6 (with a sign and two digits or more), otherwise in `%f` form.
fn go_float(f: f64) -> String {
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

// ------------------------------------------------------------------------------------------------
// Builtin functions (the arity is checked before they run)

fn apply<'p>(builtin: Builtin, values: &[Value<'p>]) -> Result<Value<'p>, Fault> {
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

fn html_escape(s: &str) -> String {
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

fn js_escape(s: &str) -> Result<String, Fault> {
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
fn query_escape(s: &str) -> String {
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
// fmt: Sprint, Sprintln and the supported part of Sprintf

/// `fmt.Sprint`: a space between two operands when neither is a string.
fn sprint(values: &[Value]) -> String {
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

fn sprintln(values: &[Value]) -> String {
    let words: Vec<String> = values.iter().map(display).collect();
    format!("{}\n", words.join(" "))
}

/// Width and `-` flag of a printf directive.
#[derive(Debug, Clone, Copy, Default)]
struct Spec {
    width: usize,
    left: bool,
}

fn sprintf(format: &str, args: &[Value]) -> Result<String, Fault> {
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
    use proptest::prelude::*;
    use serde_json::json;

    fn map(pairs: &[(&str, &str)]) -> Props {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    }

    fn wec() -> Props {
        map(&[("clusterName", "cluster1"), ("region", "east"), ("n", "3")])
    }

    #[test]
    fn expands_like_go() {
        for (template, want) in [
            ("{{.clusterName}}", "cluster1"),
            ("a {{- .region -}} b {{/* note */}}c", "aeastb c"),
            ("{{.}}", "map[clusterName:cluster1 n:3 region:east]"),
            ("{{$r := .region}}{{$r = print $r \"!\"}}{{$r}}/{{$.n}}", "east!/3"),
            (
                "{{if eq .region \"west\"}}w{{else if eq .region \"east\"}}e{{end}}",
                "e",
            ),
            ("{{with .region}}{{.}}{{else}}none{{end}}", "east"),
            (
                "{{.region | printf \"%s-%5d|%-5v|%q\" \"x\" 7 true}}",
                "x-    7|true |\"east\"",
            ),
            (
                "{{len .region}} {{index .region 0}} {{slice .region 1 3}} {{index . \"zone\"}}|",
                "4 101 as |",
            ),
            (
                "{{and 1 \"\" 2}}|{{or 0 \"x\"}}|{{not .region}}|{{or .region .zone}}",
                "|x|false|east",
            ),
            ("{{print 1 2 \"a\" 3}}{{println}}", "1 2a3\n"),
            ("{{1e6}} {{0.5}} {{-0.0}} {{0x1F}} {{017}}", "1e+06 0.5 -0 31 15"),
            (
                "{{html \"<a&b>\"}} {{urlquery \"a b/c\"}} {{js \"a'b<\"}}",
                "&lt;a&amp;b&gt; a+b%2Fc a\\'b\\u003C",
            ),
            (
                "{{printf \"%d\" \"s\"}} {{printf \"%s\"}} {{printf \"x\" 1}}",
                "%!d(string=s) %!s(MISSING) x%!(EXTRA int=1)",
            ),
        ] {
            assert_eq!(
                expand(template, &wec()).map_err(|error| error.to_string()),
                Ok(want.to_string()),
                "{template}"
            );
        }
    }

    #[test]
    fn errors_read_like_go() {
        for (template, want) in [
            (
                "{{.zone}}",
                r#"template: 1:2: executing at <.zone>: map has no entry for key "zone""#,
            ),
            (
                "x\n {{.region.x}}",
                "template: 2:3: executing at <.region.x>: can't evaluate field x in type string",
            ),
            (
                "{{len 1}}",
                "template: 1:2: executing at <len 1>: error calling len: len of type int",
            ),
            ("{{nope}}", r#"template: 1: function "nope" not defined"#),
            ("{{.region", "template: 1: unclosed action"),
            ("{{if .region}}", "template: 1: unexpected EOF"),
            (
                "{{range .}}{{end}}",
                r#"template: 1: unsupported template action "range""#,
            ),
        ] {
            assert_eq!(
                expand(template, &wec()).map_err(|error| error.to_string()),
                Err(want.to_string())
            );
        }
    }

    #[test]
    fn refuses_what_it_does_not_implement() {
        let deep_parens = format!("{{{{{}1{}}}}}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        let deep_ifs = format!(
            "{}{}",
            "{{if 1}}".repeat(MAX_DEPTH + 1),
            "{{end}}".repeat(MAX_DEPTH + 1)
        );
        let mut templates = vec![deep_parens.as_str(), deep_ifs.as_str()];
        templates.extend([
            "{{range .}}{{end}}",
            "{{define \"x\"}}{{end}}",
            "{{template \"x\"}}",
            "{{block \"x\" .}}{{end}}",
            "{{break}}",
            "{{print nil}}",
            "{{call 1}}",
            "{{'a'}}",
            "{{1i}}",
            "{{1_000}}",
            "{{0x1p4}}",
            "{{\"\\xff\"}}",
            "{{printf \"%x\" 1}}",
            "{{printf \"%05d\" 1}}",
            "{{printf \"%.2f\" 1.5}}",
            "{{printf \"%q\" \"é\"}}",
            "{{js \"é\"}}",
            "{{slice \"é\" 1}}",
            "{{.é}}",
        ]);
        for template in templates {
            let error = expand(template, &wec()).expect_err(template);
            assert!(error.is_unsupported(), "{template}: {error}");
        }
    }

    #[test]
    fn has_template_looks_for_the_left_delimiter() {
        assert!(has_template("a {{b"));
        assert!(!has_template("a {b}} }}"));
        assert!(!has_template(""));
    }

    #[test]
    fn contains_template_looks_at_string_leaves_only() {
        assert!(contains_template(&json!({"a": [1, {"b": "x {{.y}}"}]})));
        assert!(!contains_template(&json!({"{{.key}}": "plain", "n": 1, "l": ["a"]})));
    }

    #[test]
    fn expand_object_expands_string_leaves_only() {
        let mut object = json!({
            "metadata": {"name": "app-{{.clusterName}}", "labels": {"{{.region}}": "{{.region}}"}},
            "spec": {"replicas": 3, "paused": false, "args": ["{{.n}}", "plain {x}"], "note": null},
        });
        expand_object(&mut object, &wec()).unwrap();
        let want = json!({
            "metadata": {"name": "app-cluster1", "labels": {"{{.region}}": "east"}},
            "spec": {"replicas": 3, "paused": false, "args": ["3", "plain {x}"], "note": null},
        });
        assert_eq!(object, want);
    }

    #[test]
    fn expand_object_names_each_failed_leaf_and_leaves_it_as_upstream_does() {
        let mut object = json!({"spec": {
            "bad": "{{if}}",
            "containers": [{"env": [{"value": "ok"}, {"value": "a-{{.zone}}-b"}]}],
        }});
        let error = expand_object(&mut object, &wec()).unwrap_err();
        assert_eq!(
            error,
            "spec.bad: template: 1: missing value for if; spec.containers[0].env[1].value: template: 1:4: \
             executing at <.zone>: map has no entry for key \"zone\""
        );
        assert_eq!(
            object["spec"]["bad"], "",
            "a template that does not parse becomes empty"
        );
        assert_eq!(
            object["spec"]["containers"][0]["env"][1]["value"], "a-",
            "a failed run keeps its output"
        );
    }

    #[test]
    fn properties_follow_upstream_precedence() {
        let data = map(&[("fromData", "data"), ("both", "data"), ("shared", "data")]);
        let binary = BTreeMap::from([("both".to_string(), b"binary".to_vec())]);
        let annotations = map(&[
            ("shared", "annotation"),
            ("clusterName", "annotation"),
            ("zone", "annotation"),
        ]);
        let labels = map(&[("zone", "label"), ("tier", "label")]);
        let props = properties(&data, &binary, &annotations, &labels, "cluster1");
        let want = map(&[
            ("fromData", "data"),
            ("both", "binary"),
            ("shared", "data"),
            ("clusterName", "annotation"),
            ("zone", "annotation"),
            ("tier", "label"),
        ]);
        assert_eq!(props, want);
        let labels = map(&[("clusterName", "label")]);
        assert_eq!(
            properties(&Props::new(), &BTreeMap::new(), &Props::new(), &labels, "c1")["clusterName"],
            "label"
        );
        assert_eq!(
            properties(&Props::new(), &BTreeMap::new(), &Props::new(), &Props::new(), "c1"),
            map(&[("clusterName", "c1")])
        );
    }

    #[test]
    fn properties_take_only_go_identifiers() {
        let labels = map(&[
            ("app.kubernetes.io/name", "x"),
            ("x-y", "x"),
            ("1a", "x"),
            ("type", "x"),
            ("", "x"),
            ("_ok", "y"),
            ("ok2", "y"),
        ]);
        let binary = BTreeMap::from([("bad.key".to_string(), b"x".to_vec())]);
        let props = properties(&Props::new(), &binary, &Props::new(), &labels, "c1");
        assert_eq!(props, map(&[("_ok", "y"), ("ok2", "y"), ("clusterName", "c1")]));
    }

    #[test]
    fn binary_values_are_text_with_each_bad_byte_replaced() {
        assert_eq!(text_of("é".as_bytes()), "é");
        assert_eq!(text_of(b"a\xF0\x9F\x98b\xFF"), "a\u{FFFD}\u{FFFD}\u{FFFD}b\u{FFFD}");
        assert_eq!(text_of(b"\xE2\x82"), "\u{FFFD}\u{FFFD}");
    }

    fn identifier() -> impl Strategy<Value = String> {
        "[A-Za-z_][A-Za-z0-9_]{0,15}"
    }

    /// Text that looks like templates, to reach deep into the lexer and parser.
    fn template_like() -> impl Strategy<Value = String> {
        const PIECES: &[&str] = &[
            "{{",
            "}}",
            "{{-",
            "-}}",
            " ",
            "\n",
            ".",
            ".region",
            "$",
            "$x",
            ":=",
            "=",
            "|",
            "(",
            ")",
            "\"",
            "`",
            "'",
            "/*",
            "*/",
            "if",
            "else",
            "end",
            "with",
            "range",
            "print",
            "printf",
            "len",
            "index",
            "slice",
            "eq",
            "lt",
            "and",
            "or",
            "not",
            "html",
            "js",
            "urlquery",
            "1",
            "-1.5e3",
            "0x",
            "\"%s%d%q%-3v%\"",
            "true",
            "nil",
            ",",
            "é",
            "\\",
            "%",
        ];
        prop_oneof![
            proptest::collection::vec(proptest::sample::select(PIECES), 0..24).prop_map(|pieces| pieces.concat()),
            any::<String>().prop_map(|text| format!("{{{{{text}}}}}")),
        ]
    }

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

    #[test]
    fn an_objects_templates_print_at_most_two_mib_together() {
        let leaf = doubling(16, "{{$x}}");
        // Four leaves print 2.5 MiB; the fifth is not run.
        let mut object = json!({"data": {"a": leaf, "b": leaf, "c": leaf, "d": leaf, "e": leaf}});
        let error = expand_object(&mut object, &wec()).unwrap_err();
        assert_eq!(
            error,
            "data.e: not expanded: the object's templates print more than 2 MiB in all"
        );
        assert_eq!(object["data"]["d"].as_str().unwrap().len(), 10 << 16);
        assert_eq!(object["data"]["e"], json!(leaf), "left as it was");
    }

    proptest! {
        #[test]
        fn text_without_delimiters_is_left_alone(text in prop_oneof![any::<String>(), "[{} a-z.$|-]{0,30}"]) {
            prop_assume!(!text.contains("{{"));
            prop_assert!(!has_template(&text));
            let mut value = Json::String(text.clone());
            prop_assert_eq!(expand_object(&mut value, &wec()), Ok(()));
            prop_assert_eq!(value, Json::String(text.clone()));
            prop_assert_eq!(expand(&text, &wec()), Ok(text));
        }

        #[test]
        fn a_field_yields_its_value(key in identifier(), value in any::<String>()) {
            let props = Props::from([(key.clone(), value.clone())]);
            for template in [
                format!("{{{{.{key}}}}}"),
                format!("{{{{- .{key} -}}}}"),
                format!("{{{{$.{key} | printf \"%s\"}}}}"),
                format!("{{{{index . {key:?}}}}}"),
            ] {
                prop_assert_eq!(expand(&template, &props), Ok(value.clone()), "{}", template);
            }
        }

        #[test]
        fn a_missing_key_is_an_error(key in identifier(), value in any::<String>()) {
            let props = Props::from([(format!("{key}_"), value)]);
            let error = expand(&format!("{{{{.{key}}}}}"), &props).unwrap_err();
            let want = format!("map has no entry for key {key:?}");
            prop_assert!(error.to_string().contains(&want), "{}", error);
        }

        #[test]
        fn expansion_never_panics(text in template_like()) {
            let _ = expand(&text, &wec());
        }
    }
}
