//! A page's text shown one viewport at a time, as in AutoGen's `SimpleTextBrowser`
//! (`_split_pages`, `viewport`, `page_up`/`page_down`), which the Sibyl agent used.
//!
//! The text is cut into pages of `viewport_size` characters, each cut moved forward to just
//! after a whitespace character (space, tab, CR, LF) so words are not split. AutoGen extends
//! a cut without bound; here it extends at most a quarter viewport (at least 100 characters), then cuts at a character
//! boundary, so a hostile page without whitespace cannot make one viewport unbounded.

use std::ops::Range;

/// Byte ranges of `text`, one per viewport; an empty text has one empty viewport.
pub fn split_pages(text: &str, viewport_size: usize) -> Vec<Range<usize>> {
    if text.is_empty() {
        return std::iter::once(0..0).collect();
    }
    let size = viewport_size.max(1);
    let max_extra = (size / 4).max(100);
    let mut pages = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut start = 0usize;
    while chars.peek().is_some() {
        // Take `size` characters.
        let mut last: Option<char> = None;
        let mut end = start;
        for _ in 0..size {
            match chars.next() {
                Some((i, c)) => {
                    end = i + c.len_utf8();
                    last = Some(c);
                }
                None => break,
            }
        }
        // Extend until the character before the cut is whitespace.
        let mut extra = 0;
        while !matches!(last, Some(' ' | '\t' | '\r' | '\n')) && extra < max_extra {
            match chars.next() {
                Some((i, c)) => {
                    end = i + c.len_utf8();
                    last = Some(c);
                    extra += 1;
                }
                None => break,
            }
        }
        pages.push(start..end);
        start = end;
    }
    pages
}

/// Index of the viewport holding byte `offset` (the last one for offsets past the end).
pub fn page_of(pages: &[Range<usize>], offset: usize) -> usize {
    pages
        .partition_point(|p| p.end <= offset)
        .min(pages.len().saturating_sub(1))
}

/// The reply header, as AutoGen's browser printed it:
/// `Address: …`, `Title: …`, optional notes, `Viewport position: Showing page N of M.`,
/// then the `=======================` separator line and the viewport text.
pub fn render_view(
    address: &str,
    title: &str,
    notes: &[String],
    page_index: usize,
    page_count: usize,
    viewport: &str,
) -> String {
    let mut out = String::with_capacity(viewport.len() + 256);
    out.push_str("Address: ");
    out.push_str(address);
    out.push_str("\nTitle: ");
    out.push_str(title);
    out.push('\n');
    out.push_str(&format!(
        "Viewport position: Showing page {} of {}.\n",
        page_index + 1,
        page_count
    ));
    for n in notes {
        out.push_str(n);
        out.push('\n');
    }
    out.push_str("=======================\n");
    out.push_str(viewport);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces<'a>(text: &'a str, pages: &[Range<usize>]) -> Vec<&'a str> {
        pages.iter().map(|r| &text[r.clone()]).collect()
    }

    #[test]
    fn pages_end_after_whitespace_and_cover_the_text() {
        let text = "alpha beta gamma delta epsilon zeta eta theta";
        let pages = split_pages(text, 8);
        let p = pieces(text, &pages);
        assert_eq!(p.concat(), text);
        for piece in &p[..p.len() - 1] {
            assert!(piece.ends_with(' '), "{piece:?}");
        }
        assert_eq!(p[0], "alpha beta ");
    }

    #[test]
    fn empty_text_is_one_empty_page() {
        assert_eq!(
            split_pages("", 10),
            std::iter::once(0..0).collect::<Vec<_>>()
        );
    }

    #[test]
    fn counts_characters_not_bytes() {
        let text = "żółw żółw żółw";
        let pages = split_pages(text, 5);
        assert_eq!(pieces(text, &pages), vec!["żółw ", "żółw ", "żółw"]);
    }

    #[test]
    fn unbroken_text_is_cut_within_bounds() {
        let text = "x".repeat(1000);
        let pages = split_pages(&text, 100);
        assert!(pages.iter().all(|r| r.len() <= 200));
        assert_eq!(pieces(&text, &pages).concat(), text);
    }

    #[test]
    fn page_of_finds_the_holder() {
        let pages = vec![0..10, 10..20, 20..25];
        assert_eq!(page_of(&pages, 0), 0);
        assert_eq!(page_of(&pages, 9), 0);
        assert_eq!(page_of(&pages, 10), 1);
        assert_eq!(page_of(&pages, 24), 2);
        assert_eq!(page_of(&pages, 99), 2);
    }

    #[test]
    fn header_matches_autogen() {
        let v = render_view("http://a/", "T", &[], 0, 3, "body");
        assert_eq!(
            v,
            "Address: http://a/\nTitle: T\nViewport position: Showing page 1 of 3.\n=======================\nbody"
        );
    }
}
