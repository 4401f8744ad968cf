//! The gRPC contract: status codes, sessions, ListTools, health and reflection.

use serde_json::json;
use sibyl_proto::v1 as pb;
use sibyl_tests::{PageServer, Server, call, ok, open_session, test_policy};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tools_describes_the_browser() {
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let tools = c
        .list_tools(pb::ListToolsRequest {})
        .await
        .expect("list")
        .into_inner()
        .tools;
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "find_next",
            "find_on_page_ctrl_f",
            "page_down",
            "page_up",
            "visit_page"
        ]
    );
    for t in &tools {
        assert_eq!(t.origin, pb::ToolOrigin::Builtin as i32);
        assert!(!t.description.is_empty());
        let schema: serde_json::Value =
            serde_json::from_str(&t.input_schema_json).expect("schema json");
        assert_eq!(schema["type"], "object", "{}", t.name);
        assert!(t.hints.is_some());
    }
    let visit = tools
        .iter()
        .find(|t| t.name == "visit_page")
        .expect("visit_page");
    let schema: serde_json::Value = serde_json::from_str(&visit.input_schema_json).expect("schema");
    assert_eq!(schema["required"], json!(["url"]));
    assert_eq!(schema["properties"]["url"]["type"], "string");
    assert!(
        visit
            .hints
            .as_ref()
            .is_some_and(|h| h.open_world && h.read_only)
    );
    // The schema is the one the server enforces: an extra property is refused.
    let e = call(
        &mut c,
        "",
        "visit_page",
        json!({"url": "http://127.0.0.1/", "extra": 1}),
    )
    .await
    .expect_err("unknown field");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("extra"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_the_right_status() {
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    let s = open_session(&mut c).await;
    let e = call(&mut c, &s, "no_such_tool", json!({}))
        .await
        .expect_err("unknown tool");
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("no_such_tool"));

    let e = c
        .call_tool(pb::CallToolRequest {
            session_id: s.clone(),
            tool: "visit_page".into(),
            arguments_json: "{\"url\": ".into(),
        })
        .await
        .expect_err("bad json");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("not valid JSON"), "{}", e.message());

    let e = c
        .call_tool(pb::CallToolRequest {
            session_id: s.clone(),
            tool: "visit_page".into(),
            arguments_json: "[1]".into(),
        })
        .await
        .expect_err("not an object");
    assert_eq!(e.code(), Code::InvalidArgument);

    let e = call(&mut c, &s, "visit_page", json!({}))
        .await
        .expect_err("missing field");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("`url`"), "{}", e.message());
    let e = call(&mut c, &s, "visit_page", json!({"url": 42}))
        .await
        .expect_err("wrong type");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("url:"), "{}", e.message());
    let e = call(&mut c, &s, "visit_page", json!({"url": "not a url"}))
        .await
        .expect_err("bad url");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("url:"), "{}", e.message());
    let e = call(
        &mut c,
        &s,
        "find_on_page_ctrl_f",
        json!({"search_string": " ;; "}),
    )
    .await
    .expect_err("empty query");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("search_string"), "{}", e.message());
    let e = call(&mut c, &s, "page_down", json!({"n": 2}))
        .await
        .expect_err("no args");
    assert_eq!(e.code(), Code::InvalidArgument);

    let e = call(
        &mut c,
        "0123456789abcdef0123456789abcdef",
        "page_down",
        json!({}),
    )
    .await
    .expect_err("unknown session");
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("session"), "{}", e.message());
    let e = c
        .close_session(pb::CloseSessionRequest {
            session_id: "nope".into(),
        })
        .await
        .expect_err("close unknown");
    assert_eq!(e.code(), Code::NotFound);
    // Closing frees the session: its id is unknown afterwards.
    c.close_session(pb::CloseSessionRequest {
        session_id: s.clone(),
    })
    .await
    .expect("close");
    let e = call(&mut c, &s, "page_down", json!({}))
        .await
        .expect_err("closed");
    assert_eq!(e.code(), Code::NotFound);
    // A request over server.max_request_bytes is refused by the transport.
    let e = call(
        &mut c,
        "",
        "visit_page",
        json!({"url": "x".repeat(2 << 20)}),
    )
    .await
    .expect_err("too large");
    assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_and_are_limited() {
    let pages = PageServer::start().await;
    let server = Server::start(&test_policy(
        "[sessions]\nidle_ttl_secs = 1\nmax_sessions = 2\n",
    ));
    let mut c = server.client().await;
    let a = c
        .open_session(pb::OpenSessionRequest {})
        .await
        .expect("a")
        .into_inner();
    assert_eq!(a.idle_ttl_seconds, 1);
    let b = open_session(&mut c).await;
    let e = c
        .open_session(pb::OpenSessionRequest {})
        .await
        .expect_err("over max");
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(
        e.message().contains("sessions.max_sessions"),
        "{}",
        e.message()
    );
    // Keep b busy-ish (used recently), let a idle past its TTL.
    ok(
        &mut c,
        &b,
        "visit_page",
        json!({"url": pages.url("/other")}),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    ok(&mut c, &b, "page_down", json!({})).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let e = call(&mut c, &a.session_id, "page_down", json!({}))
        .await
        .expect_err("expired");
    assert_eq!(e.code(), Code::NotFound);
    ok(&mut c, &b, "page_down", json!({})).await;
    // The expired session's slot is free again.
    open_session(&mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = Server::start(&test_policy(""));
    let channel = server.channel().await;
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "sibyl.v1.ToolService"] {
        let r = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health")
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }

    let mut refl = ServerReflectionClient::new(channel);
    let requests = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "sibyl.v1.ToolService".into(),
            )),
        },
    ];
    let mut stream = refl
        .server_reflection_info(futures::stream::iter(requests))
        .await
        .expect("reflection")
        .into_inner();
    let first = stream.message().await.expect("msg").expect("some");
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("expected a service list");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for want in ["sibyl.v1.ToolService", "grpc.health.v1.Health"] {
        assert!(names.contains(&want), "{names:?}");
    }
    let second = stream.message().await.expect("msg").expect("some");
    let Some(MessageResponse::FileDescriptorResponse(fds)) = second.message_response else {
        panic!("expected a file descriptor");
    };
    let fd = <prost_types::FileDescriptorProto as prost::Message>::decode(
        fds.file_descriptor_proto[0].as_slice(),
    )
    .expect("descriptor");
    assert_eq!(fd.package(), "sibyl.v1");
    assert!(fd.service.iter().any(|s| s.name() == "ToolService"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_gracefully() {
    let server = Server::start(&test_policy(""));
    let mut c = server.client().await;
    open_session(&mut c).await;
    let status = server.terminate();
    assert!(status.success(), "exit status {status:?}");
}
