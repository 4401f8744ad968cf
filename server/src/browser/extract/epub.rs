//! EPUB to markdown (markitdown's layout): a metadata block (`**Title:**`, `**Authors:**`,
//! `**Language:**`, `**Publisher:**`, `**Date:**`, `**Description:**`, `**Identifier:**`)
//! then every spine document in reading order through the browser's HTML converter. The
//! navigation document is skipped. Members are read under the package's decompression cap.

use super::package::{Package, resolve};
use super::xml::Element;
use super::{ExtractError, ExtractPolicy, Extracted};

/// Converts an EPUB package.
///
/// # Errors
/// [`ExtractError::Corrupt`] without `META-INF/container.xml` or its package document.
pub fn extract(bytes: &[u8], policy: &ExtractPolicy) -> Result<Extracted, ExtractError> {
    let mut pkg = Package::open(bytes, policy, "EPUB")?;
    let container = pkg
        .xml("META-INF/container.xml")?
        .ok_or_else(|| ExtractError::Corrupt("EPUB: no META-INF/container.xml".into()))?;
    let opf_path = container
        .find("rootfile")
        .and_then(|r| r.attr("full-path"))
        .and_then(|p| resolve("", p))
        .ok_or_else(|| ExtractError::Corrupt("EPUB: container.xml names no rootfile".into()))?;
    let opf = pkg.xml(&opf_path)?.ok_or_else(|| {
        ExtractError::Corrupt(format!("EPUB: missing package document `{opf_path}`"))
    })?;
    let dir = opf_path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let meta = opf.find("metadata");
    let all = |name: &str| -> Vec<String> {
        let mut v = Vec::new();
        if let Some(m) = meta {
            m.find_all(name, &mut v);
        }
        v.into_iter()
            .map(|e| e.text().trim().to_string())
            .filter(|t| !t.is_empty())
            .collect()
    };
    let title = all("title").into_iter().next();
    let mut out = String::new();
    for (label, key) in [
        ("Title", "title"),
        ("Authors", "creator"),
        ("Language", "language"),
        ("Publisher", "publisher"),
        ("Date", "date"),
        ("Description", "description"),
        ("Identifier", "identifier"),
    ] {
        let v = all(key);
        if !v.is_empty() {
            out.push_str(&format!("**{label}:** {}\n", v.join(", ")));
        }
    }
    out.push('\n');
    let mut items = Vec::new();
    if let Some(m) = opf.find("manifest") {
        m.find_all("item", &mut items);
    }
    let manifest: Vec<(&str, &str, &str)> = items
        .iter()
        .filter_map(|i: &&Element| {
            Some((
                i.attr("id")?,
                i.attr("href")?,
                i.attr("properties").unwrap_or(""),
            ))
        })
        .collect();
    let mut refs = Vec::new();
    if let Some(s) = opf.find("spine") {
        s.find_all("itemref", &mut refs);
    }
    for r in refs {
        let Some(idref) = r.attr("idref") else {
            continue;
        };
        let Some((_, href, props)) = manifest.iter().find(|(id, _, _)| *id == idref) else {
            continue;
        };
        if props.split_whitespace().any(|p| p == "nav") {
            continue;
        }
        let Some(path) = resolve(dir, &percent_decode(href)) else {
            continue;
        };
        let Some(doc) = pkg.read(&path)? else {
            continue;
        };
        let chapter = super::html(&doc, None)?;
        out.push_str(&chapter.text);
        out.push_str("\n\n");
    }
    Ok(Extracted {
        title,
        text: out,
        hidden: Vec::new(),
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && s.is_char_boundary(i + 1)
            && s.is_char_boundary(i + 3)
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
