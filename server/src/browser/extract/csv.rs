//! CSV/TSV to a markdown table (first row as header), as markitdown's converter: the encoding
//! is detected (BOM, valid UTF-8, else chardetng — Shift-JIS/cp932 included) and the
//! delimiter is a tab for `.tsv` names or a tab-only first line, else a comma. Ragged rows
//! are padded; a file that is not tabular still comes out as text, never an error.

/// Converts CSV bytes.
pub fn extract(bytes: &[u8], name: &str) -> String {
    let text = crate::browser::fetch::decode_text(bytes, None, false);
    let first = text.lines().next().unwrap_or("");
    let delim = if name.to_ascii_lowercase().ends_with(".tsv")
        || (first.contains('\t') && !first.contains(','))
    {
        b'\t'
    } else {
        b','
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delim)
        .from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for rec in reader.records() {
        match rec {
            Ok(r) => rows.push(r.iter().map(str::to_string).collect::<Vec<_>>()),
            // Malformed quoting: show the raw text instead.
            Err(_) => return text,
        }
    }
    super::markdown_table(&rows)
}
