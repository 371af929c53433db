//! What the binary writes, the way command-line tools write it.
//!
//! - **A closed stdout ends the command quietly.** Every line goes through [`outln!`],
//!   which returns the write's error instead of panicking as `println!` does; `main` sees
//!   a broken pipe in the error chain and exits with status [`BROKEN_PIPE_EXIT`] (141, what
//!   a shell reports for a process ended by `SIGPIPE`, as `cat` or `seq` would be), saying
//!   nothing. So `hopper jobs list --json | head -1` and `hopper stats --watch | head` end
//!   like any Unix tool; a script under `set -o pipefail` sees the same 141 it sees for
//!   `seq 1000 | head -1`.
//! - **Colour only on a terminal**: log lines on stderr are coloured when stderr is a
//!   terminal and `NO_COLOR` is unset or empty (<https://no-color.org>).
//! - **Stored text is printed inert**: what others wrote (a handler's error, a log line, a
//!   node's name) goes through [`printable`] in tables and text output, so it cannot move
//!   the cursor, recolour or retitle an operator's terminal, or break a table's rows.
//! - **Errors as JSON under `--json`**: `{"error": {"code": …, "message": …}}` on stdout
//!   (see [`error_json`]), so a script reading stdout always gets JSON.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};

/// The exit status after stdout was closed by the reader: 128 + `SIGPIPE` (13).
pub const BROKEN_PIPE_EXIT: u8 = 141;

/// Writes one formatted line to stdout, returning the error (`?`) instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))?
    };
}

/// Writes to stdout without a newline, returning the error (`?`).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))?
    };
}

pub(crate) use {out, outln};

/// Writes `args` to stdout and flushes it, so a closed pipe is seen at once.
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(args)?;
    stdout.flush()
}

/// `text` with its control characters (escape sequences, newlines, tabs, C1 codes) and
/// bidirectional overrides written as Rust escapes (`\u{1b}`, `\n`, `\u{202e}`); unchanged,
/// and not copied, when it has none. JSON output needs none of this: its strings escape
/// control characters themselves.
pub fn printable(text: &str) -> Cow<'_, str> {
    let inert = |c: char| !(c.is_control() || is_bidi_control(c));
    if text.chars().all(inert) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if inert(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    Cow::Owned(out)
}

/// The characters that reorder how the text around them is shown (embeddings, overrides,
/// isolates): printed raw, they make a line read other than what it holds.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// True when `e` comes from writing to a pipe whose reader is gone.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Whether log lines on stderr may carry ANSI colours: a terminal, and no `NO_COLOR`.
pub fn colour_stderr() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

/// A refusal of what the user gave (a flag's value, an id, a file of arguments), marked so
/// by the command that parsed it ([`invalid_input`]): `--json` answers it `invalid_input`.
/// It says what its cause says, and has its cause's causes.
#[derive(Debug)]
pub struct InvalidInput(anyhow::Error);

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for InvalidInput {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `e`, the refusal of the user's input, marked as such ([`InvalidInput`]).
pub fn invalid_input(e: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(InvalidInput(e))
}

/// The JSON error object of `--json`: a stable `code` (the HTTP API's codes where one
/// applies: `invalid_input`, `not_found`, `conflict`, `unavailable`; else `error`) and the
/// one-line `message`. Every refusal of the user's input is `invalid_input`, whether hopper
/// refused it or the command's own parsing ([`InvalidInput`]).
pub fn error_json(e: &anyhow::Error, message: &str) -> serde_json::Value {
    if e.chain().any(|cause| cause.is::<InvalidInput>()) {
        return serde_json::json!({ "error": { "code": "invalid_input", "message": message } });
    }
    let code = e
        .chain()
        .find_map(|cause| cause.downcast_ref::<hopper::Error>())
        .map_or("error", |e| match e {
            hopper::Error::InvalidInput(_) | hopper::Error::Args(_) => "invalid_input",
            hopper::Error::NotFound(_) => "not_found",
            hopper::Error::Conflict(_) => "conflict",
            hopper::Error::Database(_) | hopper::Error::Shutdown => "unavailable",
            hopper::Error::Schema(_) => "schema",
            hopper::Error::Refused(_) => "refused",
            _ => "error",
        });
    serde_json::json!({ "error": { "code": code, "message": message } })
}

/// The error and its causes on one line, each said once
/// ([`hopper_core::error::with_causes`]), without the bare `database:` prefix of an inner
/// cause (the message before it already says what could not be reached).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut text = hopper_core::error::with_causes(e.as_ref());
    while let Some(at) = text.find(": database: ") {
        text.replace_range(at..at + ": database: ".len(), ": ");
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_says_each_cause_once_without_inner_database_prefixes() {
        let e = anyhow::Error::new(hopper::Error::database(std::io::Error::other(
            "connection refused",
        )))
        .context("reading the queues")
        .context("hopper stats");
        assert_eq!(
            one_line(&e),
            "hopper stats: reading the queues: connection refused"
        );
        let e = anyhow::anyhow!("line one\n  line two").context("hopper: reading the queues");
        assert_eq!(
            one_line(&e),
            "hopper: reading the queues: line one line two"
        );
        let e = anyhow::anyhow!("the schema is newer").context("the schema is newer");
        assert_eq!(one_line(&e), "the schema is newer");
    }

    #[test]
    fn control_characters_and_bidi_overrides_are_printed_as_escapes() {
        assert!(matches!(printable("smtp said no: café"), Cow::Borrowed(_)));
        assert_eq!(
            printable("\u{1b}]0;owned\u{7}\u{1b}[2Jline\nnext\ttab\u{85}"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2Jline\\nnext\\ttab\\u{85}"
        );
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
    }
}
