//! PPTX to markdown in Sibyl's (markitdown's) layout: per slide in presentation order
//! `<!-- Slide number: N -->`, the title shape as `# title`, other text, tables as pipe
//! tables, pictures as `![alt](ShapeName.jpg)`, charts as `### Chart: title` plus a table of
//! the cached series values, then `### Notes:` with the slide's notes. Group shapes are
//! descended. External relationships are never followed.

use super::package::{Package, Rel};
use super::xml::Element;
use super::{ExtractError, ExtractPolicy, markdown_table};

/// Converts a PPTX package.
///
/// # Errors
/// [`ExtractError::Corrupt`] without `ppt/presentation.xml`; [`ExtractError::TooLarge`] past
/// the decompression cap.
pub fn extract(bytes: &[u8], policy: &ExtractPolicy) -> Result<String, ExtractError> {
    let mut pkg = Package::open(bytes, policy, "PPTX")?;
    let pres = pkg
        .xml("ppt/presentation.xml")?
        .ok_or_else(|| ExtractError::Corrupt("PPTX: no ppt/presentation.xml".into()))?;
    let pres_rels = pkg.rels("ppt/presentation.xml")?;
    let mut ids = Vec::new();
    pres.find_all("sldId", &mut ids);
    let mut slides: Vec<String> = ids
        .iter()
        .filter_map(|s| s.attr_q("r:id"))
        .filter_map(|id| pres_rels.iter().find(|r| r.id == id && !r.external))
        .map(|r| r.target.clone())
        .collect();
    if slides.is_empty() {
        // No slide list: fall back to the slide parts by number.
        let mut named: Vec<(u32, String)> = pkg
            .names()
            .into_iter()
            .filter_map(|n| {
                let num = n
                    .strip_prefix("ppt/slides/slide")?
                    .strip_suffix(".xml")?
                    .parse()
                    .ok()?;
                Some((num, n))
            })
            .collect();
        named.sort();
        slides = named.into_iter().map(|(_, n)| n).collect();
    }
    let mut out = String::new();
    for (i, part) in slides.iter().enumerate() {
        out.push_str(&format!("\n\n<!-- Slide number: {} -->\n", i + 1));
        let Some(slide) = pkg.xml(part)? else {
            continue;
        };
        let rels = pkg.rels(part)?;
        if let Some(tree) = slide.find("spTree") {
            shapes(&mut pkg, tree, &rels, &mut out)?;
        }
        if let Some(notes_rel) = rels.iter().find(|r| r.kind == "notesSlide" && !r.external)
            && let Some(notes) = pkg.xml(&notes_rel.target.clone())?
        {
            let mut text = String::new();
            if let Some(tree) = notes.find("spTree") {
                for sp in tree.elements().filter(|e| e.name == "sp") {
                    // Skip the slide image and slide number placeholders.
                    let ph = sp.find("ph").and_then(|p| p.attr("type"));
                    if matches!(ph, Some("sldImg" | "sldNum")) {
                        continue;
                    }
                    text.push_str(&paragraphs(sp));
                }
            }
            if !text.trim().is_empty() {
                out.push_str(&format!("\n### Notes:\n{}\n", text.trim()));
            }
        }
    }
    Ok(out)
}

fn shapes(
    pkg: &mut Package<'_>,
    tree: &Element,
    rels: &[Rel],
    out: &mut String,
) -> Result<(), ExtractError> {
    for sh in tree.elements() {
        match sh.name.as_str() {
            "sp" => {
                let text = paragraphs(sh);
                if text.trim().is_empty() {
                    continue;
                }
                let ph = sh.find("ph").and_then(|p| p.attr("type"));
                if matches!(ph, Some("title" | "ctrTitle")) {
                    out.push_str(&format!("# {}\n", text.trim().replace('\n', " ")));
                } else {
                    out.push_str(text.trim());
                    out.push('\n');
                }
            }
            "pic" => {
                let nv = sh.find("cNvPr");
                let alt = nv
                    .and_then(|n| n.attr("descr"))
                    .unwrap_or("")
                    .replace(['\n', '\r'], " ");
                let name: String = nv
                    .and_then(|n| n.attr("name"))
                    .unwrap_or("image")
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push_str(&format!("\n![{}]({name}.jpg)\n", alt.trim()));
            }
            "graphicFrame" => {
                if let Some(tbl) = sh.find("tbl") {
                    let rows: Vec<Vec<String>> = tbl
                        .elements()
                        .filter(|r| r.name == "tr")
                        .map(|tr| {
                            tr.elements()
                                .filter(|c| c.name == "tc")
                                .map(|tc| {
                                    paragraphs(tc)
                                        .split_whitespace()
                                        .collect::<Vec<_>>()
                                        .join(" ")
                                })
                                .collect()
                        })
                        .collect();
                    out.push('\n');
                    out.push_str(&markdown_table(&rows));
                } else if let Some(chart) = sh.find("chart") {
                    let target = chart
                        .attr_q("r:id")
                        .and_then(|id| rels.iter().find(|r| r.id == id && !r.external))
                        .map(|r| r.target.clone());
                    if let Some(t) = target
                        && let Some(doc) = pkg.xml(&t)?
                    {
                        out.push_str(&chart_text(&doc));
                    }
                }
            }
            "grpSp" => shapes(pkg, sh, rels, out)?,
            _ => {}
        }
    }
    Ok(())
}

/// Paragraph texts of a shape's text body, one per line.
fn paragraphs(el: &Element) -> String {
    let mut ps = Vec::new();
    el.find_all("p", &mut ps);
    let mut s = String::new();
    for p in ps {
        let mut line = String::new();
        for c in p.elements() {
            match c.name.as_str() {
                "r" | "fld" => line.push_str(&c.child("t").map(Element::text).unwrap_or_default()),
                "br" => line.push('\n'),
                _ => {}
            }
        }
        s.push_str(&line);
        s.push('\n');
    }
    s
}

fn chart_text(doc: &Element) -> String {
    let title = doc
        .find("title")
        .map(|t| {
            let mut ts = Vec::new();
            t.find_all("t", &mut ts);
            ts.iter().map(|e| e.text()).collect::<String>()
        })
        .unwrap_or_default();
    let mut out = format!("\n\n### Chart: {}\n\n", title.trim());
    let mut series = Vec::new();
    doc.find_all("ser", &mut series);
    let points = |el: Option<&Element>| -> Vec<String> {
        let mut pts = Vec::new();
        if let Some(e) = el {
            e.find_all("pt", &mut pts);
        }
        pts.iter()
            .map(|p| p.child("v").map(Element::text).unwrap_or_default())
            .collect()
    };
    let cats = points(series.first().and_then(|s| s.child("cat")));
    let mut rows = vec![
        std::iter::once("Category".to_string())
            .chain(series.iter().map(|s| {
                let v = points(s.child("tx"));
                v.first().cloned().unwrap_or_else(|| "Series".into())
            }))
            .collect::<Vec<_>>(),
    ];
    let values: Vec<Vec<String>> = series.iter().map(|s| points(s.child("val"))).collect();
    for (i, c) in cats.iter().enumerate() {
        let mut row = vec![c.clone()];
        for v in &values {
            row.push(v.get(i).cloned().unwrap_or_default());
        }
        rows.push(row);
    }
    if rows.len() > 1 {
        out.push_str(&markdown_table(&rows));
    }
    out
}
