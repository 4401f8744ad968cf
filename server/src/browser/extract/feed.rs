//! XML files: RSS 2.0 and Atom feeds become a markdown list of entries (`## title`, date,
//! link, description converted from HTML); any other XML is shown as its text content, one
//! element's text per line. DTDs and external entities are never loaded.

use super::xml::{self, Element, Node};
use super::{ExtractError, Extracted};

/// Converts XML bytes.
///
/// # Errors
/// [`ExtractError::Corrupt`] for malformed XML.
pub fn extract(bytes: &[u8]) -> Result<Extracted, ExtractError> {
    let text = crate::browser::fetch::decode_text(bytes, None, false);
    let doc = xml::parse(text.as_bytes(), "XML")?;
    let root = doc.elements().next();
    match root.map(|r| r.name.as_str()) {
        Some("rss" | "RDF") => Ok(feed(root.and_then(|r| r.find("channel")).or(root), "item")),
        Some("feed") => Ok(feed(root, "entry")),
        _ => {
            let mut out = String::new();
            lines(&doc, &mut out);
            Ok(Extracted {
                title: None,
                text: out,
                hidden: Vec::new(),
            })
        }
    }
}

fn child_text(e: &Element, name: &str) -> String {
    e.child(name)
        .map(|c| c.text().trim().to_string())
        .unwrap_or_default()
}

fn feed(channel: Option<&Element>, item: &str) -> Extracted {
    let Some(ch) = channel else {
        return Extracted::default();
    };
    let title = child_text(ch, "title");
    let mut out = format!("# {title}\n\n");
    let desc = child_text(ch, "description");
    if !desc.is_empty() {
        out.push_str(&format!("{}\n\n", html_text(&desc)));
    }
    let mut items = Vec::new();
    ch.find_all(item, &mut items);
    for it in items {
        out.push_str(&format!("## {}\n", child_text(it, "title")));
        for d in ["pubDate", "published", "updated", "date"] {
            let v = child_text(it, d);
            if !v.is_empty() {
                out.push_str(&format!("Published on: {v}\n"));
                break;
            }
        }
        let link = it
            .child("link")
            .map(|l| {
                l.attr("href")
                    .map(str::to_string)
                    .unwrap_or_else(|| l.text().trim().to_string())
            })
            .unwrap_or_default();
        if !link.is_empty() {
            out.push_str(&format!("Link: {link}\n"));
        }
        for d in ["description", "summary", "content", "encoded"] {
            let v = child_text(it, d);
            if !v.is_empty() {
                out.push_str(&format!("\n{}\n", html_text(&v)));
                break;
            }
        }
        out.push('\n');
    }
    Extracted {
        title: (!title.is_empty()).then_some(title),
        text: out,
        hidden: Vec::new(),
    }
}

fn html_text(s: &str) -> String {
    if s.contains('<') {
        crate::browser::convert::html_to_text(s, None)
            .map(|r| r.text)
            .unwrap_or_else(|_| s.to_string())
    } else {
        s.to_string()
    }
}

fn lines(e: &Element, out: &mut String) {
    let mut own = String::new();
    for n in &e.children {
        match n {
            Node::Text(t) => own.push_str(t.trim()),
            Node::El(c) => {
                if !own.is_empty() {
                    out.push_str(&own);
                    out.push('\n');
                    own.clear();
                }
                lines(c, out);
            }
        }
    }
    if !own.is_empty() {
        out.push_str(&own);
        out.push('\n');
    }
}
