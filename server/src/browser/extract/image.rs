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
    if let Some((w, h)) = dimensions(bytes)
        && w.saturating_mul(h) > MAX_OCR_PIXELS
    {
        out.push_str(&format!(
            "(OCR skipped: the image is {w}x{h} pixels, more than {MAX_OCR_PIXELS} pixels.)\n"
        ));
        return Ok(out);
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

/// Largest image OCRed, in pixels (a decompression bomb must not reach tesseract).
pub const MAX_OCR_PIXELS: u64 = 50_000_000;

/// Width and height from a PNG, GIF, BMP or JPEG header, if recognised.
pub fn dimensions(b: &[u8]) -> Option<(u64, u64)> {
    let be32 = |i: usize| -> Option<u64> {
        Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?) as u64)
    };
    let le16 = |i: usize| -> Option<u64> {
        Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?) as u64)
    };
    let le32 = |i: usize| -> Option<u64> {
        Some(i32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?).unsigned_abs() as u64)
    };
    if b.starts_with(b"\x89PNG") {
        return Some((be32(16)?, be32(20)?));
    }
    if b.starts_with(b"GIF8") {
        return Some((le16(6)?, le16(8)?));
    }
    if b.starts_with(b"BM") {
        return Some((le32(18)?, le32(22)?));
    }
    if b.starts_with(b"\xFF\xD8") {
        // Walk the segments to the first start-of-frame marker.
        let mut i = 2;
        while i + 9 < b.len() {
            if b[i] != 0xFF {
                return None;
            }
            let marker = b[i + 1];
            let len = u16::from_be_bytes([b[i + 2], b[i + 3]]) as usize;
            if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
                let h = u16::from_be_bytes([b[i + 5], b[i + 6]]) as u64;
                let w = u16::from_be_bytes([b[i + 7], b[i + 8]]) as u64;
                return Some((w, h));
            }
            i += 2 + len;
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders page 1 of the corpus PDF with PDFium into a 24-bit BMP and reads it back
    /// through tesseract: real OCR on a real page image.
    #[test]
    fn ocr_reads_a_rendered_page() {
        use pdfium_render::prelude::*;
        let policy = ExtractPolicy::default();
        let pdf = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/documents/test.pdf"),
        )
        .expect("pdf");
        let pdfium = super::super::pdf::pdfium(policy.pdfium_library.as_deref())
            .expect("libpdfium (scripts/setup)");
        let doc = pdfium.load_pdf_from_byte_slice(&pdf, None).expect("load");
        let page = doc.pages().get(0).expect("page");
        let bitmap = page
            .render_with_config(&PdfRenderConfig::new().set_target_width(1600))
            .expect("render");
        let (w, h) = (bitmap.width() as usize, bitmap.height() as usize);
        let raw = bitmap.as_raw_bytes();
        let stride = raw.len() / h;
        let row = (w * 3).div_ceil(4) * 4;
        let mut bmp = Vec::new();
        let size = 54 + row * h;
        bmp.extend_from_slice(b"BM");
        bmp.extend_from_slice(&(size as u32).to_le_bytes());
        bmp.extend_from_slice(&[0, 0, 0, 0]);
        bmp.extend_from_slice(&54u32.to_le_bytes());
        bmp.extend_from_slice(&40u32.to_le_bytes());
        bmp.extend_from_slice(&(w as i32).to_le_bytes());
        bmp.extend_from_slice(&(-(h as i32)).to_le_bytes());
        bmp.extend_from_slice(&1u16.to_le_bytes());
        bmp.extend_from_slice(&24u16.to_le_bytes());
        bmp.extend_from_slice(&[0u8; 24]);
        for y in 0..h {
            let line = &raw[y * stride..y * stride + w * 4];
            for px in line.chunks(4) {
                bmp.extend_from_slice(&px[..3]);
            }
            bmp.extend(std::iter::repeat_n(0u8, row - w * 3));
        }
        assert_eq!(dimensions(&bmp), Some((w as u64, h as u64)));
        let kind = crate::browser::download::detect("page.bmp", None, None, &bmp);
        assert_eq!(kind, super::super::FileKind::Image);
        let text = extract(&bmp, "page.bmp", &policy).expect("ocr");
        assert!(text.contains("### OCR text:"), "{text}");
        assert!(text.contains("Introduction"), "{text}");
        assert!(text.contains("Large language models"), "{text}");
    }

    #[test]
    fn huge_images_are_not_ocred() {
        // A PNG header claiming 100000 x 100000 pixels.
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend_from_slice(&100_000u32.to_be_bytes());
        png.extend_from_slice(&100_000u32.to_be_bytes());
        png.extend_from_slice(&[8, 2, 0, 0, 0]);
        let out = extract(&png, "bomb.png", &ExtractPolicy::default()).expect("extract");
        assert!(out.contains("OCR skipped"), "{out}");
    }
}
