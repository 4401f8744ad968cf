//! Jupyter notebooks to markdown (markitdown's layout): markdown cells as written, code
//! cells fenced with the kernel's language, raw cells fenced, and text outputs (stream,
//! `text/plain` results, errors) in a plain fence after their cell. The notebook title is
//! `metadata.title`, else the first `# ` heading. Images in outputs are not inlined.

use serde_json::Value;

use super::{ExtractError, Extracted};

fn source(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// Converts notebook JSON.
///
/// # Errors
/// [`ExtractError::Corrupt`] if it is not a JSON object with a `cells` list.
pub fn extract(bytes: &[u8]) -> Result<Extracted, ExtractError> {
    let nb: Value = serde_json::from_slice(bytes)
        .map_err(|e| ExtractError::Corrupt(format!("Jupyter notebook: invalid JSON: {e}")))?;
    let cells = nb
        .get("cells")
        .and_then(Value::as_array)
        .ok_or_else(|| ExtractError::Corrupt("Jupyter notebook: no `cells` list".into()))?;
    let lang = nb
        .pointer("/metadata/kernelspec/language")
        .or_else(|| nb.pointer("/metadata/language_info/name"))
        .and_then(Value::as_str)
        .unwrap_or("python");
    let mut out = String::new();
    let mut title = nb
        .pointer("/metadata/title")
        .and_then(Value::as_str)
        .map(str::to_string);
    for c in cells {
        let src = source(c.get("source").unwrap_or(&Value::Null));
        match c.get("cell_type").and_then(Value::as_str) {
            Some("markdown") => {
                if title.is_none() {
                    title = src
                        .lines()
                        .find_map(|l| l.strip_prefix("# "))
                        .map(|t| t.trim().to_string());
                }
                out.push_str(&format!("{}\n\n", src.trim_end()));
            }
            Some("code") => {
                out.push_str(&format!("```{lang}\n{}\n```\n\n", src.trim_end()));
                let mut text = String::new();
                for o in c
                    .get("outputs")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(t) = o.get("text") {
                        text.push_str(&source(t));
                    } else if let Some(t) = o.pointer("/data/text~1plain") {
                        text.push_str(&source(t));
                        text.push('\n');
                    } else if o.get("output_type").and_then(Value::as_str) == Some("error") {
                        text.push_str(&format!(
                            "{}: {}\n",
                            o.get("ename").and_then(Value::as_str).unwrap_or("Error"),
                            o.get("evalue").and_then(Value::as_str).unwrap_or("")
                        ));
                    }
                }
                if !text.trim().is_empty() {
                    out.push_str(&format!("Output:\n```\n{}\n```\n\n", text.trim_end()));
                }
            }
            Some("raw") => out.push_str(&format!("```\n{}\n```\n\n", src.trim_end())),
            _ => {}
        }
    }
    Ok(Extracted {
        title,
        text: out,
        hidden: Vec::new(),
    })
}
