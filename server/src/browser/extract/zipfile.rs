//! ZIP archives: a listing of every member (name and size), then each convertible member
//! converted under its own `## File: name` heading, as markitdown's ZIP converter. Members
//! share the archive's decompression budget (`browser.extract.max_unpacked_bytes`); a ZIP
//! inside a ZIP is listed but not opened; member names are only displayed, never used as
//! paths.

use super::package::Package;
use super::{ExtractError, ExtractPolicy, Extracted, FileKind};

/// Converts a ZIP archive; `depth` is the archive nesting level (0 for the downloaded file).
///
/// # Errors
/// [`ExtractError::Corrupt`] for an unreadable archive, [`ExtractError::TooLarge`] past the
/// entry or decompression caps.
pub fn extract(
    bytes: &[u8],
    name: &str,
    policy: &ExtractPolicy,
    depth: usize,
) -> Result<Extracted, ExtractError> {
    let mut pkg = Package::open(bytes, policy, "ZIP")?;
    let mut out = format!("Content from the zip file `{name}`:\n\n");
    let mut members = Vec::new();
    for i in 0..pkg.len() {
        if let Some((n, size)) = pkg.entry(i) {
            out.push_str(&format!("* {n} ({size} bytes)\n"));
            if !n.ends_with('/') {
                members.push(n);
            }
        }
    }
    if depth > 0 {
        return Ok(Extracted {
            title: None,
            text: out,
            hidden: Vec::new(),
        });
    }
    out.push('\n');
    for m in members {
        let Some(data) = pkg.read(&m)? else { continue };
        let kind = crate::browser::download::detect(&m, None, None, &data);
        if matches!(
            kind,
            FileKind::Unknown | FileKind::Unsupported(_) | FileKind::Audio
        ) {
            continue;
        }
        let mut sub = policy.clone();
        sub.max_unpacked_bytes = usize::try_from(pkg.remaining()).unwrap_or(usize::MAX);
        out.push_str(&format!("## File: {m}\n\n"));
        match super::extract_inner(kind, &data, &m, &sub, depth + 1) {
            Ok(e) => out.push_str(&e.text),
            Err(e) => out.push_str(&format!("[{m}: {e}]")),
        }
        out.push_str("\n\n");
    }
    Ok(Extracted {
        title: None,
        text: out,
        hidden: Vec::new(),
    })
}
