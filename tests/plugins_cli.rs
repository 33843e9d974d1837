//! `nenyax plugins`: the installed plugins of every kind, the extension points and the registry
//! compiled into the binary, and what a broken plugins config looks like to a user.

use serde_json::Value;
use std::process::{Command, Output};

#[path = "support/cli_run.rs"]
mod cli_run;
use cli_run::{nenyax, stderr, stdout, temp_file};

/// `nenyax plugins args…` with the plugins config at `config` (a path that may not exist).
fn plugins(args: &[&str], config: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .arg("plugins")
        .args(args)
        .env("NENYAX_PLUGINS", config)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("the nenyax binary runs")
}

fn json(o: &Output) -> Vec<Value> {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_str(&stdout(o)).expect("a JSON array")
}

#[test]
fn lists_every_kind_built_in_and_the_configured_ones_with_where_they_came_from() {
    let (_dir, config) = temp_file(
        "plugins.toml",
        "[[plugin]]\nname = \"acme\"\nkind = \"judge\"\nlibrary = \"libacme.so\"\n\
         summary = \"acme's judge\"\n",
    );
    let rows = json(&plugins(&["--json"], &config));
    for kind in [
        "driver",
        "sandbox",
        "judge",
        "learner",
        "provider",
        "hub",
        "telemetry",
    ] {
        assert!(
            rows.iter()
                .any(|r| r["kind"] == kind && r["origin"]["from"] == "built_in"),
            "no built-in {kind}: {rows:?}"
        );
    }
    let builtin = rows.iter().find(|r| r["name"] == "builtin").unwrap();
    assert_eq!(builtin["version"], env!("CARGO_PKG_VERSION"));
    let acme = rows
        .iter()
        .find(|r| r["name"] == "acme")
        .expect("the configured judge");
    assert_eq!(acme["kind"], "judge");
    assert_eq!(acme["origin"]["from"], "config");
    assert_eq!(acme["origin"]["path"], config.display().to_string());
    // The library is not there: listed, but as missing, with the path that is.
    assert_eq!(acme["ready"], false);
    let needs = acme["needs"].as_str().unwrap();
    assert!(
        needs.contains("libacme.so") && needs.contains("does not exist"),
        "{needs}"
    );

    let only = json(&plugins(&["--json", "--kind", "judge"], &config));
    assert!(only.iter().all(|r| r["kind"] == "judge"), "{only:?}");
    let table = stdout(&plugins(&[], &config));
    assert!(
        table.contains("acme") && table.contains(&config.display().to_string()),
        "{table}"
    );
}

#[test]
fn kinds_show_each_interface_and_its_version_honestly() {
    let none = std::path::Path::new("/nonexistent/plugins.toml");
    let rows = json(&nenyax(&["plugins", "--json", "--kinds"]));
    assert_eq!(rows.len(), 7);
    let by = |k: &str| rows.iter().find(|r| r["kind"] == k).unwrap().clone();
    assert_eq!(by("driver")["version"], 1);
    assert_eq!(by("judge")["version"], 1);
    assert_eq!(by("sandbox")["version"], 1);
    assert!(
        by("provider")["interface"]
            .as_str()
            .unwrap()
            .contains("OpenAI-compatible"),
        "providers are data, not a vtable"
    );
    let o = plugins(&["--kinds", "--kind", "judges"], none);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown plugin kind `judges`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_registry_is_built_into_the_binary() {
    // Run from a folder with no checkout, so it can only come from the binary.
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_nenyax"))
        .args(["plugins", "--registry", "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let rows = json(&o);
    assert!(!rows.is_empty());
    for r in &rows {
        for field in [
            "name",
            "kind",
            "source",
            "maintainer",
            "summary",
            "language",
        ] {
            assert!(
                r[field].as_str().is_some_and(|s| !s.is_empty()),
                "{field}: {r}"
            );
        }
    }
}

#[test]
fn a_broken_config_is_one_row_that_says_why() {
    let (_dir, config) = temp_file(
        "plugins.toml",
        "[[plugin]]\nname = \"acme\"\nkind = \"judge\"\ncommand = [\"x\"]\n",
    );
    let rows = json(&plugins(&["--json"], &config));
    let bad = rows
        .iter()
        .find(|r| r["ready"] == false && r["name"] == "(plugins config)");
    let needs = bad.expect("an error row")["needs"].as_str().unwrap();
    assert!(needs.contains("only drivers run as executables"), "{needs}");
    // The built-ins still list.
    assert!(rows.iter().any(|r| r["name"] == "builtin"));
}

/// A provider from the plugins config is data (a base URL and a key variable): `--provider`
/// reaches it with the key from its variable, `plugin-check provider` round-trips a chat
/// completion against a local stub at its base path, and `nenyax plugins` lists it.
#[test]
fn a_configured_provider_is_used_by_name_and_checked() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}/acme/v1", server.server_addr().to_ip().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = String::new();
            req.as_reader().read_to_string(&mut body).unwrap();
            let keyed = req.headers().iter().any(|h| {
                h.field.equiv("Authorization") && h.value.as_str() == "Bearer acme-secret"
            });
            if keyed && req.url() == "/acme/v1/chat/completions" {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            let reply = serde_json::json!({
                "id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "<answer>0</answer>"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            });
            let _ = req.respond(tiny_http::Response::from_string(reply.to_string()));
        }
    });
    let (_dir, config) = temp_file(
        "plugins.toml",
        &format!(
            "[[plugin]]\nname = \"acme\"\nkind = \"provider\"\nbase_url = \"{url}\"\n\
             key_var = \"ACME_KEY\"\nsummary = \"Acme's models\"\n\n\
             [[plugin]]\nname = \"broken\"\nkind = \"provider\"\n\
             base_url = \"https://api.broken.example/v1?region=eu\"\n"
        ),
    );
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nenyax"))
            .args(args)
            .env("NENYAX_PLUGINS", &config)
            .env("ACME_KEY", "acme-secret")
            .output()
            .unwrap()
    };
    let o = run(&[
        "run",
        "builtin:arithmetic?size=5",
        "-n",
        "3",
        "--provider",
        "acme",
        "--model",
        "m",
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(calls.load(Ordering::SeqCst), 3, "{}", stdout(&o));

    let o = run(&["plugin-check", "provider", "acme"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("POST /acme/v1/chat/completions"),
        "{}",
        stdout(&o)
    );
    // A base URL with a query string cannot take the API's paths: the check says so.
    let o = run(&["plugin-check", "provider", "broken"]);
    assert!(!o.status.success());
    assert!(stdout(&o).contains("✘ resolves"), "{}", stdout(&o));
    assert!(stdout(&o).contains("query or fragment"), "{}", stdout(&o));

    let rows = json(&run(&["plugins", "--json", "--kind", "provider"]));
    let acme = rows
        .iter()
        .find(|r| r["name"] == "acme")
        .expect("acme is listed");
    assert_eq!(acme["origin"]["from"], "config");
    let o = run(&[
        "run",
        "builtin:arithmetic",
        "-n",
        "1",
        "--provider",
        "acmee",
        "--model",
        "m",
    ]);
    assert!(stderr(&o).contains("did you mean `acme`"), "{}", stderr(&o));
}
