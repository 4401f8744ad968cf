//! A small capped XML tree for the document formats (OOXML, EPUB, RSS), built with quick-xml.
//!
//! Element and attribute names keep only their local part (`w:p` -> `p`); namespaces are not
//! resolved, which is enough for OOXML's fixed prefixes. Nesting deeper than [`MAX_DEPTH`]
//! is flattened into the deepest allowed element, so hostile input cannot overflow the stack
//! of the recursive walkers. DTDs are never loaded and only the five predefined entities and
//! numeric character references are expanded (no entity-expansion bombs).

use quick_xml::events::Event;

use super::ExtractError;

/// Deepest element nesting kept; deeper elements are attached to the element at this depth.
pub const MAX_DEPTH: usize = 200;

/// A node of the tree.
#[derive(Debug, Clone)]
pub enum Node {
    /// An element.
    El(Element),
    /// Character data (entities already expanded).
    Text(String),
}

/// An element: local name, attributes (local names) and children.
#[derive(Debug, Clone, Default)]
pub struct Element {
    /// Local name, e.g. `p` for `<w:p>`.
    pub name: String,
    /// Attributes as (local name, unescaped value); `r:id` and `id` both appear as `id`,
    /// so [`Element::attr_q`] gives the qualified lookup where that matters.
    pub attrs: Vec<(String, String, String)>,
    /// Child nodes in document order.
    pub children: Vec<Node>,
}

impl Element {
    /// The value of the attribute with local name `name` (the first one, any prefix).
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(_, l, _)| l == name)
            .map(|(_, _, v)| v.as_str())
    }

    /// The value of the attribute with exact qualified name `qname`, e.g. `r:id`.
    pub fn attr_q(&self, qname: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(q, _, _)| q == qname)
            .map(|(_, _, v)| v.as_str())
    }

    /// Child elements.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::El(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// The first child element named `name`.
    pub fn child(&self, name: &str) -> Option<&Element> {
        self.elements().find(|e| e.name == name)
    }

    /// Every descendant element named `name`, in document order (not descending into
    /// matches).
    pub fn find_all<'a>(&'a self, name: &str, out: &mut Vec<&'a Element>) {
        for e in self.elements() {
            if e.name == name {
                out.push(e);
            } else {
                e.find_all(name, out);
            }
        }
    }

    /// The first descendant named `name`.
    pub fn find(&self, name: &str) -> Option<&Element> {
        for e in self.elements() {
            if e.name == name {
                return Some(e);
            }
            if let Some(f) = e.find(name) {
                return Some(f);
            }
        }
        None
    }

    /// All text below this element, concatenated.
    pub fn text(&self) -> String {
        let mut s = String::new();
        self.collect_text(&mut s);
        s
    }

    fn collect_text(&self, s: &mut String) {
        for n in &self.children {
            match n {
                Node::Text(t) => s.push_str(t),
                Node::El(e) => e.collect_text(s),
            }
        }
    }
}

fn local(name: &str) -> String {
    name.rsplit(':').next().unwrap_or(name).to_string()
}

fn expand_ref(name: &str) -> Option<String> {
    Some(match name {
        "amp" => "&".into(),
        "lt" => "<".into(),
        "gt" => ">".into(),
        "quot" => "\"".into(),
        "apos" => "'".into(),
        _ => {
            let n = name.strip_prefix('#')?;
            let code = if let Some(h) = n.strip_prefix(['x', 'X']) {
                u32::from_str_radix(h, 16).ok()?
            } else {
                n.parse().ok()?
            };
            char::from_u32(code)?.to_string()
        }
    })
}

/// Parses `bytes` (UTF-8 XML) into a tree rooted at a synthetic element named `#document`.
///
/// # Errors
/// [`ExtractError::Corrupt`] naming `what` if the XML is malformed.
pub fn parse(bytes: &[u8], what: &str) -> Result<Element, ExtractError> {
    let mut reader = quick_xml::Reader::from_reader(bytes);
    reader.config_mut().trim_text(false);
    let mut stack: Vec<Element> = vec![Element {
        name: "#document".into(),
        ..Default::default()
    }];
    // Elements opened beyond MAX_DEPTH: counted, not pushed.
    let mut overflow = 0usize;
    let mut buf = Vec::new();
    let corrupt = |e: &dyn std::fmt::Display| ExtractError::Corrupt(format!("{what}: {e}"));
    loop {
        let ev = reader.read_event_into(&mut buf).map_err(|e| corrupt(&e))?;
        let is_empty = matches!(ev, Event::Empty(_));
        match ev {
            Event::Start(s) | Event::Empty(s) => {
                let mut el = Element {
                    name: local(s.name().as_ref()),
                    ..Default::default()
                };
                for a in s.attributes().with_checks(false).flatten() {
                    let v = a
                        .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                        .map(|c| c.into_owned())
                        .unwrap_or_else(|_| a.value.to_string());
                    el.attrs
                        .push((a.key.as_ref().to_string(), local(a.key.as_ref()), v));
                }
                if is_empty {
                    if let Some(top) = stack.last_mut() {
                        top.children.push(Node::El(el));
                    }
                } else if stack.len() > MAX_DEPTH {
                    overflow += 1;
                } else {
                    stack.push(el);
                }
            }
            Event::End(_) => {
                if overflow > 0 {
                    overflow -= 1;
                } else if stack.len() > 1
                    && let Some(done) = stack.pop()
                    && let Some(top) = stack.last_mut()
                {
                    top.children.push(Node::El(done));
                }
            }
            Event::Text(t) => {
                let s = t.xml10_content().into_owned();
                push_text(&mut stack, s);
            }
            Event::CData(c) => {
                let s = c.xml10_content().into_owned();
                push_text(&mut stack, s);
            }
            Event::GeneralRef(r) => {
                let name = r.xml10_content().into_owned();
                if let Some(s) = expand_ref(&name) {
                    push_text(&mut stack, s);
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    // Unclosed elements (truncated file): fold them up rather than fail.
    while stack.len() > 1 {
        if let Some(done) = stack.pop()
            && let Some(top) = stack.last_mut()
        {
            top.children.push(Node::El(done));
        }
    }
    stack
        .pop()
        .ok_or_else(|| ExtractError::Corrupt(format!("{what}: empty document")))
}

fn push_text(stack: &mut [Element], s: String) {
    if s.is_empty() {
        return;
    }
    if let Some(top) = stack.last_mut() {
        if let Some(Node::Text(prev)) = top.children.last_mut() {
            prev.push_str(&s);
        } else {
            top.children.push(Node::Text(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_entities_and_depth() {
        let t = parse(
            br#"<w:doc xmlns:w="x"><w:p r:id="a">A &amp; B &#x41;<w:t/></w:p></w:doc>"#,
            "t",
        )
        .expect("parse");
        let p = t.find("p").expect("p");
        assert_eq!(p.attr("id"), Some("a"));
        assert_eq!(p.attr_q("r:id"), Some("a"));
        assert_eq!(t.text(), "A & B A");
        let deep = "<a>".repeat(5000) + "x" + &"</a>".repeat(5000);
        let t = parse(deep.as_bytes(), "deep").expect("deep");
        assert_eq!(t.text(), "x");
        assert!(parse(b"<a><b></a>", "bad").is_err());
    }
}
