//! PDF text with PDFium (pdfium-render), which keeps reading order, puts a table row on one
//! line and decodes CJK correctly (measured here against pdf-extract and lopdf).
//!
//! `libpdfium.so` is loaded once per process, from `browser.extract.pdfium_library`, else
//! `$SIBYL_PDFIUM_LIBRARY`, else `/opt/sibyl/lib/libpdfium.so` (put there by
//! `scripts/setup.d/browser-files.sh` from the `pypdfium2` wheel), else the system library.
//! Pages are separated by a blank line and a `<!-- Page N -->` marker is not added (the
//! paper's pdfminer output had none).

use std::sync::OnceLock;

use pdfium_render::prelude::*;

use super::{ExtractError, ExtractPolicy, Extracted};

/// Default install location of `libpdfium.so`.
pub const DEFAULT_PDFIUM: &str = "/opt/sibyl/lib/libpdfium.so";

static PDFIUM: OnceLock<Result<Pdfium, String>> = OnceLock::new();

pub(crate) fn pdfium(policy: &ExtractPolicy) -> Result<&'static Pdfium, ExtractError> {
    PDFIUM
        .get_or_init(|| {
            let mut tried = Vec::new();
            let mut candidates = Vec::new();
            if let Some(p) = &policy.pdfium_library {
                candidates.push(p.clone());
            }
            if let Ok(p) = std::env::var("SIBYL_PDFIUM_LIBRARY")
                && !p.is_empty()
            {
                candidates.push(p.into());
            }
            candidates.push(DEFAULT_PDFIUM.into());
            for c in candidates {
                match Pdfium::bind_to_library(&c) {
                    Ok(b) => return Ok(Pdfium::new(b)),
                    Err(e) => tried.push(format!("{}: {e}", c.display())),
                }
            }
            match Pdfium::bind_to_system_library() {
                Ok(b) => Ok(Pdfium::new(b)),
                Err(e) => {
                    tried.push(format!("system library: {e}"));
                    Err(format!(
                        "PDF text extraction needs libpdfium.so (run scripts/setup, or set \
                         browser.extract.pdfium_library); tried {}",
                        tried.join("; ")
                    ))
                }
            }
        })
        .as_ref()
        .map_err(|e| ExtractError::Unavailable(e.clone()))
}

/// Extracts the text of every page.
///
/// # Errors
/// [`ExtractError::Unavailable`] without libpdfium; [`ExtractError::Corrupt`] for a PDF
/// PDFium cannot open (including password-protected ones).
pub fn extract(bytes: &[u8], policy: &ExtractPolicy) -> Result<Extracted, ExtractError> {
    let pdfium = pdfium(policy)?;
    let doc = pdfium
        .load_pdf_from_byte_slice(bytes, None)
        .map_err(|e| ExtractError::Corrupt(format!("PDF: {e}")))?;
    let title = doc
        .metadata()
        .get(PdfDocumentMetadataTagType::Title)
        .map(|t| t.value().trim().to_string())
        .filter(|t| !t.is_empty());
    let mut text = String::new();
    for page in doc.pages().iter() {
        let t = page
            .text()
            .map_err(|e| ExtractError::Corrupt(format!("PDF page text: {e}")))?;
        let s = t.all();
        text.push_str(&s.replace('\r', ""));
        text.push_str("\n\n");
        if text.len() > policy.max_text_chars.saturating_mul(4) {
            break;
        }
    }
    Ok(Extracted {
        title,
        text,
        hidden: Vec::new(),
    })
}
