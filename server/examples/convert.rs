//! Converts a saved HTML file the way visit_page does and prints the text:
//! `cargo run -p sibyl-server --example convert -- FILE [BASE_URL]`.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let file = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: convert FILE [BASE_URL]"))?;
    let base = args.next().map(|b| url::Url::parse(&b)).transpose()?;
    let bytes = std::fs::read(&file)?;
    let html = sibyl_server::browser::fetch::decode_text(&bytes, None, true);
    let r = sibyl_server::browser::convert::html_to_text(&html, base.as_ref())?;
    println!("Title: {}", r.title.unwrap_or_default());
    println!("{}", r.text);
    Ok(())
}
