//! Text extraction from downloaded files, shown through the browser's viewport.
//!
//! Layouts follow Sibyl's converters (the markitdown lineage) where they had one: PDF text in
//! reading order; DOCX as markdown (`#` headings, tables, images as
//! `![alt](data:image/png;base64...)`); one `## <sheet>` markdown table per spreadsheet sheet;
//! PPTX with `<!-- Slide number: N -->`, titles, tables, charts, image alt text and
//! `### Notes:`; CSV as a markdown table; notebooks as markdown with fenced code; EPUB
//! metadata then chapters; RSS/Atom as an item list; ZIP as a member list with each
//! convertible member converted; images as OCR text (tesseract) plus EXIF metadata.
//! Audio gets a clear "not supported" error (no speech recognition, never a fake transcript).
//!
//! Every format is parsed from memory with caps ([`ExtractPolicy`]): decompressed bytes,
//! archive entries, output characters, OCR time. Nothing here opens a URL or a file outside
//! the package being read.

pub mod csv;
pub mod docx;
pub mod epub;
pub mod feed;
pub mod image;
pub mod ipynb;
pub mod package;
pub mod pdf;
pub mod pptx;
pub mod xlsx;
pub mod xml;
pub mod zipfile;

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::policy::PolicyError;

/// The file types the browser recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// PDF (`%PDF-`).
    Pdf,
    /// Word 2007+ (`.docx`).
    Docx,
    /// Excel 2007+ (`.xlsx`, `.xlsm`).
    Xlsx,
    /// Excel 97-2003 (`.xls`).
    Xls,
    /// PowerPoint 2007+ (`.pptx`).
    Pptx,
    /// Comma- or tab-separated values.
    Csv,
    /// JSON.
    Json,
    /// Jupyter notebook.
    Ipynb,
    /// HTML / XHTML.
    Html,
    /// XML, including RSS and Atom feeds.
    Xml,
    /// EPUB e-book.
    Epub,
    /// Other ZIP archives.
    Zip,
    /// Plain text (and source code).
    Text,
    /// A raster image (PNG, JPEG, GIF, BMP, TIFF, WebP).
    Image,
    /// Audio (MP3, WAV, OGG, FLAC, M4A).
    Audio,
    /// A known format the browser cannot convert (legacy `.doc`/`.ppt`, video, ...); the
    /// string names it.
    Unsupported(&'static str),
    /// Nothing recognised.
    Unknown,
}

impl FileKind {
    /// A human name for messages, e.g. `PDF`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pdf => "PDF",
            Self::Docx => "DOCX",
            Self::Xlsx => "XLSX",
            Self::Xls => "XLS",
            Self::Pptx => "PPTX",
            Self::Csv => "CSV",
            Self::Json => "JSON",
            Self::Ipynb => "Jupyter notebook",
            Self::Html => "HTML",
            Self::Xml => "XML",
            Self::Epub => "EPUB",
            Self::Zip => "ZIP",
            Self::Text => "plain text",
            Self::Image => "image",
            Self::Audio => "audio",
            Self::Unsupported(n) => n,
            Self::Unknown => "unknown binary data",
        }
    }
}

/// A converted file.
#[derive(Debug, Clone, Default)]
pub struct Extracted {
    /// A title found in the file (document title, `<title>`), if any.
    pub title: Option<String>,
    /// The text shown through the viewport.
    pub text: String,
    /// Byte ranges of `text` hidden from find-in-page (HTML link targets).
    pub hidden: Vec<Range<usize>>,
}

/// Why a file could not be converted. Every message names the file type.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    /// The type is not one the browser converts.
    #[error("unsupported file type: {0}")]
    Unsupported(String),
    /// The file claims a type but cannot be read as it.
    #[error("corrupt or unreadable file: {0}")]
    Corrupt(String),
    /// A decompression or size cap was hit.
    #[error("file too large to convert: {0}")]
    TooLarge(String),
    /// A converter's external part is missing (libpdfium, tesseract).
    #[error("converter unavailable: {0}")]
    Unavailable(String),
}

/// `[browser.extract]` as written in the policy file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawExtractPolicy {
    /// See [`ExtractPolicy::max_unpacked_bytes`].
    pub max_unpacked_bytes: u64,
    /// See [`ExtractPolicy::max_archive_entries`].
    pub max_archive_entries: u64,
    /// See [`ExtractPolicy::max_text_chars`].
    pub max_text_chars: u64,
    /// See [`ExtractPolicy::ocr`].
    pub ocr: bool,
    /// OCR time limit in milliseconds.
    pub ocr_timeout_ms: u64,
    /// See [`ExtractPolicy::tesseract`].
    pub tesseract: String,
    /// See [`ExtractPolicy::pdfium_library`]; empty for the default search.
    pub pdfium_library: String,
    /// See [`ExtractPolicy::pdf_timeout`] (milliseconds).
    pub pdf_timeout_ms: u64,
    /// See [`ExtractPolicy::pdf_memory_mb`].
    pub pdf_memory_mb: u64,
}

impl Default for RawExtractPolicy {
    fn default() -> Self {
        Self {
            max_unpacked_bytes: 200 << 20,
            max_archive_entries: 10_000,
            max_text_chars: 20_000_000,
            ocr: true,
            ocr_timeout_ms: 30_000,
            tesseract: "tesseract".into(),
            pdfium_library: String::new(),
            pdf_timeout_ms: 30_000,
            pdf_memory_mb: 1024,
        }
    }
}

/// Checked extraction limits (`[browser.extract]`).
#[derive(Debug, Clone)]
pub struct ExtractPolicy {
    /// Total bytes that may be decompressed out of one archive or OOXML/EPUB package.
    pub max_unpacked_bytes: usize,
    /// Most entries an archive or package may list.
    pub max_archive_entries: usize,
    /// Longest converted text kept, in characters; longer text is cut with a note.
    pub max_text_chars: usize,
    /// Whether images are run through OCR.
    pub ocr: bool,
    /// OCR time limit per image.
    pub ocr_timeout: Duration,
    /// The tesseract program (a name looked up in `PATH`, or a path).
    pub tesseract: String,
    /// `libpdfium.so` to load; `None`: `$SIBYL_PDFIUM_LIBRARY`, then
    /// `/opt/sibyl/lib/libpdfium.so` (installed by `scripts/setup`), then the system library.
    pub pdfium_library: Option<PathBuf>,
    /// Wall-clock limit of the sandboxed child process that parses one PDF
    /// ([`pdf`](self::pdf)); its CPU-time limit is this, rounded up, plus 1 s.
    pub pdf_timeout: Duration,
    /// Address-space limit of that child process (MiB).
    pub pdf_memory_mb: u64,
}

impl Default for ExtractPolicy {
    fn default() -> Self {
        // The raw defaults are always in range.
        Self::check(&RawExtractPolicy::default(), "<default>").unwrap_or(Self {
            max_unpacked_bytes: 200 << 20,
            max_archive_entries: 10_000,
            max_text_chars: 20_000_000,
            ocr: true,
            ocr_timeout: Duration::from_secs(30),
            tesseract: "tesseract".into(),
            pdfium_library: None,
            pdf_timeout: Duration::from_secs(30),
            pdf_memory_mb: 1024,
        })
    }
}

impl ExtractPolicy {
    /// Checks the raw section.
    ///
    /// # Errors
    /// [`PolicyError::Invalid`] naming the `browser.extract.*` key out of range.
    pub fn check(raw: &RawExtractPolicy, origin: &str) -> Result<Self, PolicyError> {
        let bad = |key: &str, message: String| PolicyError::Invalid {
            origin: origin.to_string(),
            key: format!("browser.extract.{key}"),
            message,
        };
        let range = |key: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(usize::try_from(v).unwrap_or(usize::MAX))
            } else {
                Err(bad(key, format!("must be between {lo} and {hi}, got {v}")))
            }
        };
        let pdfium = raw.pdfium_library.trim();
        let pdfium_library = if pdfium.is_empty() {
            None
        } else if !std::path::Path::new(pdfium).is_absolute() {
            return Err(bad(
                "pdfium_library",
                format!("must be an absolute path, got `{pdfium}`"),
            ));
        } else {
            Some(PathBuf::from(pdfium))
        };
        if raw.tesseract.trim().is_empty() {
            return Err(bad("tesseract", "must not be empty".into()));
        }
        Ok(Self {
            max_unpacked_bytes: range("max_unpacked_bytes", raw.max_unpacked_bytes, 1024, 4 << 30)?,
            max_archive_entries: range(
                "max_archive_entries",
                raw.max_archive_entries,
                1,
                1_000_000,
            )?,
            max_text_chars: range("max_text_chars", raw.max_text_chars, 1024, 1 << 30)?,
            ocr: raw.ocr,
            ocr_timeout: Duration::from_millis(range(
                "ocr_timeout_ms",
                raw.ocr_timeout_ms,
                100,
                600_000,
            )? as u64),
            tesseract: raw.tesseract.trim().to_string(),
            pdfium_library,
            pdf_timeout: Duration::from_millis(range(
                "pdf_timeout_ms",
                raw.pdf_timeout_ms,
                100,
                600_000,
            )? as u64),
            pdf_memory_mb: range("pdf_memory_mb", raw.pdf_memory_mb, 64, 65_536)? as u64,
        })
    }
}

/// Converts `bytes` of type `kind` to text. Blocking and CPU-bound (PDF, OCR): call it from
/// `spawn_blocking`. `name` is the file name (used for ZIP members and image captions).
///
/// # Errors
/// [`ExtractError`] naming the type: unsupported, corrupt, over a cap, or a missing
/// converter.
pub fn extract(
    kind: FileKind,
    bytes: &[u8],
    name: &str,
    policy: &ExtractPolicy,
) -> Result<Extracted, ExtractError> {
    let mut out = extract_inner(kind, bytes, name, policy, 0)?;
    out.text = tidy(&out.text);
    if out.text.chars().count() > policy.max_text_chars {
        let cut = out
            .text
            .char_indices()
            .nth(policy.max_text_chars)
            .map(|(i, _)| i)
            .unwrap_or(out.text.len());
        out.text.truncate(cut);
        out.hidden.retain(|r| r.end <= cut);
        out.text.push_str(&format!(
            "\n\n[Text cut at browser.extract.max_text_chars = {} characters.]",
            policy.max_text_chars
        ));
    }
    Ok(out)
}

/// `depth` counts archive nesting (a ZIP inside a ZIP is listed, not opened).
fn extract_inner(
    kind: FileKind,
    bytes: &[u8],
    name: &str,
    policy: &ExtractPolicy,
    depth: usize,
) -> Result<Extracted, ExtractError> {
    let plain = |text: String| Extracted {
        title: None,
        text,
        hidden: Vec::new(),
    };
    match kind {
        FileKind::Pdf => pdf::extract(bytes, policy),
        FileKind::Docx => docx::extract(bytes, policy),
        FileKind::Xlsx | FileKind::Xls => xlsx::extract(bytes, kind, policy).map(plain),
        FileKind::Pptx => pptx::extract(bytes, policy).map(plain),
        FileKind::Csv => Ok(plain(csv::extract(bytes, name))),
        FileKind::Json => Ok(plain(json_text(bytes))),
        FileKind::Ipynb => ipynb::extract(bytes),
        FileKind::Html => html(bytes, None),
        FileKind::Xml => feed::extract(bytes),
        FileKind::Epub => epub::extract(bytes, policy),
        FileKind::Zip => zipfile::extract(bytes, name, policy, depth),
        FileKind::Text => Ok(plain(super::fetch::decode_text(bytes, None, false))),
        FileKind::Image => image::extract(bytes, name, policy).map(plain),
        FileKind::Audio => Err(ExtractError::Unsupported(
            "audio: speech recognition is not available on this server, so no transcript \
             can be made"
                .into(),
        )),
        FileKind::Unsupported(n) => Err(ExtractError::Unsupported(n.to_string())),
        FileKind::Unknown => Err(ExtractError::Unsupported(format!(
            "no known format signature in {} bytes of binary data (not PDF, Office, \
             OpenDocument, image, audio, archive or text)",
            bytes.len()
        ))),
    }
}

/// HTML bytes (charset sniffed) through the browser's HTML converter.
pub(crate) fn html(bytes: &[u8], base: Option<&url::Url>) -> Result<Extracted, ExtractError> {
    let text = super::fetch::decode_text(bytes, None, true);
    super::convert::html_to_text(&text, base)
        .map(|r| Extracted {
            title: r.title,
            text: r.text,
            hidden: r.hidden,
        })
        .map_err(|e| ExtractError::Corrupt(format!("HTML: {e}")))
}

/// JSON pretty-printed (key order kept as written); invalid JSON is shown as text.
fn json_text(bytes: &[u8]) -> String {
    let text = super::fetch::decode_text(bytes, None, false);
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or(text),
        Err(_) => text,
    }
}

/// Sibyl's post-processing: right-trim lines, collapse 3+ newlines to 2, trim the ends.
pub fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0usize;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

/// Escapes a table cell for a markdown pipe table (pipes and newlines).
pub fn cell(s: &str) -> String {
    s.trim()
        .replace('|', "\\|")
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

/// A markdown pipe table; the first row is the header. Rows are padded to the widest row.
pub fn markdown_table(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        out.push('|');
        for c in 0..width {
            out.push(' ');
            out.push_str(&cell(row.get(c).map(String::as_str).unwrap_or("")));
            out.push_str(" |");
        }
        out.push('\n');
        if i == 0 {
            out.push('|');
            for _ in 0..width {
                out.push_str(" --- |");
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::browser::download::detect;

    fn fixtures() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/documents")
    }

    /// Every corpus file against markitdown's expectations (must_include / must_not_include).
    #[test]
    fn corpus_expectations_hold() {
        let dir = fixtures();
        let exp: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join("expectations.json")).expect("expectations.json"),
        )
        .expect("json");
        let policy = ExtractPolicy::default();
        let mut failures = Vec::new();
        for (name, e) in exp["files"].as_object().expect("files") {
            let bytes = std::fs::read(dir.join(name)).expect("fixture");
            let kind = detect(name, None, None, &bytes);
            if name == "random.bin" {
                let err = extract(kind, &bytes, name, &policy).expect_err("random.bin");
                assert!(err.to_string().contains("unsupported file type"), "{err}");
                continue;
            }
            let out = match extract(kind, &bytes, name, &policy) {
                Ok(o) => o.text,
                Err(err) => {
                    failures.push(format!("{name} ({kind:?}): {err}"));
                    continue;
                }
            };
            for s in e["must_include"].as_array().expect("inc") {
                let s = s.as_str().expect("str");
                if !out.contains(s) {
                    failures.push(format!("{name}: missing {s:?}"));
                }
            }
            for s in e["must_not_include"].as_array().expect("exc") {
                let s = s.as_str().expect("str");
                if out.contains(s) {
                    failures.push(format!("{name}: must not include {s:?}"));
                }
            }
            if std::env::var_os("SHOW_EXTRACT").is_some() {
                eprintln!("===== {name}\n{out}");
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
