//! The lexer: the token stream of Go's text/template/parse lexer, spaces included (they separate
//! arguments), ending with `Eof` or with the first `Error`.

use crate::fault::Fault;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kw {
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

    pub(crate) fn word(self) -> &'static str {
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
pub(crate) enum Tok {
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
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) start: usize,
    pub(crate) end: usize,
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

pub(crate) fn lex(src: &str) -> Vec<Token> {
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
