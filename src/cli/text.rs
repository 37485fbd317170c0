//! Text from the cluster or an input file reaches a terminal only escaped: anyone who can write an Event, a
//! Service name in a file, or a foreign ConfigMap could otherwise send escape sequences (clear the screen, write
//! the clipboard with OSC 52, retitle the window) or reorder what a reader sees with bidirectional overrides. Every
//! line the commands print goes through [`safe`]: control characters (C0, DEL, C1) and invisible formatting
//! characters become `\u{..}`.

pub use crate::escape::safe;

/// Prints each line of `text` to standard output, escaped.
pub fn print(text: &str) {
    for line in text.lines() {
        println!("{}", safe(line));
    }
    if text.is_empty() {
        println!();
    }
}

/// Prints each line of `text` to standard error, escaped.
pub fn eprint(text: &str) {
    for line in text.lines() {
        eprintln!("{}", safe(line));
    }
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
