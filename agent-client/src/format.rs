//! Deterministic clean-up of the answer formatter's reply, after the paper's formatting
//! prompt ([`crate::prompts::format_answer`]) has done the real work: the answer becomes
//! one line (it is printed as the last line of stdout), a `Formatted answer:` label and
//! wrapping quotes or backticks are dropped, and a lone number loses its thousands commas.

/// Cleans a formatter reply; falls back to the `Answer:` line of `draft` (or the whole
/// draft) when the reply is empty.
#[must_use]
pub fn clean_answer(reply: &str, draft: &str) -> String {
    let cleaned = clean(reply);
    if !cleaned.is_empty() {
        return cleaned;
    }
    let from_draft = draft
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.trim();
            l.get(..7)
                .filter(|p| p.eq_ignore_ascii_case("answer:"))
                .map(|_| &l[7..])
        })
        .unwrap_or(draft);
    clean(from_draft)
}

fn clean(s: &str) -> String {
    let mut s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    for label in ["formatted answer:", "final answer:", "answer:"] {
        if s.get(..label.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(label))
        {
            s = s[label.len()..].trim().to_string();
        }
    }
    loop {
        let t = s.trim();
        let unwrapped = ["```", "`", "\"", "'", "**"].iter().find_map(|q| {
            (t.len() >= 2 * q.len() && t.starts_with(q) && t.ends_with(q))
                .then(|| t[q.len()..t.len() - q.len()].trim().to_string())
        });
        match unwrapped {
            Some(u) if u != t => s = u,
            _ => break,
        }
    }
    let s = s.trim().to_string();
    if is_thousands_number(&s) {
        s.replace(',', "")
    } else {
        s
    }
}

/// `1,234` or `-12,345,678.5`: digits grouped by threes with commas.
fn is_thousands_number(s: &str) -> bool {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    if frac.is_some_and(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    let groups: Vec<&str> = int.split(',').collect();
    groups.len() > 1
        && (1..=3).contains(&groups[0].len())
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()))
        && groups[1..].iter().all(|g| g.len() == 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleans_formatter_replies() {
        assert_eq!(clean_answer("Formatted answer: 1642\n", ""), "1642");
        assert_eq!(clean_answer("  \"Paris\" ", ""), "Paris");
        assert_eq!(clean_answer("`12,345,678.5`", ""), "12345678.5");
        assert_eq!(clean_answer("1, 2, 3", ""), "1, 2, 3");
        assert_eq!(clean_answer("apples,\npears", ""), "apples, pears");
        assert_eq!(clean_answer("1,23", ""), "1,23");
    }

    #[test]
    fn empty_reply_falls_back_to_the_draft() {
        assert_eq!(
            clean_answer("   ", "Reasoning...\nAnswer: Wellington\n"),
            "Wellington"
        );
        assert_eq!(clean_answer("", "Lyon"), "Lyon");
    }
}
