//! Images: EXIF metadata (kamadak-exif) and OCR text (Debian's `tesseract`, run as a child
//! process with a time limit, reading the image from stdin). Sibyl used exiftool + EasyOCR;
//! the layout is the same: a metadata list, then `### OCR text:`. Without tesseract the reply
//! says so plainly instead of failing.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::{ExtractError, ExtractPolicy};

/// EXIF fields shown, in order (as Sibyl's exiftool selection).
const FIELDS: &[exif::Tag] = &[
    exif::Tag::ImageDescription,
    exif::Tag::Make,
    exif::Tag::Model,
    exif::Tag::DateTimeOriginal,
    exif::Tag::DateTime,
    exif::Tag::Artist,
    exif::Tag::Copyright,
    exif::Tag::Software,
    exif::Tag::PixelXDimension,
    exif::Tag::PixelYDimension,
    exif::Tag::GPSLatitude,
    exif::Tag::GPSLatitudeRef,
    exif::Tag::GPSLongitude,
    exif::Tag::GPSLongitudeRef,
];

/// Converts an image named `name`.
///
/// # Errors
/// Never for a missing OCR engine (that is reported in the text); [`ExtractError::Corrupt`]
/// when tesseract rejects the image and there is no metadata either.
pub fn extract(bytes: &[u8], name: &str, policy: &ExtractPolicy) -> Result<String, ExtractError> {
    let mut out = format!("# Image: {name}\n\n");
    let mut meta = String::new();
    if let Ok(ex) = exif::Reader::new().read_from_container(&mut std::io::Cursor::new(bytes)) {
        for tag in FIELDS {
            if let Some(f) = ex.get_field(*tag, exif::In::PRIMARY) {
                meta.push_str(&format!(
                    "* {}: {}\n",
                    tag,
                    f.display_value().with_unit(&ex)
                ));
            }
        }
    }
    if !meta.is_empty() {
        out.push_str("### Metadata:\n");
        out.push_str(&meta);
        out.push('\n');
    }
    if !policy.ocr {
        out.push_str("(OCR is turned off by browser.extract.ocr.)\n");
        return Ok(out);
    }
    match ocr(bytes, policy) {
        Ok(t) if t.trim().is_empty() => out.push_str("### OCR text:\n(no text found)\n"),
        Ok(t) => out.push_str(&format!("### OCR text:\n{}\n", t.trim())),
        Err(OcrError::Missing(e)) => out.push_str(&format!(
            "(OCR unavailable: {e}; run scripts/setup to install tesseract.)\n"
        )),
        Err(OcrError::Failed(e)) if meta.is_empty() => {
            return Err(ExtractError::Corrupt(format!("image: {e}")));
        }
        Err(OcrError::Failed(e)) => out.push_str(&format!("(OCR failed: {e})\n")),
    }
    Ok(out)
}

enum OcrError {
    Missing(String),
    Failed(String),
}

fn ocr(bytes: &[u8], policy: &ExtractPolicy) -> Result<String, OcrError> {
    let mut child = Command::new(&policy.tesseract)
        .args(["stdin", "stdout", "-l", "eng", "--psm", "3"])
        .env("OMP_THREAD_LIMIT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| OcrError::Missing(format!("cannot run `{}`: {e}", policy.tesseract)))?;
    // Feed stdin from a thread so a full stdout pipe cannot deadlock us.
    let mut stdin = child.stdin.take();
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&data);
        }
        drop(stdin);
    });
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.take(16 << 20).read_to_end(&mut s);
        }
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > policy.ocr_timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(OcrError::Failed(format!(
                    "OCR timed out after {} ms (browser.extract.ocr_timeout_ms)",
                    policy.ocr_timeout.as_millis()
                )));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => return Err(OcrError::Failed(e.to_string())),
        }
    };
    let _ = writer.join();
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = (&mut e).take(4096).read_to_string(&mut err);
        }
        let last = err
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        return Err(OcrError::Failed(format!(
            "tesseract could not read the image: {last}"
        )));
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}
