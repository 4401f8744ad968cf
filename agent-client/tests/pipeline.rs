//! End-to-end tests of the Sibyl pipeline: `sibyl-agent ask` / `replay` against a real
//! sibyl-server on 127.0.0.1, a local web server of a saved Wikipedia page, and a local
//! OpenAI-compatible server replaying scripted replies.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use common::*;
use serde_json::{Value, json};
use sibyl_agent::cli::{Cli, run};

/// A fact from the article's History section, several viewports down.
const FACT_SENTENCE: &str = "four crew members were killed";
const QUESTION: &str =
    "How many of Abel Tasman's crew were killed in their hostile encounter with the Maori in 1642?";

/// Runs the CLI in-process; returns (exit code, stdout, stderr).
async fn cli(args: &[&str]) -> (i32, String, String) {
    let mut argv = vec!["sibyl-agent"];
    argv.extend_from_slice(args);
    let parsed = Cli::try_parse_from(argv).expect("arguments parse");
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run(parsed, &mut out, &mut err).await;
    (
        code,
        String::from_utf8(out).expect("utf8"),
        String::from_utf8(err).expect("utf8"),
    )
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or("")
}

fn trace_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line is JSON"))
        .collect()
}

fn events_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

/// The scripted model for a question about Tasman's 1642 visit, over the saved page.
fn tasman_rules(page_url: &str) -> Vec<Rule> {
    vec![
        when(&[PLANNER])
            .unless(&["NOTE-1"])
            .reply(&choose("visit_page", json!({"url": page_url}))),
        when(&[&format!("{CHANNEL}\nTool: visit_page\n"), "New Zealand"]).reply(
            "Facts:\n  1. NOTE-1 The page is the New Zealand article; it spans several viewports.\nExplanation:\n  The History section is further down.\nPlan:\n  Search the page for the hostile encounter.",
        ),
        when(&[PLANNER, "NOTE-1"])
            .unless(&["NOTE-2"])
            .reply(&choose(
                "find_on_page_ctrl_f",
                json!({"search_string": "hostile encounter"}),
            )),
        // Only matches when the real find result holds the fact.
        when(&[
            &format!("{CHANNEL}\nTool: find_on_page_ctrl_f\n"),
            FACT_SENTENCE,
            "Abel Tasman",
        ])
        .reply(
            "Facts:\n  1. NOTE-2 In a hostile encounter in 1642, four of Abel Tasman's crew members were killed.\nExplanation:\n  This answers the question.\nPlan:\n  None needed.",
        ),
        when(&[PLANNER, "NOTE-2"]).reply(&done()),
        when(&[ACTOR, "NOTE-2"])
            .reply("Step 2 found it: four crew members were killed.\nAnswer: four"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER, "Answer: four"]).reply("4"),
    ]
}

#[tokio::test]
async fn answers_with_visit_page_and_find_on_page_over_a_real_page() {
    let sibyl = start_sibyl().await;
    let pages = start_pages().await;
    let page_url = format!("{}{PAGE_PATH}", pages.url());
    let model = start_model(tasman_rules(&page_url)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        QUESTION,
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "test-model",
        "--votes",
        "1",
        "--no-cache",
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "stderr: {err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(out, "4\n");
    assert!(err.contains("step 1: visit_page"), "{err}");
    assert!(err.contains("step 2: find_on_page_ctrl_f"), "{err}");
    assert!(model.unmatched().is_empty());

    let events = trace_events(&trace);
    let calls = events_of(&events, "tool_call");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["tool"], "visit_page");
    assert_eq!(calls[0]["result"]["is_error"], false);
    let found = calls[1]["result"]["text"].as_str().expect("text");
    assert!(found.contains(FACT_SENTENCE), "{found}");
    // The find moved the viewport past the first page of the article.
    assert!(!found.contains("Showing page 1 of"), "{found}");
    let end = events_of(&events, "run_end");
    assert_eq!(end[0]["stop"], "planner_done");
    assert_eq!(end[0]["steps"], 2);
    assert_eq!(events.last().expect("last")["event"], "answer");
    // The global workspace carries the first note into the second planner call.
    let notes = events_of(&events, "note");
    assert!(notes[0]["note"].as_str().expect("note").contains("NOTE-1"));
    // Every model call is one system and one user message: no chat history.
    for m in events_of(&events, "model") {
        assert_eq!(
            m["request"]["messages"].as_array().expect("messages").len(),
            2
        );
    }
}

#[tokio::test]
async fn malformed_json_and_unknown_tools_are_re_asked_with_the_error() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER])
            .unless(&["previous reply was rejected"])
            .reply("Sure! I will search the web {tool: search"),
        when(&[PLANNER, "not valid JSON"]).reply(&choose("google_search", json!({"q": "2+2"}))),
        when(&[PLANNER, "unknown tool `google_search`"]).reply(&done()),
        when(&[ACTOR]).reply("2 + 2 = 4.\nAnswer: 4"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("4"),
    ])
    .await;
    let (code, out, err) = cli(&[
        "ask",
        "What is 2+2?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 0, "{err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(last_line(&out), "4");
    assert_eq!(model.count(PLANNER), 3);
    assert!(err.contains("attempt 1 of 4): not valid JSON"), "{err}");
    assert!(
        err.contains("attempt 2 of 4): unknown tool `google_search`"),
        "{err}"
    );
    // The unknown tool was never sent to the server.
    assert!(!err.contains("step 1:"), "{err}");
}

#[tokio::test]
async fn re_asks_are_bounded_and_the_jury_still_answers() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).reply("no json here, ever"),
        when(&[ACTOR]).reply("Educated guess.\nAnswer: 7"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("7"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        "Pick a number.",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--no-cache",
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(last_line(&out), "7");
    assert_eq!(model.count(PLANNER), 4, "1 ask + 3 re-asks");
    let events = trace_events(&trace);
    assert_eq!(events_of(&events, "run_end")[0]["stop"], "planner_failed");
}

#[tokio::test]
async fn the_step_limit_ends_the_loop() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).reply(&choose("page_down", json!({}))),
        when(&[CHANNEL]).reply("Facts:\n  none new\nExplanation:\n  no page open\nPlan:\n  scroll"),
        when(&[ACTOR]).reply("Answer: unknown page"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("blank"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        "Scroll forever?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--max-steps",
        "2",
        "--no-cache",
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(last_line(&out), "blank");
    assert!(
        err.contains("ended after 2 step(s): step limit reached"),
        "{err}"
    );
    assert_eq!(model.count(PLANNER), 2);
    let events = trace_events(&trace);
    assert_eq!(events_of(&events, "tool_call").len(), 2);
    let end = events_of(&events, "run_end");
    assert_eq!(end[0]["stop"], "step_limit");
    assert_eq!(end[0]["steps"], 2);
}

#[tokio::test]
async fn the_jury_corrects_a_wrong_draft() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).reply(&done()),
        when(&[ACTOR]).unless(&["## Critic"]).reply(
            "Interpol is an international organisation, so its seat is in Paris.\nAnswer: Paris",
        ),
        when(&[CRITIC])
            .unless(&["Answer: Lyon"])
            .reply("Flaw: the General Secretariat moved from Saint-Cloud near Paris to Lyon in 1989. Paris is wrong."),
        when(&[ACTOR, "Lyon in 1989"])
            .reply("The Critic is right: the headquarters has been in Lyon since 1989.\nAnswer: Lyon"),
        when(&[CRITIC, "Answer: Lyon"]).reply("No flaw left. TERMINATE"),
        when(&[FORMATTER, "Answer: Paris"]).reply("Paris"),
        when(&[FORMATTER, "Answer: Lyon"]).reply("Lyon"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        "In which city is the headquarters of Interpol?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--no-cache",
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "{err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(last_line(&out), "Lyon");
    let events = trace_events(&trace);
    let end = events_of(&events, "run_end");
    assert_eq!(end[0]["jury_agreed"], true);
    assert_eq!(end[0]["jury_rounds"], 4);
    // Actor and Critic used their own temperatures.
    let temps: Vec<(String, f64)> = events_of(&events, "model")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().expect("role").to_string(),
                m["request"]["temperature"].as_f64().expect("t"),
            )
        })
        .collect();
    assert!(
        temps
            .iter()
            .any(|(r, t)| r == "actor" && (*t - 0.1).abs() < 1e-6)
    );
    assert!(temps.iter().any(|(r, t)| r == "critic" && *t == 0.0));
}

#[tokio::test]
async fn reasoning_blocks_of_thinking_models_are_ignored() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).reply(&format!(
            "<think>Maybe {{\"tool\": \"visit_page\"}}? No.</think>\n{}",
            done()
        )),
        when(&[ACTOR]).unless(&["## Critic"]).reply("Answer: Paris"),
        when(&[CRITIC]).unless(&["Answer: Lyon"]).reply(
            "<think>Should I say TERMINATE? No, there is a flaw.</think>Flaw: it moved to Lyon.",
        ),
        when(&[ACTOR, "moved to Lyon"]).reply("<think>hmm</think>Answer: Lyon"),
        when(&[CRITIC, "Answer: Lyon"]).reply("TERMINATE"),
        when(&[FORMATTER, "Answer: Lyon"]).reply("<think>strip Answer:</think>Lyon"),
    ])
    .await;
    let (code, out, err) = cli(&[
        "ask",
        "Where is Interpol?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 0, "{err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(out, "Lyon\n");
    assert_eq!(model.count(PLANNER), 1);
}

#[tokio::test]
async fn the_vote_chooses_the_majority_of_independent_runs() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).reply(&done()),
        when(&[ACTOR]).seed(0).reply("Answer: 41"),
        when(&[ACTOR]).seed(1).reply("Answer: 42"),
        when(&[ACTOR]).seed(2).reply("Answer: 42.0"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER, "Answer: 41"]).reply("41"),
        when(&[FORMATTER, "Answer: 42.0"]).reply("42.0"),
        when(&[FORMATTER, "Answer: 42"]).reply("42"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("t.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        "What is six times seven?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--no-cache",
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "{err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(last_line(&out), "42", "{err}");
    let events = trace_events(&trace);
    let vote = events_of(&events, "vote");
    assert_eq!(vote[0]["answers"], json!(["41", "42", "42.0"]));
    assert_eq!(vote[0]["outcome"]["votes"], 2);
    assert_eq!(vote[0]["outcome"]["of"], 3);
    assert_eq!(vote[0]["outcome"]["winner_run"], 1);
    // Runs 2 and 3 sample the planner at the vote temperature.
    let planner_temps: Vec<f64> = model
        .seen()
        .iter()
        .filter(|s| s.text.contains(PLANNER))
        .map(|s| s.body["temperature"].as_f64().expect("t"))
        .collect();
    assert_eq!(planner_temps.len(), 3);
    assert_eq!(planner_temps[0], 0.0);
    assert!((planner_temps[1] - 0.7).abs() < 1e-6 && (planner_temps[2] - 0.7).abs() < 1e-6);
}

#[tokio::test]
async fn the_cache_makes_a_rerun_cost_no_model_calls() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).reply(&done()),
        when(&[ACTOR]).reply("Answer: 9"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("9"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache.sqlite");
    let args = [
        "ask",
        "What is 3 squared?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--cache",
        cache.to_str().expect("path"),
    ];
    let (code, out, err) = cli(&args).await;
    assert_eq!((code, out.as_str()), (0, "9\n"), "{err}");
    let first = model.seen().len();
    assert_eq!(first, 4);
    let (code, out2, err) = cli(&args).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out2, out);
    assert_eq!(model.seen().len(), first, "the re-run hit the cache");
}

fn fast_retry_config(dir: &Path, timeout_secs: u64) -> String {
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "[model]\ntimeout_secs = {timeout_secs}\nmax_retries = 2\ninitial_backoff_ms = 100\nmax_backoff_ms = 1000\ncache = false\n"
        ),
    )
    .expect("write config");
    path.to_str().expect("path").to_string()
}

#[tokio::test]
async fn model_500s_are_retried_with_backoff() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).times(2).status(500),
        when(&[PLANNER]).reply(&done()),
        when(&[ACTOR]).times(1).status(429),
        when(&[ACTOR]).reply("Answer: 5"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("5"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fast_retry_config(dir.path(), 30);
    let started = Instant::now();
    let (code, out, err) = cli(&[
        "ask",
        "What is 2+3?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--config",
        &config,
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(last_line(&out), "5");
    assert_eq!(model.count(PLANNER), 3);
    assert_eq!(model.count(ACTOR), 2);
    // Backoffs 100 ms + 200 ms for the planner, 100 ms for the actor.
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn a_model_that_keeps_failing_is_a_clear_failure() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![when(&[PLANNER]).status(503)]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fast_retry_config(dir.path(), 30);
    let trace = dir.path().join("t.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        "Anything?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--config",
        &config,
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.contains("failed after 3 attempts") && err.contains("HTTP 503"),
        "{err}"
    );
    assert_eq!(model.seen().len(), 3);
    // The trace ends by saying why, and replaying it says so too.
    let events = trace_events(&trace);
    let last = events.last().expect("events");
    assert_eq!(last["event"], "failed");
    assert!(
        last["message"]
            .as_str()
            .expect("message")
            .contains("HTTP 503")
    );
    let (code, out, err) = cli(&["replay", trace.to_str().expect("path")]).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains("the traced run failed") && err.contains("HTTP 503"),
        "{err}"
    );
}

#[tokio::test]
async fn a_later_run_that_fails_keeps_the_finished_runs_and_replays() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).seed(2).status(500),
        when(&[PLANNER]).reply(&done()),
        when(&[ACTOR]).reply("Answer: 12"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("12"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fast_retry_config(dir.path(), 30);
    let trace = dir.path().join("t.jsonl");
    let (code, out, err) = cli(&[
        "ask",
        "What is 3 times 4?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--config",
        &config,
        "--trace",
        trace.to_str().expect("path"),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "12\n");
    assert!(err.contains("[run 3/3] failed: model request"), "{err}");
    assert!(err.contains("voting on the 2 finished run(s)"), "{err}");
    let events = trace_events(&trace);
    assert_eq!(events_of(&events, "model_failed").len(), 1);
    assert_eq!(events_of(&events, "vote")[0]["outcome"]["of"], 2);
    // The replay meets the same failure at the same request and ends the same way.
    model.server.stop().await;
    let (code, out2, err) = cli(&["replay", trace.to_str().expect("path")]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out2, out);
    assert!(err.contains("recorded in the trace"), "{err}");
}

#[tokio::test]
async fn model_timeouts_are_retried_then_reported() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).delayed(Duration::from_secs(5), &done()),
    ])
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = fast_retry_config(dir.path(), 1);
    let started = Instant::now();
    let (code, _out, err) = cli(&[
        "ask",
        "Slow?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--config",
        &config,
    ])
    .await;
    let took = started.elapsed();
    assert_eq!(code, 1);
    assert!(
        err.contains("failed after 3 attempts") && err.contains("timed out"),
        "{err}"
    );
    assert_eq!(model.seen().len(), 3);
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_refusing_endpoint_fails_without_retries() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![when(&[PLANNER]).status(401)]).await;
    let (code, _out, err) = cli(&[
        "ask",
        "Key?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("refused: HTTP 401"), "{err}");
    assert_eq!(model.seen().len(), 1);
}

#[tokio::test]
async fn an_oversized_model_response_is_refused() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![when(&[PLANNER]).huge(17 << 20)]).await;
    let (code, _out, err) = cli(&[
        "ask",
        "Big?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("larger than 16777216 bytes"), "{err}");
    assert_eq!(model.seen().len(), 1, "not retried");
}

#[tokio::test]
async fn arguments_the_server_refuses_reach_the_channel_as_a_failed_step() {
    let sibyl = start_sibyl().await;
    let model = start_model(vec![
        when(&[PLANNER]).unless(&["NOTE-1"]).reply(&choose(
            "visit_page",
            json!({"url": "http://127.0.0.1:9/", "colour": "blue"}),
        )),
        when(&[
            CHANNEL,
            "The tool call failed: Error (InvalidArgument)",
            "colour",
        ])
        .reply(
            "Facts:\n  NOTE-1 visit_page takes only `url`.\nExplanation:\n  retry\nPlan:\n  stop",
        ),
        when(&[PLANNER, "NOTE-1"]).reply(&done()),
        when(&[ACTOR]).reply("Answer: nothing"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("nothing"),
    ])
    .await;
    let (code, out, err) = cli(&[
        "ask",
        "Visit with colour?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 0, "{err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(last_line(&out), "nothing");
    assert!(
        err.contains("step 1: visit_page") && err.contains("-> error"),
        "{err}"
    );
}

#[tokio::test]
async fn ask_without_a_model_name_says_how_to_give_one() {
    let (code, _out, err) = cli(&[
        "ask",
        "Who?",
        "--server",
        "http://127.0.0.1:9",
        "--model",
        "",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("--model") && err.contains("OPENAI_MODEL"),
        "{err}"
    );
}

fn agent_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sibyl-agent"))
}

/// The CLI contract over the real binary, and `replay` reproducing it offline.
#[tokio::test]
async fn ask_binary_contract_and_replay_reproduce_the_answer_offline() {
    let sibyl = start_sibyl().await;
    let pages = start_pages().await;
    let page_url = format!("{}{PAGE_PATH}", pages.url());
    let model = start_model(tasman_rules(&page_url)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("trace.jsonl");
    let server_url = sibyl.url();
    let base_url = model.base_url();
    let cache = dir.path().join("cache.sqlite");
    let trace_arg = trace.clone();
    let ask = tokio::task::spawn_blocking(move || {
        agent_bin()
            .args([
                "ask",
                QUESTION,
                "--server",
                &server_url,
                "--votes",
                "1",
                "--trace",
            ])
            .arg(&trace_arg)
            .env("OPENAI_BASE_URL", &base_url)
            .env("OPENAI_MODEL", "test-model")
            .env("OPENAI_API_KEY", "sk-test")
            .env("SIBYL_CACHE", &cache)
            .output()
            .expect("run sibyl-agent ask")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&ask.stderr);
    assert!(
        ask.status.success(),
        "{stderr}\nunmatched: {:?}",
        model.unmatched()
    );
    let stdout = String::from_utf8(ask.stdout).expect("utf8");
    assert_eq!(last_line(&stdout), "4");
    assert!(stderr.contains("[run 1/1] step 1: visit_page"), "{stderr}");
    assert!(
        stderr.contains("[run 1/1] step 2: find_on_page_ctrl_f"),
        "{stderr}"
    );
    // The bearer key reached the endpoint's requests only as a header: not in the trace.
    assert!(
        !std::fs::read_to_string(&trace)
            .expect("trace")
            .contains("sk-test")
    );

    // Everything goes away: no model, no tool server, no web server.
    model.server.stop().await;
    sibyl.stop().await;
    pages.stop().await;

    let trace_arg = trace.clone();
    let replay = tokio::task::spawn_blocking(move || {
        agent_bin()
            .arg("replay")
            .arg(&trace_arg)
            .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            .env("SIBYL_SERVER", "http://127.0.0.1:9")
            .output()
            .expect("run sibyl-agent replay")
    })
    .await
    .expect("join");
    let replay_err = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success(), "{replay_err}");
    assert_eq!(
        String::from_utf8(replay.stdout).expect("utf8"),
        stdout,
        "byte for byte"
    );
    assert!(
        replay_err.contains("step 2: find_on_page_ctrl_f"),
        "{replay_err}"
    );

    // A trace whose tool result was altered no longer replays: the replay is checked.
    let tampered = dir.path().join("tampered.jsonl");
    let text = std::fs::read_to_string(&trace).expect("trace");
    std::fs::write(
        &tampered,
        text.replacen("four crew members", "five crew members", 1),
    )
    .expect("write");
    let bad = agent_bin()
        .arg("replay")
        .arg(&tampered)
        .output()
        .expect("run replay");
    assert_eq!(bad.status.code(), Some(1));
    let bad_err = String::from_utf8_lossy(&bad.stderr);
    assert!(bad_err.contains("diverged"), "{bad_err}");
}

#[tokio::test]
async fn replay_of_a_file_that_is_not_a_trace_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.jsonl");
    std::fs::write(&junk, "{\"hello\": 1}\n").expect("write");
    let (code, out, err) = cli(&["replay", junk.to_str().expect("path")]).await;
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("junk.jsonl line 1"), "{err}");
    let (code, _, err) = cli(&["replay", "/nonexistent/trace.jsonl"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/trace.jsonl"), "{err}");
}

/// A computation through the server's real `computer_terminal` (issue 3's Python runners).
#[tokio::test]
async fn answers_a_computation_with_computer_terminal() {
    let sibyl = start_sibyl().await;
    let mut client = sibyl_agent::client::SibylClient::connect(&sibyl.url())
        .await
        .expect("connect");
    let tools = client.list_tools().await.expect("tools");
    assert!(
        tools.iter().any(|t| t.name == "computer_terminal"),
        "sibyl-server does not list computer_terminal"
    );
    let model = start_model(vec![
        when(&[PLANNER]).unless(&["NOTE-1"]).reply(&choose(
            "computer_terminal",
            json!({"code": "print(sum(range(1, 101)) * 3)"}),
        )),
        when(&[IMPROVE]).reply(
            &json!({"reason": "fine", "improved_code": "print(sum(i for i in range(1, 101)) * 3)"})
                .to_string(),
        ),
        // Only matches when the real Python run printed the sum.
        when(&[&format!("{CHANNEL}\nTool: computer_terminal\n"), "15150"]).reply(
            "Facts:\n  1. NOTE-1 the code printed 15150\nExplanation:\n  done\nPlan:\n  answer",
        ),
        when(&[PLANNER, "NOTE-1"]).reply(&done()),
        when(&[ACTOR]).reply("Answer: 15,150"),
        when(&[CRITIC]).reply("TERMINATE"),
        when(&[FORMATTER]).reply("15150"),
    ])
    .await;
    let (code, out, err) = cli(&[
        "ask",
        "What is three times the sum of the integers from 1 to 100?",
        "--server",
        &sibyl.url(),
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--votes",
        "1",
        "--no-cache",
    ])
    .await;
    assert_eq!(code, 0, "{err}\nunmatched: {:?}", model.unmatched());
    assert_eq!(last_line(&out), "15150");
    assert_eq!(model.count(IMPROVE), 1);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Figures for the report: wall time of `ask` (cold cache), `ask` again (warm cache) and
/// `replay` over the two-step page question, through the real binary. Run with
/// `cargo test -p sibyl-agent --test pipeline -- --ignored --nocapture bench_`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; prints figures"]
async fn bench_ask_cached_ask_and_replay() {
    let sibyl = start_sibyl().await;
    let pages = start_pages().await;
    let page_url = format!("{}{PAGE_PATH}", pages.url());
    let model = start_model(tasman_rules(&page_url)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rounds = 5;
    let (mut cold, mut warm, mut replay) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let cache = dir.path().join(format!("cache-{i}.sqlite"));
        let trace = dir.path().join(format!("trace-{i}.jsonl"));
        for pass in 0..2 {
            let (server, base, cache, trace) =
                (sibyl.url(), model.base_url(), cache.clone(), trace.clone());
            let before = model.seen().len();
            let t = Instant::now();
            let out = tokio::task::spawn_blocking(move || {
                agent_bin()
                    .args(["ask", QUESTION, "--server", &server, "--votes", "1"])
                    .arg("--trace")
                    .arg(&trace)
                    .arg("--cache")
                    .arg(&cache)
                    .env("OPENAI_BASE_URL", &base)
                    .env("OPENAI_MODEL", "test-model")
                    .output()
                    .expect("ask")
            })
            .await
            .expect("join");
            let took = t.elapsed();
            assert!(out.status.success());
            let calls = model.seen().len() - before;
            if pass == 0 {
                assert_eq!(calls, 8);
                cold.push(took);
            } else {
                assert_eq!(calls, 0);
                warm.push(took);
            }
        }
        let trace = dir.path().join(format!("trace-{i}.jsonl"));
        let t = Instant::now();
        let out = tokio::task::spawn_blocking(move || {
            agent_bin()
                .arg("replay")
                .arg(&trace)
                .output()
                .expect("replay")
        })
        .await
        .expect("join");
        assert!(out.status.success());
        replay.push(t.elapsed());
    }
    let size = std::fs::metadata(dir.path().join("trace-0.jsonl"))
        .expect("trace")
        .len();
    println!(
        "ask cold cache: {:?} median; ask warm cache: {:?}; replay: {:?} (of {rounds}); trace {size} bytes; 8 model calls cold, 0 warm",
        median(cold),
        median(warm),
        median(replay)
    );
}
