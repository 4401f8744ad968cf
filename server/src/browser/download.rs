//! `download_file` support: file type detection and saving into the session's scratch
//! directory.
//!
//! The type is guessed as Sibyl's browser did, from (strongest first) magic bytes, the
//! file name's extension (from `Content-Disposition`, else the URL path), then the MIME type,
//! then a text/binary sniff. ZIP containers are told apart by their members (`word/`, `xl/`,
//! `ppt/`, EPUB's `mimetype`). Saved names are sanitised (no path separators, no leading
//! dot, at most 120 bytes) and never overwrite an earlier download.

use std::path::{Path, PathBuf};

use super::extract::FileKind;

/// Detects the type of `bytes` named `name` (a file name or URL path) with optional MIME type
/// and `Content-Disposition` file name.
pub fn detect(name: &str, mime: Option<&str>, disposition: Option<&str>, bytes: &[u8]) -> FileKind {
    let file = disposition.unwrap_or(name);
    let ext = extension(file)
        .or_else(|| extension(name))
        .unwrap_or_default();
    if let Some(k) = magic(bytes, &ext, mime) {
        return k;
    }
    if let Some(k) = by_extension(&ext, bytes) {
        return k;
    }
    if let Some(k) = mime.and_then(|m| by_mime(m, bytes)) {
        return k;
    }
    if looks_binary(bytes) {
        return FileKind::Unknown;
    }
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(2048)]).to_ascii_lowercase();
    let t = head.trim_start_matches('\u{feff}').trim_start();
    if t.starts_with("<!doctype html") || t.starts_with("<html") || head.contains("<body") {
        FileKind::Html
    } else if t.starts_with("<?xml") || t.starts_with("<rss") || t.starts_with("<feed") {
        FileKind::Xml
    } else if (t.starts_with('{') || t.starts_with('['))
        && serde_json::from_slice::<serde_json::Value>(bytes).is_ok()
    {
        json_kind(bytes)
    } else {
        FileKind::Text
    }
}

/// Lower-case extension of the last path segment of `name` (query and fragment ignored).
fn extension(name: &str) -> Option<String> {
    let path = name.split(['?', '#']).next().unwrap_or("");
    let last = path.rsplit(['/', '\\']).next().unwrap_or("");
    let (_, ext) = last.rsplit_once('.')?;
    (!ext.is_empty() && ext.len() <= 8).then(|| ext.to_ascii_lowercase())
}

fn json_kind(bytes: &[u8]) -> FileKind {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) if v.get("cells").is_some() && v.get("nbformat").is_some() => FileKind::Ipynb,
        _ => FileKind::Json,
    }
}

fn magic(b: &[u8], ext: &str, mime: Option<&str>) -> Option<FileKind> {
    let starts = |m: &[u8]| b.starts_with(m);
    if b.len() >= 5 && b[..b.len().min(1024)].windows(5).any(|w| w == b"%PDF-") {
        return Some(FileKind::Pdf);
    }
    if starts(b"PK\x03\x04") || starts(b"PK\x05\x06") {
        return Some(zip_kind(b, ext));
    }
    if starts(b"\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1") {
        return Some(match (ext, mime) {
            ("xls", _) | (_, Some("application/vnd.ms-excel")) => FileKind::Xls,
            ("doc", _) | (_, Some("application/msword")) => {
                FileKind::Unsupported("legacy Word 97-2003 document (.doc)")
            }
            ("ppt", _) | (_, Some("application/vnd.ms-powerpoint")) => {
                FileKind::Unsupported("legacy PowerPoint 97-2003 presentation (.ppt)")
            }
            ("msg", _) => FileKind::Unsupported("Outlook message (.msg)"),
            // Most OLE files on the web that reach a text browser are spreadsheets.
            _ => FileKind::Xls,
        });
    }
    let image = starts(b"\x89PNG\r\n\x1a\n")
        || starts(b"\xFF\xD8\xFF")
        || starts(b"GIF87a")
        || starts(b"GIF89a")
        || starts(b"II*\0")
        || starts(b"MM\0*")
        || (starts(b"RIFF") && b.get(8..12) == Some(b"WEBP"))
        || (starts(b"BM") && ext == "bmp");
    if image {
        return Some(FileKind::Image);
    }
    let audio = starts(b"ID3")
        || (b.len() > 2 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0 && matches!(ext, "mp3" | "mpga"))
        || (starts(b"RIFF") && b.get(8..12) == Some(b"WAVE"))
        || starts(b"OggS")
        || starts(b"fLaC")
        || (b.get(4..8) == Some(b"ftyp") && matches!(b.get(8..11), Some(b"M4A")));
    if audio {
        return Some(FileKind::Audio);
    }
    if b.get(4..8) == Some(b"ftyp") {
        return Some(FileKind::Unsupported("video (MP4/QuickTime)"));
    }
    if starts(b"\x1F\x8B") {
        return Some(FileKind::Unsupported("gzip-compressed data"));
    }
    if starts(b"7z\xBC\xAF\x27\x1C") {
        return Some(FileKind::Unsupported("7-Zip archive"));
    }
    if starts(b"Rar!\x1A\x07") {
        return Some(FileKind::Unsupported("RAR archive"));
    }
    None
}

/// Tells OOXML, EPUB and plain ZIP apart by the central directory's member names.
fn zip_kind(b: &[u8], ext: &str) -> FileKind {
    if b.get(30..58) == Some(b"mimetypeapplication/epub+zip") {
        return FileKind::Epub;
    }
    let Ok(z) = zip::ZipArchive::new(std::io::Cursor::new(b)) else {
        // A damaged container: trust the extension so the error names the right type.
        return by_extension(ext, b).unwrap_or(FileKind::Zip);
    };
    let names: Vec<String> = z
        .file_names()
        .filter_map(|n| n.ok().map(|n| n.into_owned()))
        .collect();
    let has = |p: &str| names.iter().any(|n| n.starts_with(p));
    if has("word/") {
        FileKind::Docx
    } else if has("xl/") {
        FileKind::Xlsx
    } else if has("ppt/") {
        FileKind::Pptx
    } else if names.iter().any(|n| n == "META-INF/container.xml") && ext == "epub" {
        FileKind::Epub
    } else if has("content.xml") && names.iter().any(|n| n == "mimetype") {
        FileKind::Unsupported("OpenDocument file")
    } else {
        FileKind::Zip
    }
}

fn by_extension(ext: &str, bytes: &[u8]) -> Option<FileKind> {
    Some(match ext {
        "pdf" => FileKind::Pdf,
        "docx" | "docm" => FileKind::Docx,
        "xlsx" | "xlsm" => FileKind::Xlsx,
        "xls" => FileKind::Xls,
        "pptx" | "pptm" => FileKind::Pptx,
        "epub" => FileKind::Epub,
        "zip" => FileKind::Zip,
        "csv" | "tsv" => FileKind::Csv,
        "json" | "geojson" => json_kind(bytes),
        "ipynb" => FileKind::Ipynb,
        "html" | "htm" | "xhtml" => FileKind::Html,
        "xml" | "rss" | "atom" | "opml" => FileKind::Xml,
        "mp3" | "wav" | "m4a" | "ogg" | "oga" | "flac" | "aac" | "opus" => FileKind::Audio,
        "doc" => FileKind::Unsupported("legacy Word 97-2003 document (.doc)"),
        "ppt" => FileKind::Unsupported("legacy PowerPoint 97-2003 presentation (.ppt)"),
        "txt" | "md" | "markdown" | "rst" | "log" | "py" | "rs" | "js" | "ts" | "c" | "h"
        | "cpp" | "java" | "go" | "sh" | "toml" | "yaml" | "yml" | "ini" | "cfg" | "tex" | "r"
        | "sql" | "css"
            if !looks_binary(bytes) =>
        {
            FileKind::Text
        }
        _ => return None,
    })
}

fn by_mime(m: &str, bytes: &[u8]) -> Option<FileKind> {
    Some(match m {
        "application/pdf" => FileKind::Pdf,
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => FileKind::Docx,
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => FileKind::Xlsx,
        "application/vnd.ms-excel" => FileKind::Xls,
        "application/vnd.openxmlformats-officedocument.presentationml.presentation" => {
            FileKind::Pptx
        }
        "application/epub+zip" => FileKind::Epub,
        "application/zip" | "application/x-zip-compressed" => FileKind::Zip,
        "text/csv" | "text/tab-separated-values" => FileKind::Csv,
        "application/json" => json_kind(bytes),
        "application/x-ipynb+json" => FileKind::Ipynb,
        "text/html" | "application/xhtml+xml" => FileKind::Html,
        "application/xml" | "text/xml" | "application/rss+xml" | "application/atom+xml" => {
            FileKind::Xml
        }
        m if m.starts_with("audio/") => FileKind::Audio,
        m if m.starts_with("video/") => FileKind::Unsupported("video"),
        m if m.starts_with("image/") => {
            FileKind::Unsupported("image format without a known signature")
        }
        m if m.ends_with("+json") => FileKind::Json,
        m if m.ends_with("+xml") => FileKind::Xml,
        m if m.starts_with("text/") && !looks_binary(bytes) => FileKind::Text,
        _ => return None,
    })
}

/// Whether `bytes` look like binary data: a NUL byte, or more than 5% control characters
/// (other than tab, newline, carriage return, form feed and escape) in the first 8 KiB.
pub fn looks_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(8192)];
    if head.is_empty() {
        return false;
    }
    // UTF-16 text with a BOM is text.
    if head.starts_with(b"\xFF\xFE") || head.starts_with(b"\xFE\xFF") {
        return false;
    }
    if head.contains(&0) {
        return true;
    }
    let ctrl = head
        .iter()
        .filter(|&&c| c < 0x20 && !matches!(c, b'\t' | b'\n' | b'\r' | 0x0C | 0x1B))
        .count();
    ctrl * 20 > head.len()
}

/// The file name from a `Content-Disposition` header value (`filename*=UTF-8''...` preferred
/// over `filename=`), if any.
pub fn disposition_filename(v: &str) -> Option<String> {
    let mut plain = None;
    for part in v.split(';') {
        let Some((k, val)) = part.split_once('=') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        let val = val.trim();
        if k == "filename*" {
            let enc = val.splitn(3, '\'').nth(2).unwrap_or(val);
            let decoded = percent_decode(enc);
            if !decoded.trim().is_empty() {
                return Some(decoded);
            }
        } else if k == "filename" {
            plain = Some(val.trim_matches('"').to_string());
        }
    }
    plain.filter(|p| !p.trim().is_empty())
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = b.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(h), 16)
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

/// A safe local file name for a download from `url` (with optional `Content-Disposition`
/// name): the last path segment, percent-decoded, with separators, controls and other risky
/// characters replaced by `_`, no leading dot, at most 120 bytes; `download` if nothing is
/// left.
pub fn safe_name(url: &url::Url, disposition: Option<&str>) -> String {
    let raw = disposition.map(str::to_string).unwrap_or_else(|| {
        url.path_segments()
            .and_then(|mut s| s.next_back().map(percent_decode))
            .unwrap_or_default()
    });
    let base = raw.rsplit(['/', '\\']).next().unwrap_or("");
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ' | '(' | ')' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    name = name.trim().trim_start_matches('.').to_string();
    while name.len() > 120 {
        // Keep the extension: cut from the stem.
        let cut = match name.rfind('.') {
            Some(dot) if name.len() - dot <= 9 && dot > 0 => {
                let ext = name[dot..].to_string();
                let mut stem = name[..dot].to_string();
                while stem.len() + ext.len() > 120 {
                    stem.pop();
                }
                stem + &ext
            }
            _ => {
                let mut n = name.clone();
                while n.len() > 120 {
                    n.pop();
                }
                n
            }
        };
        name = cut;
    }
    if name.is_empty() {
        "download".into()
    } else {
        name
    }
}

/// Writes `bytes` into `dir` under `name`, adding `-1`, `-2`, ... before the extension if
/// the name is taken; returns the path. Never follows or replaces an existing file.
///
/// # Errors
/// The I/O error from creating or writing the file.
pub async fn save(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    use tokio::io::AsyncWriteExt;
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i..]),
        _ => (name, ""),
    };
    for n in 0..10_000u32 {
        let candidate = if n == 0 {
            dir.join(name)
        } else {
            dir.join(format!("{stem}-{n}{ext}"))
        };
        match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
            .await
        {
            Ok(mut f) => {
                f.write_all(bytes).await?;
                f.flush().await?;
                return Ok(candidate);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "too many downloads with the same name",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe() {
        let u = url::Url::parse("http://h/a/..%2F..%2Fetc%2Fpasswd").expect("url");
        assert_eq!(safe_name(&u, None), "passwd");
        let u = url::Url::parse("http://h/dir/").expect("url");
        assert_eq!(safe_name(&u, None), "download");
        assert_eq!(safe_name(&u, Some("../.bashrc")), "bashrc");
        assert_eq!(
            disposition_filename(
                "attachment; filename=\"a b.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"
            )
            .as_deref(),
            Some("résumé.pdf")
        );
    }

    #[test]
    fn types_are_detected() {
        assert_eq!(detect("x.bin", None, None, b"%PDF-1.7\n"), FileKind::Pdf);
        assert_eq!(
            detect("x.bin", None, None, &[0u8, 1, 2, 200, 3, 4]),
            FileKind::Unknown
        );
        assert_eq!(detect("a.csv", None, None, b"a,b\n1,2\n"), FileKind::Csv);
        assert_eq!(
            detect("data", Some("text/csv"), None, b"a,b\n"),
            FileKind::Csv
        );
        assert_eq!(
            detect("nb", None, None, br#"{"cells":[],"nbformat":4}"#),
            FileKind::Ipynb
        );
        assert_eq!(
            detect("x", None, Some("song.mp3"), b"ID3\x04"),
            FileKind::Audio
        );
        assert_eq!(
            detect("f.pptx", None, None, b"not a zip at all"),
            FileKind::Pptx
        );
    }
}
