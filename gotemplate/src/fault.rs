//! What went wrong in a template, and where: Go's wording for parse and execution errors.

/// Byte offsets `start..end` in the template text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span(pub(crate) usize, pub(crate) usize);

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

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
pub(crate) struct Fault {
    message: String,
    unsupported: bool,
}

impl Fault {
    pub(crate) fn go(message: impl Into<String>) -> Self {
        Fault {
            message: message.into(),
            unsupported: false,
        }
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Fault {
            message: message.into(),
            unsupported: true,
        }
    }

    pub(crate) fn calling(self, function: &str) -> Self {
        Fault {
            message: format!("error calling {function}: {}", self.message),
            ..self
        }
    }

    pub(crate) fn at(self, text: &str, pos: usize, context: Option<Span>) -> TemplateError {
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
