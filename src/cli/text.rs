//! Text from the cluster or an input file reaches a terminal only escaped: anyone who can write an Event, a
//! Service name in a file, or a foreign ConfigMap could otherwise send escape sequences (clear the screen, write
//! the clipboard with OSC 52, retitle the window), reorder what a reader sees with bidirectional overrides, or
//! start lines of their own (`== Summary`, `all is well`) with a line break. Every line the commands print goes
//! through [`safe`] whole: control characters (C0, DEL, C1: LF, CR and NEL too), line and paragraph separators and
//! invisible formatting characters become `\u{..}`. A line break is the program's only: one [`print`] is one line,
//! and only documents the program serialised itself ([`print_document`]: JSON and YAML, which escape line breaks
//! inside their strings, and clap's answers) are printed line by line.

pub use crate::escape::safe;

/// Prints `line` to standard output as one line, escaped: a line break in it is shown, never obeyed.
pub fn print(line: &str) {
    println!("{}", safe(line));
}

/// Prints `line` to standard error as one line, escaped.
pub fn eprint(line: &str) {
    eprintln!("{}", safe(line));
}

/// Prints a document the program serialised itself (see [`json`] and [`yaml`]), one line per line break of its own.
pub fn print_document(text: &str) {
    for line in text.trim_end_matches('\n').split('\n') {
        print(line);
    }
}

/// [`print_document`] to standard error.
pub fn eprint_document(text: &str) {
    for line in text.trim_end_matches('\n').split('\n') {
        eprint(line);
    }
}

/// `value` as pretty JSON whose strings hold no raw line or paragraph separator, control or invisible character: each
/// is a JSON escape (`\u2028`), so the text is still JSON and still the same value, and has no line break but its own.
pub fn json(value: &impl serde::Serialize) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        // serde_json escapes C0 itself; the structure is ASCII, so anything else dangerous is inside a string.
        if crate::escape::is_dangerous(c) && c != '\n' {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                escaped.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            escaped.push(c);
        }
    }
    escaped
}

/// `value` as YAML with every string on one line: a line break inside a value is a double-quoted `\n`, never a
/// block scalar's own lines.
pub fn yaml(value: &impl serde::Serialize) -> String {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.prefer_block_scalars = false;
    serde_saphyr::to_string_with_options(value, options).unwrap_or_default()
}

/// `println!`, with the line escaped (see [`safe`]).
macro_rules! say {
    () => { println!() };
    ($($arg:tt)*) => { $crate::cli::text::print(&format!($($arg)*)) };
}
pub(crate) use say;

/// `eprintln!`, with the line escaped (see [`safe`]).
macro_rules! shout {
    ($($arg:tt)*) => { $crate::cli::text::eprint(&format!($($arg)*)) };
}
pub(crate) use shout;
