//! The official `openai` Python client works against the recording server unchanged: sync,
//! async and streaming chat completions, legacy completions, the Responses API (plain and
//! streamed) and the model list; every call lands in the recording, with its stream recorded
//! whole. The interpreter is `NENYAX_TEST_PYTHON` (scripts/test.sh installs `openai` there).

use std::process::Command;
use std::sync::Arc;

use nenyax::{Backend, FunctionModel, ModelServer, Role};
use serde_json::Value;

#[test]
fn the_official_openai_client_works_unchanged() {
    let python = std::env::var("NENYAX_TEST_PYTHON").expect(
        "NENYAX_TEST_PYTHON is not set: run scripts/test.sh, which installs openai into .venv",
    );
    let server = ModelServer::start().unwrap();
    let rec = server.record(Backend::Model(Arc::new(FunctionModel::new(
        "echo",
        |messages| {
            let last = messages
                .iter()
                .rev()
                .find(|m| m.role == Role::User)
                .and_then(|m| m.text())
                .unwrap_or_default();
            Ok(format!("echo: {last}"))
        },
    ))));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/openai_client.py");
    let out = Command::new(&python)
        .args([script, rec.base_url()])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "openai_client.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (key, want) in [
        ("sync", "echo: sync"),
        ("sync_stream", "echo: sync stream"),
        ("completions", "echo: legacy"),
        ("responses", "echo: responses"),
        ("responses_stream", "echo: responses stream"),
        ("async", "echo: async"),
        ("async_stream", "echo: async stream"),
    ] {
        assert_eq!(v[key], want, "{key} (openai {})", v["version"]);
    }
    assert_eq!(v["models"][0], "echo");
    let gathered: Vec<String> = (0..8).map(|i| format!("echo: gather {i}")).collect();
    assert_eq!(v["gather"], serde_json::json!(gathered));

    let calls = rec.calls();
    assert_eq!(
        calls.len(),
        7 + 8,
        "every model call recorded, GET /models not one"
    );
    assert!(calls.iter().all(|c| c.error.is_none()), "{calls:?}");
    let streamed = calls
        .iter()
        .filter(|c| c.request.get("stream") == Some(&Value::Bool(true)))
        .count();
    assert_eq!(streamed, 3, "two chat streams and one Responses stream");
    let recorded = serde_json::to_string(&calls).unwrap();
    assert!(
        !recorded.contains("sk-not-a-real-key"),
        "the client's key is never recorded"
    );
}
