//! Every saved page: visited over gRPC, paged to the end and back, and every fact of
//! `facts.json` visible in some viewport and found by `find_on_page_ctrl_f`.

use serde_json::json;
use sibyl_tests::{
    PageServer, Server, collapse_ws, fixtures, ok, open_session, parse_view, test_policy,
    visible_text,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fact_of_every_page_is_visible_and_found() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let facts: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("pages/facts.json")).expect("facts.json"),
    )
    .expect("facts json");
    let pages_obj = facts["pages"].as_object().expect("pages");
    assert_eq!(pages_obj.len(), 15);
    let mut checked = 0;
    let mut failures = Vec::new();
    for (dir, page) in pages_obj {
        let s = open_session(&mut c).await;
        let url = pages.url(&format!("/pages/{dir}/"));
        let first = parse_view(&ok(&mut c, &s, "visit_page", json!({ "url": url })).await);
        assert_eq!(first.address, url);
        assert_eq!(first.page, 1);
        let want = collapse_ws(page["title"].as_str().expect("title"));
        // facts.json titles are the peers' cleaned titles; ours is the page's <title>: most
        // of their words must be in ours.
        let ours = collapse_ws(&first.title);
        let shared = want
            .split(' ')
            .filter(|w| ours.split(' ').any(|o| o == *w))
            .count();
        assert!(
            shared * 2 >= want.split(' ').count(),
            "{dir}: {ours:?} vs {want:?}"
        );
        // Page down to the end, then back up to the start.
        let mut bodies = vec![first.body.clone()];
        for n in 2..=first.pages {
            let v = parse_view(&ok(&mut c, &s, "page_down", json!({})).await);
            assert_eq!((v.page, v.pages), (n, first.pages), "{dir}");
            assert!(
                v.body.len() <= 8192 * 4 + 512,
                "{dir}: viewport {n} too long"
            );
            bodies.push(v.body);
        }
        let clamped = parse_view(&ok(&mut c, &s, "page_down", json!({})).await);
        assert_eq!(clamped.page, first.pages, "page_down clamps at the end");
        for n in (1..first.pages).rev() {
            let v = parse_view(&ok(&mut c, &s, "page_up", json!({})).await);
            assert_eq!(v.page, n, "{dir}");
            assert_eq!(v.body, bodies[n - 1], "{dir}: page {n} is stable");
        }
        let top = parse_view(&ok(&mut c, &s, "page_up", json!({})).await);
        assert_eq!(top.page, 1, "page_up clamps at the start");

        let all = visible_text(&bodies.concat());
        for fact in page["facts"].as_array().expect("facts") {
            let text = fact["text"].as_str().expect("text");
            checked += 1;
            if !all.contains(&visible_text(text)) {
                failures.push(format!("{dir}: not visible: {text:?}"));
                continue;
            }
            let reply = ok(
                &mut c,
                &s,
                "find_on_page_ctrl_f",
                json!({ "search_string": text }),
            )
            .await;
            if reply.starts_with("The search string") {
                failures.push(format!("{dir}: not found: {text:?}"));
                continue;
            }
            let v = parse_view(&reply);
            let note = v.notes.join(" ");
            assert!(note.contains("Search: showing match"), "{dir}: {note}");
            // The viewport shown holds the start of the match: its first words are there,
            // unless the match continues onto the next viewport.
            let first_words: String = visible_text(text)
                .split(' ')
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            let shown = visible_text(&v.body).to_lowercase();
            assert!(
                shown.contains(&first_words.to_lowercase()) || note.contains("continues on page"),
                "{dir}: match of {text:?} not in the viewport shown (page {})",
                v.page
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} facts failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(checked, 69);
}
