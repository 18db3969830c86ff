//! Text that others wrote, made safe to show a person.
//!
//! A plugin's messages, a config's names, a registry's or an API server's
//! replies and a metrics page all reach an operator's terminal through the
//! CLI's tables and the engine's log lines. A control character there is an
//! instruction to the terminal: `ESC [2K` and a carriage return erase what
//! was printed and write something else in its place ("NETWORK n ready" for
//! a network that failed), a newline forges a line of its own. Every such
//! character is shown as an escape (`\u{1b}`, `\n`) instead, so the operator
//! sees what was there and the terminal does nothing. JSON output escapes
//! on its own and does not go through here.

use std::borrow::Cow;
use std::fmt;

/// Whether `c` would act on a terminal or mislead a reader rather than show
/// as itself: C0 and C1 controls and DEL, and the Unicode marks that
/// reorder or hide the text around them (bidirectional overrides and
/// isolates, as in "Trojan Source").
fn acts(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every character that [`acts`] escaped; borrowed when there
/// is none (the common case costs a scan).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if acts(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Formats as [`printable`] of its text: `format!("{}", Shown(&name))`.
pub struct Shown<'a>(pub &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&printable(self.0))
    }
}

/// [`printable`] of anything displayed: for messages put together from
/// pieces, some of them others' (an error naming a registry's reply).
pub fn shown(value: impl fmt::Display) -> String {
    let text = value.to_string();
    match printable(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

/// `value` as pretty JSON for a terminal: serde_json escapes C0 controls,
/// quotes and backslashes; this also escapes DEL, C1 controls and the
/// reordering marks (`\u009b`), which JSON allows raw. The text decodes to
/// the same strings.
pub fn json_pretty(value: &impl serde::Serialize) -> Result<String, String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Quiet::default());
    value.serialize(&mut ser).map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

/// serde_json's pretty formatter with [`acts`] characters escaped too.
#[derive(Default)]
struct Quiet(serde_json::ser::PrettyFormatter<'static>);

impl serde_json::ser::Formatter for Quiet {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| acts(*c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_shown_not_obeyed() {
        assert!(matches!(printable("eth0 10.0.0.2/24 ü"), Cow::Borrowed(_)));
        assert_eq!(
            printable("x\u{1b}[2K\rNETWORK n  ready\nok\t\u{7f}\u{9b}"),
            "x\\u{1b}[2K\\rNETWORK n  ready\\nok\\t\\u{7f}\\u{9b}"
        );
        // Reordering marks, which make text read other than it is.
        assert_eq!(printable("a\u{202e}b\u{2066}"), "a\\u{202e}b\\u{2066}");
        assert_eq!(format!("[{:<6}]", Shown("a\u{7}")), "[a\\u{7}]");
        assert_eq!(format!("[{:<4}]", Shown("ab")), "[ab  ]");
        assert_eq!(shown(format_args!("{}!", "\u{1b}")), "\\u{1b}!");
    }

    #[test]
    fn json_for_a_terminal_escapes_what_json_allows_raw() {
        let value = serde_json::json!({"m": "a\u{1b}b\u{9b}c\u{7f}\u{202e}ü😀"});
        let text = json_pretty(&value).unwrap();
        assert_eq!(
            text,
            "{\n  \"m\": \"a\\u001bb\\u009bc\\u007f\\u202eü😀\"\n}"
        );
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }
}
