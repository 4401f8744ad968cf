//! HTML to readable text for the viewport, with html2text.
//!
//! The output is markdown-like, as the AutoGen browser's markdownify output that Sibyl read:
//! `#` headings, `*` list items, `*em*`, `**strong**`, `` `code` ``, tables drawn with box
//! characters, and links kept followable as `[text](absolute-url)` (relative links are
//! resolved against the page address). Scripts, styles and `javascript:` links are dropped.
//! Lines are right-trimmed and runs of blank lines collapsed, as Sibyl's converters did.
//!
//! Tables: html2text lays every table out as a grid, which turns the layout tables of older
//! sites (LWN, navigation boxes) into hundreds of kilobytes of padding with columns
//! interleaved line by line. Before rendering, each table is classified as *data* or
//! *layout* with the heuristic of Mozilla Readability's `_isDataTable` (role, caption/th/
//! thead, nesting, size); layout tables are unwrapped so each cell becomes a plain block,
//! and data tables are rendered as grids with their padding squeezed (one row per line,
//! cells separated by `│`), so a row stays readable and searchable.
//!
//! Main content: with [`MainContent::Auto`], the page is first reduced to its article with
//! Mozilla Readability's algorithm (the `dom_smoothie` port: candidate scoring, then its
//! conditional cleaning, which keeps data tables such as Wikipedia's infobox). The article is
//! used only when Readability is confident, by its own thresholds: the page is "probably
//! readerable" (`isProbablyReaderable`: score 20, 140 characters) and the article has at
//! least its `charThreshold` of 500 characters. Otherwise the whole page is shown. The
//! article HTML then goes through the same html2text rendering as a whole page.
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
/// Deepest element nesting rendered as structure; deeper content is flattened (see
/// [`flatten_deep_nesting`]). Real pages stay far below it.
const MAX_DEPTH: usize = 256;
/// Deepest source nesting accepted at all: html5ever's tree builder spends time
/// quadratic in nesting depth (10,000 nested `div`s: 6 s), so deeper pages are refused.
const MAX_SOURCE_DEPTH: usize = 3000;
/// Longest link target shown; longer ones (data: URIs, tracking blobs) are dropped.
const MAX_SHOWN_URL: usize = 2048;

/// Which part of an HTML page is shown (the policy's `[browser] main_content`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MainContent {
    /// The whole page (`"off"`).
    #[default]
    Off,
    /// The article when Mozilla Readability's algorithm is confident, else the whole page
    /// (`"auto"`).
    Auto,
}

impl MainContent {
    /// Parses the policy value: `"off"` or `"auto"`.
    ///
    /// # Errors
    /// A message naming the accepted values, for any other string.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "off" => Ok(Self::Off),
            "auto" => Ok(Self::Auto),
            other => Err(format!("must be off or auto, got `{other}`")),
        }
    }
}

/// What main-content selection left out of a page, for the note shown with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Omitted {
    /// Characters of the whole page's text.
    pub full_chars: usize,
    /// Characters of the article's text (shown, followed by the [`Omitted::note`] line).
    pub article_chars: usize,
}

impl Omitted {
    /// The one-line note that ends an article view, saying what was left out.
    pub fn note(&self) -> String {
        format!(
            "[Main content only: {} of the page's {} characters are shown above; navigation, \
             sidebars, footers and other page furniture were omitted.]",
            self.article_chars, self.full_chars
        )
    }
}

/// A page converted to text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// The page title (`<title>`, whitespace-collapsed), if any.
    pub title: Option<String>,
    /// The text shown through the viewport (an article view ends with [`Omitted::note`]).
    pub text: String,
    /// Sorted, disjoint byte ranges of `text` (link targets) that find-in-page skips.
    pub hidden: Vec<Range<usize>>,
    /// Set when `text` is the page's main content only: what the whole page had.
    pub omitted: Option<Omitted>,
}

/// Why HTML could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("cannot convert HTML to text: {0}")]
pub struct ConvertError(String);

/// Converts a whole HTML document (already decoded to text) to viewport text; the same as
/// [`html_to_text_as`] with [`MainContent::Off`].
///
/// # Errors
/// [`ConvertError`] if the page nests too deep or html2text fails on the document.
pub fn html_to_text(html: &str, base: Option<&url::Url>) -> Result<Rendered, ConvertError> {
    html_to_text_as(html, base, MainContent::Off)
}

/// Converts an HTML document (already decoded to text) to viewport text, the whole page or
/// (with [`MainContent::Auto`], when Readability is confident) its main content only.
///
/// `base` resolves relative links. Runs in time linear in the input; call it off the async
/// runtime for large pages.
///
/// # Errors
/// [`ConvertError`] if the page nests too deep or html2text fails on the document.
pub fn html_to_text_as(
    html: &str,
    base: Option<&url::Url>,
    mode: MainContent,
) -> Result<Rendered, ConvertError> {
    // Pages are hostile: a page must not be able to forge our sentinels.
    let cleaned: std::borrow::Cow<'_, str> = if html.contains([HIDE_START, HIDE_END]) {
        html.replace([HIDE_START, HIDE_END], "\u{FFFD}").into()
    } else {
        html.into()
    };
    let depth = estimate_depth(&cleaned);
    if depth > MAX_SOURCE_DEPTH {
        return Err(ConvertError(format!(
            "the page nests elements {depth} deep (limit {MAX_SOURCE_DEPTH}); refused as hostile"
        )));
    }
    let title = extract_title(&cleaned);
    let (text, hidden) = render_text(&cleaned, base)?;
    // Readability's tree walks recurse; only pages of ordinary depth are given to it.
    if mode == MainContent::Auto
        && depth <= MAX_DEPTH
        && let Some(article) = readable_article(&cleaned, base)
    {
        let (article_text, article_hidden) = render_text(&article, base)?;
        let article_chars = article_text.chars().count();
        let full_chars = text.chars().count();
        if article_chars > 0 && article_chars < full_chars {
            let omitted = Omitted {
                full_chars,
                article_chars,
            };
            return Ok(Rendered {
                title,
                text: format!("{article_text}\n\n{}", omitted.note()),
                hidden: article_hidden,
                omitted: Some(omitted),
            });
        }
    }
    Ok(Rendered {
        title,
        text,
        hidden,
        omitted: None,
    })
}

/// The main content of `html` as HTML, when Mozilla Readability's algorithm (dom_smoothie)
/// is confident: the page is probably readerable and the article reaches Readability's
/// 500-character threshold. `None` otherwise, or if the extraction fails.
pub fn readable_article(html: &str, base: Option<&url::Url>) -> Option<String> {
    let config = dom_smoothie::Config {
        // Bounds the work on hostile pages; real article pages are far below it.
        max_elements_to_parse: 200_000,
        ..dom_smoothie::Config::default()
    };
    let threshold = config.char_threshold;
    let mut readability =
        dom_smoothie::Readability::new(html, base.map(url::Url::as_str), Some(config)).ok()?;
    if !readability.is_probably_readable() {
        return None;
    }
    match readability.parse() {
        Ok(article) if article.length >= threshold => Some(with_header(&article)),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(error = %e, "no main content");
            None
        }
    }
}

/// The article's HTML under a reader-view header, as Firefox's reader view shows it: the
/// title as `<h1>`, then the byline and the excerpt (the page's description, often the
/// standfirst that Readability's scoring leaves out) when the article text lacks them.
fn with_header(article: &dom_smoothie::Article) -> String {
    let body = collapse_text(&article.text_content);
    let mut out = String::with_capacity(article.content.len() + 512);
    for (tag, value) in [
        ("h1", Some(article.title.as_str())),
        ("p", article.byline.as_deref()),
        ("p", article.excerpt.as_deref()),
    ] {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            continue;
        };
        let value_text = collapse_text(value);
        let already = if tag == "h1" {
            // Readability usually drops a heading that repeats the title; if it kept one
            // near the top, do not repeat it.
            body.chars()
                .take(value_text.chars().count() + 200)
                .collect::<String>()
                .contains(&value_text)
        } else {
            body.contains(&value_text)
        };
        if already {
            continue;
        }
        out.push_str(&format!(
            "<{tag}>{}</{tag}>",
            html_escape::encode_text(value)
        ));
    }
    out.push_str(&article.content);
    out
}

/// Whitespace-collapsed text, for containment checks.
fn collapse_text(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Renders (already sentinel-cleaned) HTML with html2text: the text and its hidden ranges.
fn render_text(
    cleaned: &str,
    base: Option<&url::Url>,
) -> Result<(String, Vec<Range<usize>>), ConvertError> {
    let decorator = Decorator {
        base: base.cloned(),
        links: Vec::new(),
    };
    let config = html2text::config::with_decorator(decorator)
        .link_footnotes(false)
        .no_link_wrapping()
        .allow_width_overflow();
    let err = |e: html2text::Error| ConvertError(e.to_string());
    let dom = config.parse_html(cleaned.as_bytes()).map_err(err)?;
    flatten_deep_nesting(&dom, MAX_DEPTH);
    unwrap_layout_tables(&config, &dom).map_err(err)?;
    let tree = config.dom_to_render_tree(&dom).map_err(err)?;
    let raw = config.render_to_string(tree, RENDER_WIDTH).map_err(err)?;
    Ok(tidy(&raw))
}

/// Flattens content nested deeper than `limit`: each node at depth `limit` keeps its
/// descendant leaves (text, images, line breaks) in document order as direct children.
/// html2text's layout costs grow with the square of nesting depth (20,000 nested `div`s
/// took 25 s), so a hostile page could otherwise pin a CPU; text is kept, structure lost.
fn flatten_deep_nesting(dom: &html2text::RcDom, limit: usize) {
    let mut stack = vec![(dom.document.clone(), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        // Containers whose renderers keep only certain children (rows, cells, list items)
        // pass the flattening down one level, so the text lands in a cell or item.
        let container = matches!(
            element_name(&node),
            Some("table" | "tbody" | "thead" | "tfoot" | "tr" | "ul" | "ol" | "dl")
        );
        if depth < limit || container {
            let children = node.children.borrow();
            stack.extend(children.iter().map(|c| (c.clone(), depth + 1)));
            continue;
        }
        let mut leaves = Vec::new();
        let mut inner: Vec<_> = node.children.borrow().iter().rev().cloned().collect();
        while let Some(n) = inner.pop() {
            let kids = n.children.borrow();
            if kids.is_empty() {
                leaves.push(n.clone());
            } else {
                inner.extend(kids.iter().rev().cloned());
            }
        }
        for leaf in &leaves {
            leaf.parent.set(Some(std::rc::Rc::downgrade(&node)));
        }
        *node.children.borrow_mut() = leaves;
    }
}

/// Upper estimate of the element nesting depth of `html`, in one linear pass: start tags
/// open a level, end tags close one; void elements, self-closing tags, elements that close
/// implicitly (`p`, `li`, table cells, …), comments and the text of `script`/`style` do not
/// count.
fn estimate_depth(html: &str) -> usize {
    const NON_NESTING: &[&str] = &[
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr", "p", "li", "dt", "dd", "tr", "td", "th", "option", "!doctype",
    ];
    let b = html.as_bytes();
    let (mut i, mut depth, mut max) = (0usize, 0usize, 0usize);
    while let Some(off) = b[i..].iter().position(|&c| c == b'<') {
        i += off + 1;
        if b[i..].starts_with(b"!--") {
            i = find_from(b, i, b"-->").unwrap_or(b.len());
            continue;
        }
        let closing = b.get(i) == Some(&b'/');
        let start = if closing { i + 1 } else { i };
        let end = b[start..]
            .iter()
            .position(|c| c.is_ascii_whitespace() || *c == b'>' || *c == b'/')
            .map_or(b.len(), |e| start + e);
        let name = String::from_utf8_lossy(&b[start..end]).to_ascii_lowercase();
        let tag_end = find_from(b, end, b">").unwrap_or(b.len());
        if name.is_empty() || !name.as_bytes()[0].is_ascii_alphabetic() && !name.starts_with('!') {
            continue;
        }
        if closing {
            if !NON_NESTING.contains(&name.as_str()) {
                depth = depth.saturating_sub(1);
            }
        } else if !NON_NESTING.contains(&name.as_str()) && !b[..tag_end].ends_with(b"/") {
            depth += 1;
            max = max.max(depth);
            if matches!(name.as_str(), "script" | "style" | "textarea" | "title") {
                let close = format!("</{name}");
                let lower_from = tag_end.min(b.len());
                i = find_ci(b, lower_from, close.as_bytes()).unwrap_or(b.len());
                continue;
            }
        }
        i = tag_end.min(b.len());
    }
    max
}

fn find_from(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

fn find_ci(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
        .map(|p| from + p)
}

fn element_name(node: &html2text::Handle) -> Option<&str> {
    match &node.data {
        html2text::Element { name, .. } => Some(&*name.local),
        _ => None,
    }
}

fn attr(node: &html2text::Handle, key: &str) -> Option<String> {
    match &node.data {
        html2text::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| &*a.name.local == key)
            .map(|a| a.value.to_string()),
        _ => None,
    }
}

/// Every element named `name` under `root` (document order), without recursion.
fn find_all(root: &html2text::Handle, name: &str) -> Vec<html2text::Handle> {
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(n) = stack.pop() {
        if element_name(&n) == Some(name) {
            out.push(n.clone());
        }
        let children = n.children.borrow();
        stack.extend(children.iter().rev().cloned());
    }
    out
}

/// The cells of `table` itself (not of nested tables), in document order, plus captions.
fn own_cells(table: &html2text::Handle) -> (Vec<Vec<html2text::Handle>>, Vec<html2text::Handle>) {
    let mut rows = Vec::new();
    let mut captions = Vec::new();
    let mut groups = vec![table.clone()];
    for child in table.children.borrow().iter() {
        match element_name(child) {
            Some("thead" | "tbody" | "tfoot") => groups.push(child.clone()),
            Some("caption") => captions.push(child.clone()),
            _ => {}
        }
    }
    for g in &groups {
        for tr in g.children.borrow().iter() {
            if element_name(tr) == Some("tr") {
                let cells = tr
                    .children
                    .borrow()
                    .iter()
                    .filter(|c| matches!(element_name(c), Some("td" | "th")))
                    .cloned()
                    .collect();
                rows.push(cells);
            }
        }
    }
    (rows, captions)
}

/// Mozilla Readability's `_isDataTable`, simplified: true for a table of data, false for
/// a table used for page layout.
fn is_data_table(table: &html2text::Handle) -> bool {
    if matches!(
        attr(table, "role").as_deref(),
        Some("presentation" | "none")
    ) {
        return false;
    }
    if attr(table, "datatable").as_deref() == Some("0") {
        return false;
    }
    let nested = find_all(table, "table").len() > 1;
    if nested {
        return false;
    }
    if attr(table, "summary").is_some_and(|s| !s.trim().is_empty()) {
        return true;
    }
    let (rows, captions) = own_cells(table);
    if !captions.is_empty() {
        return true;
    }
    let has_header = table.children.borrow().iter().any(|c| {
        matches!(
            element_name(c),
            Some("thead" | "tfoot" | "colgroup" | "col")
        )
    }) || rows.iter().flatten().any(|c| element_name(c) == Some("th"));
    if has_header {
        return true;
    }
    let n_rows = rows.len();
    let n_cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    if n_rows <= 1 || n_cols <= 1 {
        return false;
    }
    n_rows >= 10 || n_cols > 4 || n_rows * n_cols > 10
}

/// Replaces every layout table by a sequence of `div` blocks, one per cell (and caption),
/// holding that cell's children. Data tables are left alone.
fn unwrap_layout_tables<D: TextDecorator>(
    config: &html2text::config::Config<D>,
    dom: &html2text::RcDom,
) -> Result<(), html2text::Error> {
    let layout: Vec<_> = find_all(&dom.document, "table")
        .into_iter()
        .filter(|t| !is_data_table(t))
        .collect();
    if layout.is_empty() {
        return Ok(());
    }
    let blocks: usize = layout
        .iter()
        .map(|t| {
            let (rows, captions) = own_cells(t);
            rows.iter().map(Vec::len).sum::<usize>() + captions.len()
        })
        .sum();
    // html2text does not export its node constructor; fresh `div` nodes come from parsing
    // a template document of empty divs.
    let template = config.parse_html("<div></div>".repeat(blocks).as_bytes())?;
    let fresh = find_all(&template.document, "div");
    // Detach them: dropping the template document would otherwise empty them (rcdom's
    // iterative Drop takes the children of every node still listed under the document).
    for div in &fresh {
        if let Some(body) = div.parent.take().and_then(|w| w.upgrade()) {
            body.children.borrow_mut().clear();
        }
    }
    let mut divs = fresh.into_iter();
    for table in layout {
        let Some(parent) = table.parent.take().and_then(|w| w.upgrade()) else {
            continue;
        };
        let (rows, captions) = own_cells(&table);
        let mut replacement = Vec::new();
        for cell in captions.into_iter().chain(rows.into_iter().flatten()) {
            let Some(div) = divs.next() else { break };
            let moved: Vec<_> = cell.children.borrow_mut().drain(..).collect();
            for child in &moved {
                child.parent.set(Some(std::rc::Rc::downgrade(&div)));
            }
            *div.children.borrow_mut() = moved;
            div.parent.set(Some(std::rc::Rc::downgrade(&parent)));
            replacement.push(div);
        }
        let mut siblings = parent.children.borrow_mut();
        if let Some(pos) = siblings.iter().position(|c| std::rc::Rc::ptr_eq(c, &table)) {
            siblings.splice(pos..=pos, replacement);
        }
    }
    Ok(())
}

/// Squeezes a rendered table line: padding around `│` goes, and border lines of box
/// characters shrink to a short rule. Other lines are returned unchanged.
fn squeeze_table_line(line: &str) -> std::borrow::Cow<'_, str> {
    const BOX: &[char] = &[
        '─', '│', '┼', '┬', '┴', '├', '┤', '┌', '┐', '└', '┘', '═', '╪',
    ];
    if !line.contains(BOX) {
        return line.into();
    }
    if line.chars().all(|c| BOX.contains(&c) || c == ' ') {
        return if line.contains('─') {
            "───".into()
        } else {
            "".into()
        };
    }
    let mut out = String::with_capacity(line.len());
    for (i, cell) in line.split('│').enumerate() {
        if i > 0 {
            out.push_str(" │ ");
        }
        out.push_str(cell.trim());
    }
    out.trim().to_string().into()
}

/// Right-trims lines, collapses 3+ newlines to 2, trims the ends, then removes the
/// sentinels and returns the hidden byte ranges in the final text.
fn tidy(raw: &str) -> (String, Vec<Range<usize>>) {
    let mut joined = String::with_capacity(raw.len());
    let mut blank_run = 0usize;
    for line in raw.lines() {
        let line = squeeze_table_line(line.trim_end());
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
    fn layout_tables_become_blocks() {
        let r = render(
            "<table><tr><td><p>Menu one</p><p>Menu two</p></td><td><p>Article text here.</p>\
             <table><tr><th>K</th><th>V</th></tr><tr><td>a</td><td>1</td></tr></table></td></tr></table>",
        );
        assert!(r.text.contains("Menu one\n\nMenu two"), "{}", r.text);
        assert!(
            r.text.lines().any(|l| l == "Article text here."),
            "layout cells are not padded into columns: {}",
            r.text
        );
        assert!(
            r.text.lines().any(|l| l == "a │ 1"),
            "data table kept: {}",
            r.text
        );
        assert!(r.text.len() < 200, "no padding: {:?}", r.text);
    }

    #[test]
    fn hostile_nesting_is_refused_quickly() {
        let html = format!("{}x", "<div>".repeat(50_000));
        let started = std::time::Instant::now();
        let e = html_to_text(&html, None).expect_err("refused");
        assert!(e.to_string().contains("nests elements"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // Unclosed paragraphs and list items, void elements and script text do not count.
        let soup =
            "<p>a<li>b<br><img src=x><script>if (a<b) { '<div><div>' }</script>".repeat(5000);
        assert!(estimate_depth(&soup) < 5, "{}", estimate_depth(&soup));
        assert_eq!(estimate_depth("<div><span>x</span></div><div/>"), 2);
    }

    #[test]
    fn deeply_nested_pages_render_on_a_2_mib_stack() {
        // tokio's blocking threads have 2 MiB stacks; conversion must fit in one whatever
        // the nesting (2,900 levels, just under the refusal limit, flattened at 256).
        let depth = 2_900;
        for (open, close) in [
            ("<div>", "</div>"),
            ("<ul><li>", "</li></ul>"),
            ("<table><tr><td>", "</td></tr></table>"),
            ("<blockquote>", "</blockquote>"),
            ("<b><i>", "</i></b>"),
            ("<ol><li><table><tr><th>", "</th></tr></table></li></ol>"),
        ] {
            let html = format!(
                "{}deep <b>bold</b> text{}",
                open.repeat(depth / 2),
                close.repeat(depth / 2)
            );
            let r = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || html_to_text(&html, None))
                .expect("thread")
                .join()
                .expect("no panic");
            let text = r.expect("render").text;
            assert!(
                collapse(&text).contains("deep bold text"),
                "{open}: {}",
                &text[..text.len().min(200)]
            );
        }
    }

    fn collapse(s: &str) -> String {
        s.replace(['*', '│', '>', '#'], " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// An article page: site navigation, an article with an infobox and a data table, a
    /// sidebar and a footer.
    fn article_page() -> String {
        let para = "The quick brown fox lives in the northern forest and hunts at dawn, \
                    as field researchers have observed over many seasons of study. ";
        format!(
            "<html><head><title>Foxes - Example Wiki</title>\
             <meta name=\"description\" content=\"A short standfirst about foxes.\"></head><body>\
             <nav id=\"site-nav\"><ul><li><a href=\"/\">Main page</a></li>\
             <li><a href=\"/random\">Random article</a></li><li><a href=\"/c\">Contribute</a></li>\
             </ul></nav><div id=\"content\"><article><h1>Foxes</h1>\
             <table class=\"infobox\"><tr><th>Kingdom</th><td>Animalia</td></tr>\
             <tr><th>Order</th><td>Carnivora</td></tr></table>\
             <p>{p1}</p><p>{p2}</p><p>{p3}</p>\
             <table class=\"wikitable\">\
             <tr><th>Year</th><th>Count</th></tr><tr><td>2019</td><td>41</td></tr></table>\
             <p>{p4}</p></article></div>\
             <div class=\"sidebar\"><a href=\"/s1\">Sponsored link one</a></div>\
             <footer class=\"footer\"><a href=\"/privacy\">Privacy policy</a></footer>\
             </body></html>",
            p1 = para.repeat(3),
            p2 = para.repeat(2),
            p3 = para.repeat(2),
            p4 = para.repeat(2),
        )
    }

    #[test]
    fn auto_keeps_the_article_and_its_tables_and_drops_navigation() {
        let base = url::Url::parse("https://wiki.example/Foxes").expect("url");
        let html = article_page();
        let full = html_to_text_as(&html, Some(&base), MainContent::Off).expect("full");
        let art = html_to_text_as(&html, Some(&base), MainContent::Auto).expect("article");
        assert!(full.omitted.is_none());
        assert!(full.text.contains("Random article") && full.text.contains("Privacy policy"));
        let omitted = art.omitted.as_ref().expect("article view");
        let note = omitted.note();
        assert!(art.text.ends_with(&format!("\n\n{note}")), "{}", art.text);
        assert_eq!(
            omitted.article_chars + 2 + note.chars().count(),
            art.text.chars().count()
        );
        assert_eq!(omitted.full_chars, full.text.chars().count());
        for gone in [
            "Main page",
            "Random article",
            "Contribute",
            "Privacy policy",
            "Sponsored",
        ] {
            assert!(!art.text.contains(gone), "{gone} kept:\n{}", art.text);
        }
        for kept in [
            "Kingdom │ Animalia",
            "2019 │ 41",
            "hunts at dawn",
            "A short standfirst about foxes.",
        ] {
            assert!(art.text.contains(kept), "{kept} lost:\n{}", art.text);
        }
        assert_eq!(art.text.matches("# Foxes").count(), 1, "{}", art.text);
        assert_eq!(art.title.as_deref(), Some("Foxes - Example Wiki"));
        // Links stay followable and hidden from find.
        assert!(
            art.hidden
                .iter()
                .all(|r| art.text[r.clone()].starts_with("https://"))
        );
        assert!(note.contains(&format!(
            "{} of the page's {}",
            omitted.article_chars, omitted.full_chars
        )));
    }

    #[test]
    fn auto_falls_back_to_the_whole_page_when_not_confident() {
        // Too little text for Readability's thresholds: the whole page is shown.
        let html = "<html><body><nav><a href=\"/\">Home</a></nav><p>Short note.</p></body></html>";
        let r = html_to_text_as(html, None, MainContent::Auto).expect("render");
        assert!(r.omitted.is_none());
        assert!(
            r.text.contains("Home") && r.text.contains("Short note."),
            "{}",
            r.text
        );
        // Deep pages are not given to Readability (its walks recurse) but still render.
        let deep = format!("{}deep text{}", "<div>".repeat(400), "</div>".repeat(400));
        let r = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || html_to_text_as(&deep, None, MainContent::Auto))
            .expect("thread")
            .join()
            .expect("no panic")
            .expect("render");
        assert!(r.omitted.is_none() && r.text.contains("deep text"));
    }

    #[test]
    fn main_content_policy_values() {
        assert_eq!(MainContent::parse("auto"), Ok(MainContent::Auto));
        assert_eq!(MainContent::parse(" off "), Ok(MainContent::Off));
        let e = MainContent::parse("article").expect_err("refused");
        assert!(e.contains("off or auto") && e.contains("article"), "{e}");
    }

    #[test]
    fn blank_runs_collapse() {
        let r = render("<p>a</p><br><br><br><br><p>b</p>");
        assert!(!r.text.contains("\n\n\n"), "{:?}", r.text);
    }
}
