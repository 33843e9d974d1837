//! A real NeMo Gym resources server for tests: spawned from the venv that
//! `scripts/setup_nemo_gym.sh` makes (its interpreter in `NENYAX_NEMO_GYM_PYTHON`), on a free
//! port of 127.0.0.1, ready once `GET /` answers `{"status":"ok"}`, killed on drop. A watchdog
//! thread in the server exits it when the process that started it is gone, so a test binary
//! that ends (or dies) leaves no server behind.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The interpreter of the NeMo Gym venv, or why there is none. With `NENYAX_REQUIRE_NEMO_GYM`
/// set (scripts/test.sh and CI set it) a missing interpreter is a failure, never a skip.
pub fn python() -> Option<String> {
    match std::env::var("NENYAX_NEMO_GYM_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            let why =
                "NENYAX_NEMO_GYM_PYTHON is not set: run scripts/setup_nemo_gym.sh and point it \
                       at .venv-nemo-gym/bin/python (scripts/test.sh does both)";
            if std::env::var_os("NENYAX_REQUIRE_NEMO_GYM").is_some() {
                panic!("{why}");
            }
            eprintln!("SKIPPED (NeMo Gym tests): {why}");
            None
        }
    }
}

/// `site-packages/resources_servers` of the venv.
pub fn servers_dir(python: &str) -> PathBuf {
    let out = Command::new(python)
        .args([
            "-c",
            "import resources_servers; print(list(resources_servers.__path__)[0])",
        ])
        .output()
        .expect("run the NeMo Gym interpreter");
    assert!(
        out.status.success(),
        "{python} cannot import resources_servers: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The shipped `data/example.jsonl` of server `name`.
pub fn example_data(python: &str, name: &str) -> String {
    servers_dir(python)
        .join(name)
        .join("data/example.jsonl")
        .display()
        .to_string()
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Whether `GET /` on the port answers `{"status":"ok"}` (plain std, so any test crate can
/// include this file).
fn alive(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reply = String::new();
    c.write_all(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_ok()
        && c.read_to_string(&mut reply).is_ok()
        && reply.starts_with("HTTP/1.1 200")
        && reply.contains("\"ok\"")
}

/// A running resources server.
pub struct ResourcesServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The server's name (its folder under resources_servers/).
    pub name: String,
    child: Option<Child>,
}

const WATCHDOG: &str = "import os, sys, threading, time, runpy
parent = os.getppid()
def watch():
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ['app.py']
runpy.run_path('app.py', run_name='__main__')
";

impl ResourcesServer {
    /// Start server `name` and wait (at most 120 s) until it answers.
    pub fn start(python: &str, name: &str) -> ResourcesServer {
        ResourcesServer::start_on(python, name, free_port())
    }

    /// Start server `name` on `port`.
    pub fn start_on(python: &str, name: &str, port: u16) -> ResourcesServer {
        let dir = servers_dir(python).join(name);
        let config = format!(
            "head_server: {{host: 127.0.0.1, port: 11000}}\ndry_run: false\n{name}:\n  resources_servers:\n    {name}: {{entrypoint: app.py, host: 127.0.0.1, port: {port}}}\n"
        );
        ResourcesServer::spawn(python, name, dir, name, config, port)
    }

    /// Start NeMo Gym's own model server `vllm_model` in front of the vLLM-compatible server
    /// at `base_url` (serving `model`), configured as its shipped
    /// `configs/vllm_model_for_training.yaml`: it returns token ids and log-probs on every
    /// message (chat) or output item (Responses).
    pub fn start_vllm_model(python: &str, base_url: &str, model: &str) -> ResourcesServer {
        let dir = servers_dir(python)
            .parent()
            .expect("site-packages")
            .join("responses_api_models/vllm_model");
        let port = free_port();
        let config = format!(
            "head_server: {{host: 127.0.0.1, port: 11000}}\ndry_run: false\npolicy_model:\n  responses_api_models:\n    vllm_model: {{entrypoint: app.py, host: 127.0.0.1, port: {port}, base_url: '{base_url}', api_key: none, model: {model}, return_token_id_information: true, request_prompt_and_generation_token_ids: false, uses_reasoning_parser: true}}\n"
        );
        ResourcesServer::spawn(python, "vllm_model", dir, "policy_model", config, port)
    }

    fn spawn(
        python: &str,
        name: &str,
        dir: PathBuf,
        config_path: &str,
        config: String,
        port: u16,
    ) -> ResourcesServer {
        let child = Command::new(python)
            .args(["-c", WATCHDOG])
            .current_dir(&dir)
            .env("NEMO_GYM_CONFIG_PATH", config_path)
            .env("NEMO_GYM_CONFIG_DICT", config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the resources server");
        let mut s = ResourcesServer {
            url: format!("http://127.0.0.1:{port}"),
            name: name.to_string(),
            child: Some(child),
        };
        let t0 = Instant::now();
        loop {
            if alive(port) {
                return s;
            }
            if let Some(st) = s.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("resources server {name} exited during startup with {st}");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "resources server {name} not ready after 120 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kill the server now (a crash, as far as clients can tell).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ResourcesServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An assistant turn that only calls tools (`call_0`, `call_1`, ...), as scripted models send.
#[allow(dead_code)]
pub fn calls(calls: &[(&str, serde_json::Value)]) -> nenyax::Message {
    let mut m = nenyax::Message::assistant("");
    m.content = serde_json::Value::Null;
    m.tool_calls = Some(
        calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| nenyax::ToolCall {
                id: Some(format!("call_{i}")),
                name: name.to_string(),
                arguments: serde_json::Value::String(args.to_string()),
            })
            .collect(),
    );
    m
}
