//! Browser behaviour over gRPC: find semantics, find_next, query reset, viewport-boundary
//! matches, SSRF refusals, limits and non-HTML content.

use serde_json::json;
use sibyl_tests::{PageServer, Server, call, ok, open_session, parse_view, test_policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_match_across_a_viewport_boundary_is_found() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let s = open_session(&mut c).await;
    let v = parse_view(&ok(&mut c, &s, "visit_page", json!({"url": pages.url("/text")})).await);
    assert!(v.pages >= 2);
    // The boundary falls inside the phrase: page 1 ends with "alpha beta ", page 2 begins
    // with "gamma delta".
    assert!(
        v.body.ends_with("alpha beta "),
        "{:?}",
        &v.body[v.body.len() - 30..]
    );
    let r = parse_view(
        &ok(
            &mut c,
            &s,
            "find_on_page_ctrl_f",
            json!({"search_string": "Alpha, beta GAMMA delta"}),
        )
        .await,
    );
    assert_eq!(r.page, 1);
    assert_eq!(
        r.notes,
        vec![
            "Search: showing match 1 of 1 for 'Alpha, beta GAMMA delta'. The match continues on page 2."
        ]
    );
    // Wildcards.
    let r = ok(
        &mut c,
        &s,
        "find_on_page_ctrl_f",
        json!({"search_string": "alpha * delta"}),
    )
    .await;
    assert!(parse_view(&r).notes[0].contains("match 1 of 1"), "{r}");
    let r = ok(
        &mut c,
        &s,
        "find_on_page_ctrl_f",
        json!({"search_string": "gam* delta ips*"}),
    )
    .await;
    assert!(parse_view(&r).notes[0].contains("match 1 of 1"), "{r}");
    let r = ok(
        &mut c,
        &s,
        "find_on_page_ctrl_f",
        json!({"search_string": "zzz*"}),
    )
    .await;
    assert_eq!(r, "The search string 'zzz*' was not found on this page.");
    let r = ok(
        &mut c,
        &s,
        "find_on_page_ctrl_f",
        json!({"search_string": "delta alpha"}),
    )
    .await;
    assert_eq!(
        r,
        "The search string 'delta alpha' was not found on this page."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_next_cycles_through_every_match_and_resets_on_navigation() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let s = open_session(&mut c).await;
    ok(
        &mut c,
        &s,
        "visit_page",
        json!({"url": pages.url("/needles")}),
    )
    .await;
    let ordinals = ["one", "two", "three", "four", "five"];
    let expected_pages = [1, 2, 2, 4, 5];
    let first = parse_view(
        &ok(
            &mut c,
            &s,
            "find_on_page_ctrl_f",
            json!({"search_string": "NEEDLE"}),
        )
        .await,
    );
    let mut seen = vec![(first.page, first.notes[0].clone(), first.body)];
    for _ in 0..5 {
        let v = parse_view(&ok(&mut c, &s, "find_next", json!({})).await);
        seen.push((v.page, v.notes[0].clone(), v.body));
    }
    for (i, (page, note, body)) in seen.iter().enumerate() {
        let k = i % 5;
        assert_eq!(
            *page,
            expected_pages[k],
            "match {} on the expected viewport",
            k + 1
        );
        assert_eq!(
            note,
            &format!("Search: showing match {} of 5 for 'NEEDLE'.", k + 1)
        );
        assert!(
            body.contains(&format!("needle {}", ordinals[k])),
            "viewport holds match {}",
            k + 1
        );
    }
    // The same query again on the viewport showing its match acts as find_next (AutoGen).
    let again = parse_view(
        &ok(
            &mut c,
            &s,
            "find_on_page_ctrl_f",
            json!({"search_string": "NEEDLE"}),
        )
        .await,
    );
    assert!(again.notes[0].contains("match 2 of 5"), "{:?}", again.notes);
    // From a later viewport, a new search starts there.
    for _ in 0..2 {
        ok(&mut c, &s, "page_down", json!({})).await;
    }
    let later = parse_view(
        &ok(
            &mut c,
            &s,
            "find_on_page_ctrl_f",
            json!({"search_string": "needle f*"}),
        )
        .await,
    );
    assert!(later.notes[0].contains("match 1 of 2"), "{:?}", later.notes);
    assert_eq!(later.page, 4);
    // Navigation clears the search (AutoGen kept it).
    ok(
        &mut c,
        &s,
        "visit_page",
        json!({"url": pages.url("/other")}),
    )
    .await;
    let r = call(&mut c, &s, "find_next", json!({}))
        .await
        .expect("call");
    assert!(r.is_error);
    assert!(r.text.contains("no search on this page"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_are_followable_and_revisits_are_noted() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let s = open_session(&mut c).await;
    let url = pages.url("/pages/readability-daringfireball-1/");
    let v = parse_view(&ok(&mut c, &s, "visit_page", json!({"url": url})).await);
    assert!(v.notes.is_empty());
    // Links are absolute markdown links on the page's origin.
    let origin = pages.url("/");
    assert!(
        v.body.contains(&format!("]({origin}")),
        "links are absolute: {}",
        &v.body[..500]
    );
    // A relative URL resolves against the current page.
    let other = parse_view(&ok(&mut c, &s, "visit_page", json!({"url": "/other"})).await);
    assert_eq!(other.address, pages.url("/other"));
    assert_eq!(other.title, "Other page");
    let back = parse_view(&ok(&mut c, &s, "visit_page", json!({"url": url})).await);
    assert_eq!(back.notes.len(), 1);
    assert!(
        back.notes[0].starts_with("You previously visited this page "),
        "{:?}",
        back.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssrf_is_refused_under_the_default_policy_and_on_redirects() {
    let pages = PageServer::start().await;
    // The embedded production default: no loopback.
    let strict = Server::start("");
    let mut c = strict.client().await;
    for url in [
        pages.url("/other"),
        format!("http://localhost:{}/other", pages.addr.port()),
        format!("http://[::ffff:127.0.0.1]:{}/other", pages.addr.port()),
        format!("http://2130706433:{}/other", pages.addr.port()),
    ] {
        let r = call(&mut c, "", "visit_page", json!({"url": url}))
            .await
            .expect("call");
        assert!(r.is_error, "{url} must be refused");
        assert!(r.text.contains("loopback"), "{url}: {}", r.text);
    }
    let r = call(
        &mut c,
        "",
        "visit_page",
        json!({"url": "file:///etc/passwd"}),
    )
    .await
    .expect("call");
    assert!(r.is_error && r.text.contains("scheme `file`"), "{}", r.text);
    assert_eq!(pages.hits(), 0, "no request reached the local server");

    // Allowed 127.0.0.1, but a redirect to another loopback address is refused per hop.
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let target = format!("http://127.0.0.2:{}/other", pages.addr.port());
    let url = pages.url(&format!("/redirect?to={target}"));
    let r = call(&mut c, "", "visit_page", json!({"url": url}))
        .await
        .expect("call");
    assert!(r.is_error);
    assert!(
        r.text.contains("127.0.0.2") && r.text.contains("loopback"),
        "{}",
        r.text
    );
    assert_eq!(pages.hits(), 1, "only the redirecting request was made");
    // Redirects to private and metadata addresses are refused before any connection.
    for (target, kind) in [
        ("http://10.0.0.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "cloud-metadata"),
        ("http://[fd00:ec2::254]/", "unique-local"),
    ] {
        let url = pages.url(&format!("/redirect?to={target}"));
        let r = call(&mut c, "", "visit_page", json!({"url": url}))
            .await
            .expect("call");
        assert!(r.is_error && r.text.contains(kind), "{target}: {}", r.text);
    }
    assert_eq!(pages.hits(), 4);
    // An allowed redirect is followed and the final address shown.
    let url = pages.url(&format!("/redirect?to={}", pages.url("/other")));
    let v = parse_view(&ok(&mut c, "", "visit_page", json!({"url": url})).await);
    assert_eq!(v.address, pages.url("/other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_content_types() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let s = open_session(&mut c).await;
    ok(
        &mut c,
        &s,
        "visit_page",
        json!({"url": pages.url("/other")}),
    )
    .await;

    // Oversized: RESOURCE_EXHAUSTED naming the limit; the current page is kept.
    let e = call(
        &mut c,
        &s,
        "visit_page",
        json!({"url": pages.url("/big?bytes=8000000")}),
    )
    .await
    .expect_err("too big");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(
        e.message().contains("browser.max_response_bytes"),
        "{}",
        e.message()
    );
    // Slow: a clear timeout after the policy's 2 s, not a hang.
    let started = std::time::Instant::now();
    let r = call(&mut c, &s, "visit_page", json!({"url": pages.url("/slow")}))
        .await
        .expect("call");
    assert!(r.is_error && r.text.contains("timed out"), "{}", r.text);
    assert!(started.elapsed() < std::time::Duration::from_secs(6));
    // Binary content: a clear message, page unchanged.
    for path in ["/binary", "/image.png"] {
        let r = call(&mut c, &s, "visit_page", json!({"url": pages.url(path)}))
            .await
            .expect("call");
        assert!(
            r.is_error && r.text.contains("cannot show as text"),
            "{}",
            r.text
        );
    }
    let still = parse_view(&ok(&mut c, &s, "page_down", json!({})).await);
    assert_eq!(still.address, pages.url("/other"));
    // Text with a charset from Content-Type.
    let v = parse_view(
        &ok(
            &mut c,
            &s,
            "visit_page",
            json!({"url": pages.url("/latin1")}),
        )
        .await,
    );
    assert_eq!(v.body, "Café crème brûlée");
    // A 404 is shown (is_error) with its body, as AutoGen's browser did.
    let r = call(
        &mut c,
        &s,
        "visit_page",
        json!({"url": pages.url("/missing")}),
    )
    .await
    .expect("call");
    assert!(r.is_error);
    let v = parse_view(&r.text);
    assert!(v.body.starts_with("## Error 404 Not Found"), "{}", v.body);
    assert!(v.body.contains("No such page, sorry."));
    // Unreachable port: a clear network error.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = dead.local_addr().expect("addr").port();
    drop(dead);
    let r = call(
        &mut c,
        &s,
        "visit_page",
        json!({"url": format!("http://127.0.0.1:{port}/")}),
    )
    .await
    .expect("call");
    assert!(
        r.is_error && r.text.starts_with("Cannot visit"),
        "{}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_never_see_each_others_pages() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let a = open_session(&mut c).await;
    let b = open_session(&mut c).await;
    assert_ne!(a, b);
    ok(
        &mut c,
        &a,
        "visit_page",
        json!({"url": pages.url("/needles")}),
    )
    .await;
    ok(
        &mut c,
        &b,
        "visit_page",
        json!({"url": pages.url("/other")}),
    )
    .await;
    ok(
        &mut c,
        &a,
        "find_on_page_ctrl_f",
        json!({"search_string": "needle"}),
    )
    .await;
    let va = parse_view(&ok(&mut c, &a, "page_down", json!({})).await);
    let vb = parse_view(&ok(&mut c, &b, "page_down", json!({})).await);
    assert_eq!(va.address, pages.url("/needles"));
    assert_eq!(vb.address, pages.url("/other"));
    let r = call(&mut c, &b, "find_next", json!({}))
        .await
        .expect("call");
    assert!(r.is_error, "b has no search of its own: {}", r.text);
    // A fresh session has no page.
    let fresh = open_session(&mut c).await;
    let r = call(&mut c, &fresh, "page_down", json!({}))
        .await
        .expect("call");
    assert!(
        r.is_error && r.text.contains("No page is open"),
        "{}",
        r.text
    );
    // Concurrent calls in different sessions do not interfere.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let mut c = server.client().await;
        let s = open_session(&mut c).await;
        let url = if i % 2 == 0 {
            pages.url("/needles")
        } else {
            pages.url("/other")
        };
        tasks.push(tokio::spawn(async move {
            ok(&mut c, &s, "visit_page", json!({"url": url.clone()})).await;
            let v = parse_view(&ok(&mut c, &s, "page_up", json!({})).await);
            assert_eq!(v.address, url);
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}
