//! One section of doctor's report: the lines it prints and whether it found something wrong. Doctor's own sections
//! and the node section (`cli::nodes`) are judged apart and printed alike.

use super::text::print;

/// One section of the report: the lines it prints, and whether it found something wrong.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Section {
    pub lines: Vec<String>,
    pub wrong: bool,
}

impl Section {
    pub(crate) fn titled(title: &str) -> Self {
        Self { lines: vec![format!("\n== {title}")], wrong: false }
    }

    pub(crate) fn say(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    /// Prints its lines, each escaped whole; whether it found something wrong. A title's leading line break is the
    /// program's own (every other line starts with spaces before any text from the cluster), and prints a blank line.
    pub(crate) fn show(&self) -> bool {
        for line in &self.lines {
            match line.strip_prefix('\n') {
                Some(title) => {
                    println!();
                    print(title);
                }
                None => print(line),
            }
        }
        self.wrong
    }
}
