//! A self-contained HTML page: title, tables, inline SVG charts.

use super::svg::esc;
use super::Table;

/// Builder of one report page.
#[derive(Debug, Clone, Default)]
pub struct Page {
    body: String,
}

impl Page {
    /// A page with a title and a one-paragraph description.
    #[must_use]
    pub fn new(title: &str, description: &str) -> Self {
        Self {
            body: format!("<h1>{}</h1><p>{}</p>", esc(title), esc(description)),
        }
    }

    /// Add a section heading.
    pub fn heading(&mut self, text: &str) {
        self.body.push_str(&format!("<h2>{}</h2>", esc(text)));
    }

    /// Add a table.
    pub fn table(&mut self, table: &Table) {
        let (header, rows) = table.parts();
        self.body.push_str("<table><tr>");
        for h in header {
            self.body.push_str(&format!("<th>{}</th>", esc(h)));
        }
        self.body.push_str("</tr>");
        for row in rows {
            self.body.push_str("<tr>");
            for c in row {
                self.body.push_str(&format!("<td>{}</td>", esc(c)));
            }
            self.body.push_str("</tr>");
        }
        self.body.push_str("</table>");
    }

    /// Add an SVG produced by [`super::svg`].
    pub fn svg(&mut self, svg: &str) {
        self.body.push_str("<div>");
        self.body.push_str(svg);
        self.body.push_str("</div>");
    }

    /// Add a preformatted block (for example the raw JSON).
    pub fn pre(&mut self, text: &str) {
        self.body.push_str(&format!("<pre>{}</pre>", esc(text)));
    }

    /// The complete document.
    #[must_use]
    pub fn finish(&self) -> String {
        format!(
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>vmirq kvm</title><style>\
             body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}\
             td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}pre{{font-size:11px}}\
             </style></head><body>{}</body></html>\n",
            self.body
        )
    }
}
