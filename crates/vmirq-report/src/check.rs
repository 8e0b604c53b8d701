//! Structural checks of a finished page, for the tests of every report: the page is one
//! complete document with no script and nothing loaded from elsewhere, and every plot in it
//! is a well-formed `<svg>` element (balanced tags, quoted attributes, escaped text, no NaN).

/// Check one `<svg>...</svg>` element.
///
/// # Errors
/// What is wrong, first problem only.
pub fn svg(svg: &str) -> Result<(), String> {
    if !svg.starts_with("<svg") || !svg.trim_end().ends_with("</svg>") {
        return Err("not one <svg> element".into());
    }
    for bad in ["NaN", "=\"inf", "-inf", "\"inf\""] {
        if svg.contains(bad) {
            return Err(format!("contains {bad}"));
        }
    }
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = svg;
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        if text.contains('>') {
            return Err(format!("raw > in text {text:?}"));
        }
        let close = rest[open..]
            .find('>')
            .map(|i| i + open)
            .ok_or("a tag is not closed")?;
        let tag = &rest[open + 1..close];
        if tag.contains('<') || tag.matches('"').count() % 2 != 0 {
            return Err(format!("malformed tag <{tag}>"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop() != Some(name.trim()) {
                return Err(format!("</{name}> closes nothing open"));
            }
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().ok_or("empty tag")?);
        }
        rest = &rest[close + 1..];
        if stack.is_empty() && !rest.trim().is_empty() {
            return Err("text after the </svg>".into());
        }
    }
    if stack.is_empty() {
        Ok(())
    } else {
        Err(format!("unclosed {stack:?}"))
    }
}

/// The `<svg>` elements of a page, in order.
#[must_use]
pub fn svgs(page: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find("<svg") {
        let Some(len) = rest[start..].find("</svg>") else {
            out.push(&rest[start..]);
            break;
        };
        let end = start + len + "</svg>".len();
        out.push(&rest[start..end]);
        rest = &rest[end..];
    }
    out
}

/// Check a whole page: complete, self-contained, every plot well-formed.
///
/// # Errors
/// What is wrong, first problem only.
pub fn page(html: &str) -> Result<(), String> {
    if !html.starts_with("<!DOCTYPE html>") || !html.trim_end().ends_with("</html>") {
        return Err("not a complete HTML document".into());
    }
    for bad in ["<script", "src=\"http", "href=\"http", "<link", "<iframe"] {
        if html.contains(bad) {
            return Err(format!("not self-contained: {bad}"));
        }
    }
    for (i, s) in svgs(html).into_iter().enumerate() {
        svg(s).map_err(|e| format!("plot {}: {e}", i + 1))?;
        if s.contains("plot failed") {
            return Err(format!("plot {} failed to draw", i + 1));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_well_formed_and_rejects_broken_svg() {
        assert_eq!(
            svg("<svg a=\"1\"><g><text>x &amp; y</text></g><rect/></svg>"),
            Ok(())
        );
        for bad in [
            "<svg><g></svg>",
            "<svg><text>a > b</text></svg>",
            "<svg a=\"1><rect/></svg>",
            "<svg><text>NaN</text></svg>",
            "<div></div>",
            "<svg></svg><svg></svg>",
        ] {
            assert!(svg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pages_with_scripts_or_broken_plots_fail() {
        let ok = "<!DOCTYPE html><html><body><svg><rect/></svg></body></html>";
        assert_eq!(page(ok), Ok(()));
        assert_eq!(svgs(ok), vec!["<svg><rect/></svg>"]);
        assert!(page(&ok.replace("<body>", "<body><script>x</script>")).is_err());
        assert!(page(&ok.replace("<rect/>", "<rect>")).is_err());
    }
}
