//! The self-contained HTML page: a title, an optional list of links to its sections, then
//! blocks appended in order (sections, paragraphs, key/value facts, tables, rows of plots,
//! preformatted text, lists). Every piece of text is escaped here; the only markup that
//! reaches the page is this module's own and the SVG of [`crate::plot`].

use crate::plot::Svg;
use crate::style::CSS;
use crate::table::Table;
use std::fmt::Write as _;

/// Escape text for HTML and SVG (element content and quoted attribute values).
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An id for a section heading: lowercase letters and digits, other runs become `-`.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// Builder of one report page.
#[derive(Debug, Clone)]
pub struct Page {
    title: String,
    sections: Vec<(String, String)>,
    body: String,
}

impl Page {
    /// An empty page with this title (the `<title>` and the `<h1>`).
    #[must_use]
    pub fn new(title: &str) -> Self {
        Self {
            title: title.to_owned(),
            sections: Vec::new(),
            body: String::new(),
        }
    }

    /// Start a section (`<h2>`); sections are listed in the links under the title.
    pub fn section(&mut self, title: &str) -> &mut Self {
        let mut id = slug(title);
        if id.is_empty() || self.sections.iter().any(|(i, _)| *i == id) {
            id = format!("s{}", self.sections.len() + 1);
        }
        let _ = write!(self.body, "<h2 id=\"{id}\">{}</h2>", escape(title));
        self.sections.push((id, title.to_owned()));
        self
    }

    /// A heading inside a section (`<h3>`).
    pub fn subsection(&mut self, title: &str) -> &mut Self {
        let _ = write!(self.body, "<h3>{}</h3>", escape(title));
        self
    }

    /// A paragraph of text.
    pub fn paragraph(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<p>{}</p>", escape(text));
        self
    }

    /// A paragraph in the smaller, grey style of explanations.
    pub fn note(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<p class=\"note\">{}</p>", escape(text));
        self
    }

    /// Key/value lines (revision, machine, command): keys in bold, values as given.
    pub fn facts(&mut self, facts: &[(&str, String)]) -> &mut Self {
        self.body.push_str("<table class=\"facts\">");
        for (k, v) in facts {
            let _ = write!(
                self.body,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(k),
                escape(v)
            );
        }
        self.body.push_str("</table>");
        self
    }

    /// A table.
    pub fn table(&mut self, table: &Table) -> &mut Self {
        self.body.push_str("<div class=\"table\">");
        self.body.push_str(&table.to_html());
        self.body.push_str("</div>");
        self
    }

    /// A row of plots that wraps to the page's width.
    pub fn plots<I: IntoIterator<Item = Svg>>(&mut self, plots: I) -> &mut Self {
        self.body.push_str("<div class=\"plots\">");
        for svg in plots {
            self.body.push_str(svg.as_str());
        }
        self.body.push_str("</div>");
        self
    }

    /// Preformatted text (raw JSON, a command's output).
    pub fn pre(&mut self, text: &str) -> &mut Self {
        let _ = write!(self.body, "<pre>{}</pre>", escape(text));
        self
    }

    /// A bulleted list; `warning` colours the items as problems (failed runs, skips).
    pub fn list<S: AsRef<str>>(&mut self, items: &[S], warning: bool) -> &mut Self {
        self.body.push_str(if warning {
            "<ul class=\"notices\">"
        } else {
            "<ul>"
        });
        for item in items {
            let _ = write!(self.body, "<li>{}</li>", escape(item.as_ref()));
        }
        self.body.push_str("</ul>");
        self
    }

    /// The complete document.
    #[must_use]
    pub fn finish(&self) -> String {
        let mut out = String::with_capacity(self.body.len() + CSS.len() + 512);
        let title = escape(&self.title);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width\"><title>{title}</title>\
             <style>{CSS}</style></head><body><h1>{title}</h1>"
        );
        if self.sections.len() >= 3 {
            out.push_str("<nav>");
            for (id, name) in &self.sections {
                let _ = write!(out, "<a href=\"#{id}\">{}</a>", escape(name));
            }
            out.push_str("</nav>");
        }
        out.push_str(&self.body);
        out.push_str("</body></html>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::{LineChart, Series};

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain µs"), "plain µs");
    }

    #[test]
    fn every_text_block_is_escaped() {
        let mut page = Page::new("t <1>");
        page.section("a & b")
            .paragraph("<script>")
            .note("\"q\"")
            .facts(&[("<k>", "<v>".into())])
            .pre("<pre>")
            .list(&["<li>"], true);
        let html = page.finish();
        assert!(html.contains("<title>t &lt;1&gt;</title>"));
        assert!(!html.contains("<script>") && !html.contains("<k>") && !html.contains("<v>"));
        assert!(html.contains("&lt;script&gt;") && html.contains("&lt;li&gt;"));
    }

    #[test]
    fn page_is_complete_with_links_to_its_sections() {
        let mut page = Page::new("r");
        for s in ["Headline", "Plots", "Plots", "Tables"] {
            page.section(s);
        }
        page.plots([LineChart::new("p")
            .series(Series::new("s", vec![(1.0, 2.0)]))
            .svg()]);
        let html = page.finish();
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
        assert!(html.contains("<a href=\"#headline\">Headline</a>"));
        // A repeated title gets its own id.
        assert!(html.contains("id=\"plots\"") && html.contains("id=\"s3\""));
        assert!(!html.contains("<script") && !html.contains("http://example"));
        assert_eq!(html.matches("<svg").count(), 1);
    }

    #[test]
    fn slugs_are_plain() {
        assert_eq!(
            slug("IOPS and p99 vs queue depth"),
            "iops-and-p99-vs-queue-depth"
        );
        assert_eq!(slug("  KVM on this host!"), "kvm-on-this-host");
        assert_eq!(slug("µ"), "");
    }
}
