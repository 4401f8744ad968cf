//! HTML to readable text for the viewport, with html2text.
//!
//! The output is markdown-like, as the AutoGen browser's markdownify output that Sibyl read:
//! `#` headings, `*` list items, `*em*`, `**strong**`, `` `code` ``, tables drawn with box
//! characters, and links kept followable as `[text](absolute-url)` (relative links are
//! resolved against the page address). Scripts, styles and `javascript:` links are dropped.
//! Lines are right-trimmed and runs of blank lines collapsed, as Sibyl's converters did.
//!
//! Link and image targets are *hidden from find-in-page*: the renderer wraps them in
//! private-use sentinels that are removed here and reported as [`Rendered::hidden`] byte
//! ranges, so a sentence that contains a link is still found by its visible words.

use std::ops::Range;

use html2text::render::TextDecorator;

/// Start of a hidden range in the raw render; never left in the output.
const HIDE_START: char = '\u{E000}';
/// End of a hidden range in the raw render; never left in the output.
const HIDE_END: char = '\u{E001}';
/// Render width: wide enough that paragraphs are never wrapped (viewports split text anyway).
const RENDER_WIDTH: usize = 10_000;
/// Longest link target shown; longer ones (data: URIs, tracking blobs) are dropped.
const MAX_SHOWN_URL: usize = 2048;

/// A page converted to text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// The page title (`<title>`, whitespace-collapsed), if any.
    pub title: Option<String>,
    /// The text shown through the viewport.
    pub text: String,
    /// Sorted, disjoint byte ranges of `text` (link targets) that find-in-page skips.
    pub hidden: Vec<Range<usize>>,
}

/// Why HTML could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("cannot convert HTML to text: {0}")]
pub struct ConvertError(String);

/// Converts an HTML document (already decoded to text) to viewport text.
///
/// `base` resolves relative links. Runs in time linear in the input; call it off the async
/// runtime for large pages.
///
/// # Errors
/// [`ConvertError`] if html2text fails on the document.
pub fn html_to_text(html: &str, base: Option<&url::Url>) -> Result<Rendered, ConvertError> {
    // Pages are hostile: a page must not be able to forge our sentinels.
    let cleaned: std::borrow::Cow<'_, str> = if html.contains([HIDE_START, HIDE_END]) {
        html.replace([HIDE_START, HIDE_END], "\u{FFFD}").into()
    } else {
        html.into()
    };
    let decorator = Decorator {
        base: base.cloned(),
        links: Vec::new(),
    };
    let raw = html2text::config::with_decorator(decorator)
        .link_footnotes(false)
        .no_link_wrapping()
        .allow_width_overflow()
        .string_from_read(cleaned.as_bytes(), RENDER_WIDTH)
        .map_err(|e| ConvertError(e.to_string()))?;
    let (text, hidden) = tidy(&raw);
    Ok(Rendered {
        title: extract_title(&cleaned),
        text,
        hidden,
    })
}

/// Right-trims lines, collapses 3+ newlines to 2, trims the ends, then removes the
/// sentinels and returns the hidden byte ranges in the final text.
fn tidy(raw: &str) -> (String, Vec<Range<usize>>) {
    let mut joined = String::with_capacity(raw.len());
    let mut blank_run = 0usize;
    for line in raw.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        joined.push_str(line);
        joined.push('\n');
    }
    let trimmed = joined.trim_matches(['\n', ' ']);
    let mut text = String::with_capacity(trimmed.len());
    let mut hidden = Vec::new();
    let mut open: Option<usize> = None;
    for c in trimmed.chars() {
        match c {
            HIDE_START => open = Some(text.len()),
            HIDE_END => {
                if let Some(start) = open.take() {
                    hidden.push(start..text.len());
                }
            }
            _ => text.push(c),
        }
    }
    if let Some(start) = open {
        hidden.push(start..text.len());
    }
    (text, hidden)
}

/// The first `<title>` of the document, entity-decoded and whitespace-collapsed.
pub fn extract_title(html: &str) -> Option<String> {
    static TITLE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let re = TITLE
        .get_or_init(|| regex::Regex::new(r"(?is)<title[^>]*>(.*?)</title\s*>").ok())
        .as_ref()?;
    let raw = re.captures(html)?.get(1)?.as_str();
    let decoded = html_escape::decode_html_entities(raw);
    let title: String = decoded.split_whitespace().collect::<Vec<_>>().join(" ");
    let title: String = title.chars().take(500).collect();
    (!title.is_empty()).then_some(title)
}

/// Markdown-like decorations with hidden, absolute link targets.
#[derive(Clone)]
struct Decorator {
    base: Option<url::Url>,
    /// Open links: `Some(target)` when the link is shown, `None` when dropped.
    links: Vec<Option<String>>,
}

impl Decorator {
    fn resolve(&self, href: &str) -> Option<String> {
        let href = href.trim();
        if href.is_empty() || href.starts_with('#') {
            return None;
        }
        let abs = match &self.base {
            Some(b) => b.join(href).ok()?,
            None => url::Url::parse(href).ok()?,
        };
        if !matches!(abs.scheme(), "http" | "https" | "mailto" | "ftp") {
            return None;
        }
        let s = abs.to_string();
        (s.len() <= MAX_SHOWN_URL).then_some(s)
    }
}

impl TextDecorator for Decorator {
    type Annotation = ();

    fn decorate_link_start(&mut self, url: &str) -> (String, ()) {
        let target = self.resolve(url);
        let prefix = if target.is_some() { "[" } else { "" };
        self.links.push(target);
        (prefix.to_string(), ())
    }

    fn decorate_link_end(&mut self) -> String {
        match self.links.pop() {
            Some(Some(target)) => format!("]({HIDE_START}{target}{HIDE_END})"),
            _ => String::new(),
        }
    }

    fn decorate_em_start(&self) -> (String, ()) {
        ("*".into(), ())
    }

    fn decorate_em_end(&self) -> String {
        "*".into()
    }

    fn decorate_strong_start(&self) -> (String, ()) {
        ("**".into(), ())
    }

    fn decorate_strong_end(&self) -> String {
        "**".into()
    }

    fn decorate_strikeout_start(&self) -> (String, ()) {
        ("~~".into(), ())
    }

    fn decorate_strikeout_end(&self) -> String {
        "~~".into()
    }

    fn decorate_code_start(&self) -> (String, ()) {
        ("`".into(), ())
    }

    fn decorate_code_end(&self) -> String {
        "`".into()
    }

    fn decorate_preformat_first(&self) -> Self::Annotation {}

    fn decorate_preformat_cont(&self) -> Self::Annotation {}

    fn decorate_image(&mut self, src: &str, title: &str) -> (String, ()) {
        let alt = title.trim();
        if alt.is_empty() {
            return (String::new(), ());
        }
        match self.resolve(src) {
            Some(target) => (format!("![{alt}]({HIDE_START}{target}{HIDE_END})"), ()),
            None => (format!("![{alt}]"), ()),
        }
    }

    fn header_prefix(&self, level: usize) -> String {
        "#".repeat(level.clamp(1, 6)) + " "
    }

    fn quote_prefix(&self) -> String {
        "> ".into()
    }

    fn unordered_item_prefix(&self) -> String {
        "* ".into()
    }

    fn ordered_item_prefix(&self, i: i64) -> String {
        format!("{i}. ")
    }

    fn make_subblock_decorator(&self) -> Self {
        Decorator {
            base: self.base.clone(),
            links: Vec::new(),
        }
    }

    fn decorate_superscript_start(&self) -> (String, ()) {
        ("^".into(), ())
    }

    fn decorate_superscript_end(&self) -> String {
        String::new()
    }

    fn finalise(&mut self, _urls: Vec<String>) -> Vec<html2text::render::TaggedLine<()>> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(html: &str) -> Rendered {
        let base = url::Url::parse("https://example.com/dir/page.html").expect("url");
        html_to_text(html, Some(&base)).expect("render")
    }

    #[test]
    fn markdown_like_text_without_scripts() {
        let r = render(
            "<html><head><title> A &amp; B </title><style>p{color:red}</style>\
             <script>var secret='SCRIPT';</script></head><body><h2>Head</h2>\
             <p>Some <em>emph</em> and <strong>bold</strong> text.</p>\
             <ul><li>one</li><li>two</li></ul></body></html>",
        );
        assert_eq!(r.title.as_deref(), Some("A & B"));
        assert!(r.text.contains("## Head"), "{}", r.text);
        assert!(
            r.text.contains("Some *emph* and **bold** text."),
            "{}",
            r.text
        );
        assert!(r.text.contains("* one\n* two"), "{}", r.text);
        assert!(
            !r.text.contains("SCRIPT") && !r.text.contains("color"),
            "{}",
            r.text
        );
    }

    #[test]
    fn links_are_absolute_and_hidden_from_find() {
        let r = render(
            "<p>Read <a href=\"../other.html\">the other page</a> now. \
             <a href=\"javascript:alert(1)\">js</a> <a href=\"#top\">top</a></p>",
        );
        let expect = "Read [the other page](https://example.com/other.html) now. js top";
        assert_eq!(r.text, expect);
        assert_eq!(r.hidden.len(), 1);
        assert_eq!(
            &r.text[r.hidden[0].clone()],
            "https://example.com/other.html"
        );
    }

    #[test]
    fn forged_sentinels_are_neutralised() {
        let r = render("<p>a\u{E000}b\u{E001}c</p>");
        assert!(r.hidden.is_empty());
        assert_eq!(r.text, "a\u{FFFD}b\u{FFFD}c");
    }

    #[test]
    fn tables_stay_readable() {
        let r = render(
            "<table><tr><th>Name</th><th>Age</th></tr><tr><td>Ada</td><td>36</td></tr></table>",
        );
        let ada = r.text.lines().find(|l| l.contains("Ada")).expect("row");
        assert!(ada.contains("36"), "a row stays on one line: {}", r.text);
    }

    #[test]
    fn blank_runs_collapse() {
        let r = render("<p>a</p><br><br><br><br><p>b</p>");
        assert!(!r.text.contains("\n\n\n"), "{:?}", r.text);
    }
}
