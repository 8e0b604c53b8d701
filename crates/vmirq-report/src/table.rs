//! A table of text cells under a header, rendered for the terminal (aligned columns) or as
//! HTML (escaped, numbers right-aligned, label columns left-aligned, cells toned good/bad).

use crate::html::escape;
use std::fmt::Write as _;

/// How a cell is emphasised in HTML (the terminal shows the text only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tone {
    /// No emphasis.
    #[default]
    Plain,
    /// A favourable value (green).
    Good,
    /// An unfavourable value or a failure (red).
    Bad,
    /// Bold.
    Strong,
    /// Grey: absent or unimportant.
    Muted,
}

impl Tone {
    const fn class(self) -> Option<&'static str> {
        match self {
            Self::Plain => None,
            Self::Good => Some("good"),
            Self::Bad => Some("bad"),
            Self::Strong => Some("strong"),
            Self::Muted => Some("muted"),
        }
    }
}

/// One cell: its text and emphasis.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cell {
    /// The text (escaped when written as HTML).
    pub text: String,
    /// Emphasis in HTML.
    pub tone: Tone,
}

impl Cell {
    /// A cell with this text and tone.
    #[must_use]
    pub fn new(text: impl Into<String>, tone: Tone) -> Self {
        Self {
            text: text.into(),
            tone,
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Self::new(text, Tone::Plain)
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Self::new(text, Tone::Plain)
    }
}

/// Cells with more characters than this wrap in HTML (explanations, error messages).
const WRAP_CHARS: usize = 48;

/// Rows of cells under a header.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<Cell>>,
    left: usize,
    /// Rows that start a new group (a line above in HTML, a blank line in text).
    groups: Vec<usize>,
}

impl Table {
    /// A table with these column names; every column right-aligned.
    #[must_use]
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
            left: 0,
            groups: Vec::new(),
        }
    }

    /// Left-align the first `n` columns (labels rather than numbers).
    #[must_use]
    pub fn left_aligned(mut self, n: usize) -> Self {
        self.left = n;
        self
    }

    /// Append a row (missing cells print empty, extra cells are dropped).
    pub fn row<C: Into<Cell>, I: IntoIterator<Item = C>>(&mut self, cells: I) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Start a new group of rows with the next row (after at least one row).
    pub fn group(&mut self) {
        if !self.rows.is_empty() && self.groups.last() != Some(&self.rows.len()) {
            self.groups.push(self.rows.len());
        }
    }

    /// Number of rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there is no row.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn cell(row: &[Cell], i: usize) -> &str {
        row.get(i).map_or("", |c| c.text.as_str())
    }

    /// The terminal form: two spaces between columns, aligned as configured.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, w) in widths.iter_mut().enumerate() {
                *w = (*w).max(Self::cell(row, i).chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &dyn Fn(usize) -> String| {
            for (i, w) in widths.iter().enumerate() {
                if i > 0 {
                    out.push_str("  ");
                }
                let text = cells(i);
                if i < self.left {
                    let _ = write!(out, "{text:<w$}");
                } else {
                    let _ = write!(out, "{text:>w$}");
                }
            }
            // Left-aligned last columns would leave trailing blanks.
            let kept = out.trim_end_matches(' ').len();
            out.truncate(kept);
            out.push('\n');
        };
        line(&|i| self.header[i].clone());
        for (r, row) in self.rows.iter().enumerate() {
            if self.groups.contains(&r) {
                line(&|_| String::new());
            }
            line(&|i| Self::cell(row, i).to_owned());
        }
        out
    }

    /// The HTML form (`<table>` with a header row), every cell escaped.
    #[must_use]
    pub fn to_html(&self) -> String {
        let mut out = String::from("<table><thead><tr>");
        for (i, h) in self.header.iter().enumerate() {
            let class = if i < self.left { " class=\"l\"" } else { "" };
            let _ = write!(out, "<th{class}>{}</th>", escape(h));
        }
        out.push_str("</tr></thead><tbody>");
        for (r, row) in self.rows.iter().enumerate() {
            out.push_str(if self.groups.contains(&r) {
                "<tr class=\"group\">"
            } else {
                "<tr>"
            });
            for i in 0..self.header.len() {
                let cell = row.get(i);
                let mut classes: Vec<&str> = Vec::new();
                if i < self.left {
                    classes.push("l");
                }
                if let Some(c) = cell.and_then(|c| c.tone.class()) {
                    classes.push(c);
                }
                if cell.is_some_and(|c| c.text.chars().count() > WRAP_CHARS) {
                    classes.push("wrap");
                }
                if classes.is_empty() {
                    out.push_str("<td>");
                } else {
                    let _ = write!(out, "<td class=\"{}\">", classes.join(" "));
                }
                out.push_str(&escape(cell.map_or("", |c| c.text.as_str())));
                out.push_str("</td>");
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
        out
    }
}

/// A measured value for a table cell, with precision by magnitude: no decimals from 100 up,
/// two from 1, four below (so 0.0078 interrupts per packet and 1,505,245 packets/s both read
/// well); exactly zero prints as `0`.
#[must_use]
pub fn short_number(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers_by_magnitude() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(1_505_245.4), "1505245");
        assert_eq!(short_number(18.234), "18.23");
        assert_eq!(short_number(0.007_81), "0.0078");
        assert_eq!(short_number(-2.5), "-2.50");
    }

    #[test]
    fn text_columns_align_right_by_default() {
        let mut t = Table::new(&["a", "long"]);
        t.row(vec!["123".to_owned(), "4".to_owned()]);
        assert_eq!(t.to_text(), "  a  long\n123     4\n");
    }

    #[test]
    fn label_columns_align_left_and_short_rows_fill_in() {
        let mut t = Table::new(&["name", "n"]).left_aligned(1);
        t.row(["x", "10"]);
        t.row(["longer"]);
        assert_eq!(t.to_text(), "name     n\nx       10\nlonger\n");
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn html_escapes_and_tones() {
        let mut t = Table::new(&["<h>", "v"]).left_aligned(1);
        t.row([
            Cell::from("a&b"),
            Cell::new("1.20x", Tone::Good),
            Cell::from("extra"),
        ]);
        let html = t.to_html();
        assert!(html.contains("<th class=\"l\">&lt;h&gt;</th>"));
        assert!(html.contains("<td class=\"l\">a&amp;b</td>"));
        assert!(html.contains("<td class=\"good\">1.20x</td>"));
        assert!(
            !html.contains("extra"),
            "cells beyond the header are dropped"
        );
        assert_eq!(html.matches("<td").count(), 2);
    }

    #[test]
    fn groups_are_separated() {
        let mut t = Table::new(&["a"]);
        t.group();
        t.row(["1"]);
        t.group();
        t.group();
        t.row(["2"]);
        assert_eq!(t.to_text(), "a\n1\n\n2\n");
        assert_eq!(t.to_html().matches("<tr class=\"group\">").count(), 1);
    }

    #[test]
    fn long_text_wraps() {
        let mut t = Table::new(&["a", "b"]);
        t.row(["x".repeat(WRAP_CHARS + 1), "y".to_owned()]);
        assert!(t.to_html().contains("<td class=\"wrap\">xxx"));
        assert!(t.to_html().contains("<td>y</td>"));
    }

    #[test]
    fn an_empty_table_is_still_a_table() {
        let t = Table::new(&["a"]);
        assert!(t.is_empty());
        assert_eq!(
            t.to_html(),
            "<table><thead><tr><th>a</th></tr></thead><tbody></tbody></table>"
        );
    }
}
