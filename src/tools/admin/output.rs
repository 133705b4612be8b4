//! What a command prints: a JSON document (`--json`, one object on stdout, for scripts)
//! or text for people: tables with aligned columns, `key: value` blocks and notes.
//! Commands build an [`Output`] with both forms; [`Output::print`] writes the one asked.
//!
//! Text from the node (message bodies, topic names, client ids, keys, addresses) goes into
//! the human form through [`human`], which escapes control characters, so a body holding
//! a newline or an ESC sequence can neither fake lines nor drive the terminal. [`Table`]
//! cells and [`fields`] values are escaped by them; other text callers pass through
//! [`human`] themselves. The JSON form holds every string exactly.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;

use super::error::AdminError;

/// `text` for the human output: each control character (C0, DEL and C1) escaped, as
/// `\n`, `\r`, `\t` or `\u{1b}`; everything else as it is. Borrows when there is
/// nothing to escape.
pub fn human(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table: a header row and rows of cells, rendered with two spaces between columns,
/// every column as wide as its widest cell (counted in characters).
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns named `headers`; a header starting with `#` is right-aligned (numbers), the
    /// `#` is not printed.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| h.trim_start_matches('#').to_owned())
                .collect(),
            align: headers
                .iter()
                .map(|h| {
                    if h.starts_with('#') {
                        Align::Right
                    } else {
                        Align::Left
                    }
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// A row; each cell is escaped by [`human`].
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.headers.len(),
            "a row of {} cells in a table of {} columns: {cells:?}",
            cells.len(),
            self.headers.len()
        );
        self.rows.push(
            cells
                .into_iter()
                .map(|cell| match human(&cell) {
                    Cow::Borrowed(_) => cell,
                    Cow::Owned(escaped) => escaped,
                })
                .collect(),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let width = |cell: &str| cell.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(width(cell));
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = widths[i] - width(cell);
                let last = i + 1 == row.len();
                match self.align[i] {
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                    Align::Left => {
                        line.push_str(cell);
                        if !last {
                            line.extend(std::iter::repeat_n(' ', pad));
                        }
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key: value` lines with the values lined up; each value escaped by [`human`].
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, value) in pairs {
        let _ = writeln!(
            out,
            "{key:<width$}  {value}",
            width = width + 1,
            key = format!("{key}:"),
            value = human(value)
        );
    }
    out
}

/// A command's result in both forms, and the error to exit with after printing it when
/// only part of the command succeeded (a broker of the cluster unreachable).
#[derive(Clone, Debug)]
pub struct Output {
    pub json: Value,
    pub text: String,
    pub failure: Option<AdminError>,
}

impl Output {
    pub fn new(json: Value, text: impl Into<String>) -> Output {
        Output {
            json,
            text: text.into(),
            failure: None,
        }
    }

    /// The form asked for, as it goes to stdout.
    pub fn render(&self, json: bool) -> String {
        if json {
            let mut text = serde_json::to_string_pretty(&self.json)
                .expect("a serde_json::Value always serializes");
            text.push('\n');
            text
        } else {
            let mut text = self.text.clone();
            if !text.ends_with('\n') && !text.is_empty() {
                text.push('\n');
            }
            text
        }
    }

    pub fn print(&self, json: bool) {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(self.render(json).as_bytes());
        let _ = stdout.flush();
    }
}

/// An optional value as a cell: `-` when absent.
pub fn cell<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns() {
        let mut table = Table::new(&["topic", "#queue", "#max", "last update"]);
        table.row(vec!["a".into(), "0".into(), "12345".into(), "-".into()]);
        table.row(vec!["topic-é".into(), "10".into(), "7".into(), "x".into()]);
        assert_eq!(
            table.render(),
            concat!(
                "topic    queue    max  last update\n",
                "a            0  12345  -\n",
                "topic-é     10      7  x\n",
            )
        );
        assert!(!table.is_empty());
        assert!(Table::new(&["a"]).is_empty());
    }

    #[test]
    #[should_panic(expected = "a row of 1 cells in a table of 2 columns")]
    fn a_short_row_is_a_bug() {
        Table::new(&["a", "b"]).row(vec!["x".into()]);
    }

    #[test]
    fn human_escapes_control_characters() {
        assert!(matches!(human("plain é 中"), Cow::Borrowed("plain é 中")));
        assert_eq!(human("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(human("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(
            human("nul\0 del\u{7f} c1\u{85}\u{9b}"),
            "nul\\u{0} del\\u{7f} c1\\u{85}\\u{9b}"
        );
        assert_eq!(
            human("back\\slash"),
            "back\\slash",
            "only control characters"
        );
        let mut table = Table::new(&["id"]);
        table.row(vec!["x\ny".into()]);
        assert_eq!(table.render(), "id\nx\\ny\n");
        assert_eq!(fields(&[("body", "1\n2".into())]), "body:  1\\n2\n");
        // JSON keeps the text exact.
        let output = Output::new(json!({"body": "1\n2"}), table.render());
        let parsed: Value = serde_json::from_str(&output.render(true)).unwrap();
        assert_eq!(parsed["body"], "1\n2");
    }

    #[test]
    fn fields_line_up() {
        assert_eq!(
            fields(&[("topic", "t".into()), ("queue id", "3".into())]),
            "topic:     t\nqueue id:  3\n"
        );
    }

    #[test]
    fn output_renders_either_form() {
        let output = Output::new(json!({"a": 1}), "a is 1");
        assert_eq!(output.render(false), "a is 1\n");
        let parsed: Value = serde_json::from_str(&output.render(true)).unwrap();
        assert_eq!(parsed, json!({"a": 1}));
        assert_eq!(cell(Some(3)), "3");
        assert_eq!(cell(None::<i32>), "-");
    }
}
