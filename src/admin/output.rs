//! What a command prints: a JSON document (`--json`, one object on stdout, for scripts)
//! or text for people: tables with aligned columns, `key: value` blocks and notes.
//! Commands build an [`Output`] with both forms; [`Output::print`] writes the one asked.

use std::fmt::Write as _;

use serde_json::Value;

use super::error::AdminError;

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

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(
            cells.len(),
            self.headers.len(),
            "a row of {} cells in a table of {} columns: {cells:?}",
            cells.len(),
            self.headers.len()
        );
        self.rows.push(cells);
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

/// `key: value` lines with the values lined up.
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
            key = format!("{key}:")
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
