//! Text from the cluster or an input file reaches a terminal or a log only escaped: anyone who can write an Event,
//! a Service name in a file, or a foreign ConfigMap could otherwise send escape sequences (clear the screen, write
//! the clipboard with OSC 52, retitle the window) or reorder what a reader sees with bidirectional overrides.
//! [`safe`] writes control characters (C0, DEL, C1, so LF, CR and NEL too) and invisible formatting characters, the
//! line and paragraph separators among them, as `\u{..}`: text from the cluster never starts a line of its own.
//! Shared by the CLI, the controller and the node agent.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether printing `c` as is could do more than show a glyph.
fn dangerous(c: char) -> bool {
    c.is_control()
        || matches!(c,
            // Zero-width and bidirectional marks, embeddings, overrides and isolates; word joiner; BOM.
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
            // Line and paragraph separators, which some terminals and viewers break lines at.
            | '\u{2028}' | '\u{2029}'
            // Interlinear annotation and object replacement markers; language tags.
            | '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e007f}')
}

/// Whether `c` is one [`safe`] escapes.
pub fn is_dangerous(c: char) -> bool {
    dangerous(c)
}

/// `text` with every dangerous character written as `\u{..}`; borrowed when there is none.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(dangerous) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if dangerous(c) {
            let _ = write!(escaped, "\\u{{{:x}}}", u32::from(c));
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_dangerous_is_what_safe_escapes() {
        for c in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}', '\u{2028}', '\u{e0001}'] {
            assert!(is_dangerous(c), "U+{:04X}", u32::from(c));
        }
        for c in ['a', ' ', '—', 'ü'] {
            assert!(!is_dangerous(c), "{c}");
        }
    }

    #[test]
    fn escape_sequences_and_invisible_reordering_are_shown_not_obeyed() {
        let forged = "\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}]0;title\u{7}\u{1b}[2J\u{1b}[HPUBLISHED OK\r\u{9b}31m";
        let shown = safe(forged);
        assert!(!shown.chars().any(dangerous), "{shown}");
        assert_eq!(
            shown,
            "\\u{1b}]52;c;cGF5bG9hZA==\\u{7}\\u{1b}]0;title\\u{7}\\u{1b}[2J\\u{1b}[HPUBLISHED OK\\u{d}\\u{9b}31m"
        );
        assert_eq!(safe("evil\u{202e}txt.exe\u{feff}"), "evil\\u{202e}txt.exe\\u{feff}");
        assert_eq!(safe("tab\there\nnext"), "tab\\u{9}here\\u{a}next");
        assert!(matches!(safe("host: \"localhost:5000\" — ünïcode ok"), Cow::Borrowed(_)), "plain text is untouched");
    }

    #[test]
    fn every_invisible_range_is_escaped_to_its_ends_and_its_neighbours_are_not() {
        // Each range's first and last character, and the visible characters just outside it: narrowing or widening
        // any range fails here.
        let ranges = [
            ('\u{200b}', '\u{200f}'),
            ('\u{2028}', '\u{2029}'),
            ('\u{202a}', '\u{202e}'),
            ('\u{2060}', '\u{2069}'),
            ('\u{feff}', '\u{feff}'),
            ('\u{fff9}', '\u{fffb}'),
            ('\u{e0000}', '\u{e007f}'),
        ];
        for (first, last) in ranges {
            for inside in [first, last] {
                let text = format!("a{inside}b");
                assert_eq!(safe(&text), format!("a\\u{{{:x}}}b", u32::from(inside)), "U+{:04X}", u32::from(inside));
            }
            for outside in [u32::from(first) - 1, u32::from(last) + 1].into_iter().filter_map(char::from_u32) {
                let text = format!("a{outside}b");
                let kept = outside.is_control() || ranges.iter().any(|(f, l)| (*f..=*l).contains(&outside));
                assert_eq!(safe(&text) == text, !kept, "U+{:04X}", u32::from(outside));
            }
        }
        // A C1 control and DEL, at the ends of what is_control() takes beyond C0.
        assert_eq!(safe("\u{7f}\u{80}\u{9f}\u{a0}"), "\\u{7f}\\u{80}\\u{9f}\u{a0}");
    }
}
