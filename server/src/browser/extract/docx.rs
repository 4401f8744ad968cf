//! DOCX to markdown, in the layout of mammoth + markdownify that Sibyl used: `#`..`######`
//! for `heading N` (and `#` for `Title`), `**bold**` and `*italic*` runs, list paragraphs as
//! `* item`, tables as pipe tables, hyperlinks as `[text](url)` when the URL is absolute, and
//! embedded images as `![alt](data:image/png;base64...)` (the data URI is not inlined, as
//! markitdown's default). Footnotes and endnotes follow the body.
//!
//! External relationships (`TargetMode="External"`, e.g. a linked image `r:link`) are never
//! opened: their target is not even shown for images.

use std::collections::HashMap;

use super::package::{Package, Rel};
use super::xml::{Element, Node};
use super::{ExtractError, ExtractPolicy, Extracted, markdown_table};

struct Ctx {
    styles: HashMap<String, String>,
    rels: HashMap<String, Rel>,
}

/// Converts a DOCX package.
///
/// # Errors
/// [`ExtractError::Corrupt`] if `word/document.xml` is missing or malformed;
/// [`ExtractError::TooLarge`] past the decompression cap.
pub fn extract(bytes: &[u8], policy: &ExtractPolicy) -> Result<Extracted, ExtractError> {
    let mut pkg = Package::open(bytes, policy, "DOCX")?;
    let main = main_part(&mut pkg)?;
    let doc = pkg
        .xml(&main)?
        .ok_or_else(|| ExtractError::Corrupt(format!("DOCX: no `{main}` part")))?;
    let mut styles = HashMap::new();
    if let Some(st) = pkg.xml("word/styles.xml")? {
        let mut all = Vec::new();
        st.find_all("style", &mut all);
        for s in all {
            if let (Some(id), Some(name)) = (
                s.attr("styleId"),
                s.child("name").and_then(|n| n.attr("val")),
            ) {
                styles.insert(id.to_string(), name.to_ascii_lowercase());
            }
        }
    }
    let rels = pkg
        .rels(&main)?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    let ctx = Ctx { styles, rels };
    let mut out = String::new();
    let body = doc.find("body").unwrap_or(&doc);
    block(&ctx, body, &mut out);
    for (part, el) in [
        ("word/footnotes.xml", "footnote"),
        ("word/endnotes.xml", "endnote"),
    ] {
        if let Some(notes) = pkg.xml(part)? {
            let mut all = Vec::new();
            notes.find_all(el, &mut all);
            let mut text = String::new();
            for n in all {
                // Separator notes have negative or 0 ids.
                if n.attr("id")
                    .and_then(|i| i.parse::<i64>().ok())
                    .unwrap_or(0)
                    <= 0
                {
                    continue;
                }
                let mut t = String::new();
                block(&ctx, n, &mut t);
                let t = t.trim();
                if !t.is_empty() {
                    text.push_str(&format!("{}. {t}\n", n.attr("id").unwrap_or("")));
                }
            }
            if !text.is_empty() {
                out.push_str(&format!("\n\n### {}s\n\n{text}", capitalise(el)));
            }
        }
    }
    let title = core_title(&mut pkg)?;
    Ok(Extracted {
        title,
        text: out,
        hidden: Vec::new(),
    })
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// The main document part from `_rels/.rels` (usually `word/document.xml`).
fn main_part(pkg: &mut Package<'_>) -> Result<String, ExtractError> {
    Ok(pkg
        .rels("")?
        .into_iter()
        .find(|r| r.kind == "officeDocument" && !r.external)
        .map(|r| r.target)
        .unwrap_or_else(|| "word/document.xml".into()))
}

/// `dc:title` from `docProps/core.xml`.
pub(crate) fn core_title(pkg: &mut Package<'_>) -> Result<Option<String>, ExtractError> {
    Ok(pkg
        .xml("docProps/core.xml")?
        .and_then(|c| c.find("title").map(Element::text))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

fn block(ctx: &Ctx, el: &Element, out: &mut String) {
    for child in el.elements() {
        match child.name.as_str() {
            "p" => paragraph(ctx, child, out),
            "tbl" => {
                let rows: Vec<Vec<String>> = child
                    .elements()
                    .filter(|r| r.name == "tr")
                    .map(|tr| {
                        tr.elements()
                            .filter(|c| c.name == "tc")
                            .map(|tc| {
                                let mut s = String::new();
                                block(ctx, tc, &mut s);
                                s.split_whitespace().collect::<Vec<_>>().join(" ")
                            })
                            .collect()
                    })
                    .collect();
                out.push_str(&markdown_table(&rows));
                out.push('\n');
            }
            // Content controls, inserted text, custom XML: descend.
            "sdt" | "sdtContent" | "customXml" | "ins" | "smartTag" => block(ctx, child, out),
            _ => {}
        }
    }
}

fn paragraph(ctx: &Ctx, p: &Element, out: &mut String) {
    let style = p
        .child("pPr")
        .and_then(|pp| pp.child("pStyle"))
        .and_then(|s| s.attr("val"))
        .map(|id| {
            ctx.styles
                .get(id)
                .cloned()
                .unwrap_or_else(|| id.to_ascii_lowercase())
        })
        .unwrap_or_default();
    let is_list =
        p.child("pPr").is_some_and(|pp| pp.child("numPr").is_some()) || style.contains("list");
    let mut text = String::new();
    inline(ctx, p, &mut text);
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let level = if style == "title" {
        Some(1)
    } else {
        style
            .strip_prefix("heading ")
            .and_then(|n| n.trim().parse::<usize>().ok())
            .map(|n| n.clamp(1, 6))
    };
    match level {
        Some(n) => {
            // Headings are not bold-wrapped.
            let plain = text.replace("**", "");
            out.push_str(&format!("{} {}\n\n", "#".repeat(n), plain));
        }
        None if is_list => out.push_str(&format!("* {text}\n")),
        None => {
            out.push_str(text);
            out.push_str("\n\n");
        }
    }
}

fn inline(ctx: &Ctx, el: &Element, out: &mut String) {
    for n in &el.children {
        let Node::El(c) = n else { continue };
        match c.name.as_str() {
            "r" => run(ctx, c, out),
            "hyperlink" => {
                let mut t = String::new();
                inline(ctx, c, &mut t);
                let url = c
                    .attr_q("r:id")
                    .and_then(|id| ctx.rels.get(id))
                    .filter(|r| {
                        r.external
                            && (r.target.starts_with("http://") || r.target.starts_with("https://"))
                    })
                    .map(|r| r.target.clone());
                match url {
                    Some(u) if !t.trim().is_empty() => {
                        out.push_str(&format!("[{}]({u})", t.trim()))
                    }
                    _ => out.push_str(&t),
                }
            }
            "smartTag" | "ins" | "sdt" | "sdtContent" | "fldSimple" | "customXml" => {
                inline(ctx, c, out)
            }
            _ => {}
        }
    }
}

fn run(ctx: &Ctx, r: &Element, out: &mut String) {
    let props = r.child("rPr");
    let on = |name: &str| {
        props
            .and_then(|p| p.child(name))
            .is_some_and(|b| !matches!(b.attr("val"), Some("0" | "false" | "none")))
    };
    let (bold, italic) = (on("b"), on("i"));
    let mut text = String::new();
    for c in r.elements() {
        match c.name.as_str() {
            "t" => text.push_str(&c.text()),
            "tab" => text.push('\t'),
            "br" | "cr" => text.push('\n'),
            "drawing" | "pict" | "object" => image(ctx, c, &mut text),
            _ => {}
        }
    }
    if text.trim().is_empty() || text.starts_with("![") {
        out.push_str(&text);
        return;
    }
    let lead = &text[..text.len() - text.trim_start().len()];
    let trail = &text[text.trim_end().len()..];
    let core = text.trim();
    let wrapped = match (bold, italic) {
        (true, true) => format!("***{core}***"),
        (true, false) => format!("**{core}**"),
        (false, true) => format!("*{core}*"),
        _ => core.to_string(),
    };
    out.push_str(lead);
    out.push_str(&wrapped);
    out.push_str(trail);
}

fn image(ctx: &Ctx, el: &Element, out: &mut String) {
    let alt = el
        .find("docPr")
        .and_then(|d| d.attr("descr").or_else(|| d.attr("title")))
        .or_else(|| el.find("cNvPr").and_then(|d| d.attr("descr")))
        .unwrap_or("")
        .replace(['\n', '\r'], " ");
    let blip = el.find("blip");
    let embedded = blip
        .and_then(|b| b.attr_q("r:embed"))
        .and_then(|id| ctx.rels.get(id))
        .filter(|r| !r.external);
    match embedded {
        Some(rel) => {
            let mime = match rel
                .target
                .rsplit('.')
                .next()
                .map(str::to_ascii_lowercase)
                .as_deref()
            {
                Some("jpg" | "jpeg") => "image/jpeg",
                Some("gif") => "image/gif",
                Some("emf") => "image/x-emf",
                Some("wmf") => "image/x-wmf",
                Some("svg") => "image/svg+xml",
                _ => "image/png",
            };
            out.push_str(&format!("![{}](data:{mime};base64...)", alt.trim()));
        }
        // A linked (external) image: never fetched, target not shown.
        None if blip.is_some() || !alt.trim().is_empty() => {
            out.push_str(&format!("![{}]()", alt.trim()));
        }
        None => {}
    }
}
