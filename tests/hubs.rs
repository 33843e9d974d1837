//! `nenyax search` / `nenyax fetch` against the three hubs' recorded replies
//! (tests/data/hubs/, see PROVENANCE.md) served from a local server, harbor checkouts from a
//! local git repository, a Prime package installed for real into a Verifiers interpreter, the
//! offline case, and `nenyax integrations --json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;

#[path = "support/integrations.rs"]
mod integrations;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hubs");

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(Path::new(DATA).join(rel)).unwrap()
}

/// One request the fixture server saw: its URL (path and query) and headers.
#[derive(Debug, Clone)]
struct Seen {
    url: String,
    headers: HashMap<String, String>,
}

/// A local HTTP server answering from the routes `make` gives for its base URL (path without
/// query -> (status, body bytes)).
struct Hub {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Hub {
    fn serve(make: impl FnOnce(&str) -> HashMap<String, (u16, Vec<u8>)>) -> Hub {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let base = format!(
            "http://127.0.0.1:{}",
            server.server_addr().to_ip().unwrap().port()
        );
        let routes = make(&base);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                let headers = req
                    .headers()
                    .iter()
                    .map(|h| {
                        (
                            h.field.as_str().as_str().to_ascii_lowercase(),
                            h.value.to_string(),
                        )
                    })
                    .collect();
                log.lock().unwrap().push(Seen {
                    url: req.url().to_string(),
                    headers,
                });
                let path = req.url().split('?').next().unwrap().to_string();
                let (status, body) = routes
                    .get(&path)
                    .cloned()
                    .unwrap_or((404, b"{\"detail\":\"Not Found\"}".to_vec()));
                // pip reads a simple index only when it says it is HTML.
                let kind = match body.first() {
                    Some(b'<') => "text/html",
                    Some(b'{' | b'[') => "application/json",
                    _ => "application/octet-stream",
                };
                let header = tiny_http::Header::from_bytes("Content-Type", kind).unwrap();
                let _ = req.respond(
                    tiny_http::Response::from_data(body)
                        .with_status_code(status)
                        .with_header(header),
                );
            }
        });
        Hub { base, seen }
    }

    fn requests(&self, path: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.url.split('?').next() == Some(path))
            .cloned()
            .collect()
    }
}

fn routes(pairs: &[(&str, String)]) -> HashMap<String, (u16, Vec<u8>)> {
    pairs
        .iter()
        .map(|(p, b)| (p.to_string(), (200, b.clone().into_bytes())))
        .collect()
}

/// The CLI with a fresh cache, no keys, and `env` on top.
fn nenyax(args: &[&str], cache: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nenyax"));
    c.args(args).env("XDG_CACHE_HOME", cache);
    for k in [
        "HF_TOKEN",
        "PRIME_API_KEY",
        "HF_ENDPOINT",
        "NENYAX_PRIME_API",
        "NENYAX_HARBOR_REGISTRY",
        "MLFLOW_TRACKING_URI",
        "WANDB_API_KEY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_out(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)))
}

/// The single line a failed command prints, checked to be one line.
fn one_line_error(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("Traceback"),
        "{err}"
    );
    err
}

#[test]
fn huggingface_search_lists_openenv_spaces_and_fetch_checks_the_tag() {
    let hub = Hub::serve(|_| {
        routes(&[
            ("/api/spaces", fixture("huggingface/spaces-openenv.json")),
            (
                "/api/spaces/openenv/echo_env",
                fixture("huggingface/space-echo_env.json"),
            ),
            (
                "/api/spaces/gradio/hello_world",
                fixture("huggingface/space-not-openenv.json"),
            ),
        ])
    });
    let cache = tempfile::tempdir().unwrap();
    let env = [("HF_ENDPOINT", hub.base.as_str())];
    let rows = json_out(&nenyax(
        &["search", "huggingface", "echo", "--json", "--limit", "5"],
        cache.path(),
        &env,
    ));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["hub"], "huggingface");
    assert_eq!(rows[0]["name"], "openenv/echo_env");
    assert_eq!(rows[0]["uri"], "openenv:https://openenv-echo-env.hf.space");
    assert_eq!(
        rows[0]["description"],
        "Echoes the message back: the OpenEnv reference environment"
    );
    assert_eq!(rows[0]["meta"]["likes"], 41);
    assert_eq!(rows[1]["description"], "FLEURS ASR Env");
    // No `subdomain` in the reply: the Hub's own rule.
    assert_eq!(
        rows[2]["uri"],
        "openenv:https://kvishalini-medical-triage-env.hf.space"
    );
    assert_eq!(rows[2]["meta"]["stage"], "SLEEPING");
    let asked = &hub.requests("/api/spaces")[0];
    for part in [
        "filter=openenv",
        "search=echo",
        "limit=5",
        "expand=subdomain",
        "expand=cardData",
    ] {
        assert!(asked.url.contains(part), "{part} not in {}", asked.url);
    }
    assert!(
        !asked.headers.contains_key("authorization"),
        "no key was set"
    );

    // A key, when set, goes along.
    let env_key = [("HF_ENDPOINT", hub.base.as_str()), ("HF_TOKEN", "hf_test")];
    let table = nenyax(&["search", "huggingface"], cache.path(), &env_key);
    assert!(table.status.success(), "{}", text(&table.stderr));
    assert!(
        text(&table.stdout).contains("openenv/echo_env"),
        "{}",
        text(&table.stdout)
    );
    let last = hub.requests("/api/spaces").pop().unwrap();
    assert_eq!(last.headers["authorization"], "Bearer hf_test");

    let o = nenyax(
        &["fetch", "huggingface", "openenv/echo_env"],
        cache.path(),
        &env,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout).trim(),
        "openenv:https://openenv-echo-env.hf.space"
    );
    let err = one_line_error(&nenyax(
        &["fetch", "huggingface", "gradio/hello_world"],
        cache.path(),
        &env,
    ));
    assert!(err.contains("not tagged openenv"), "{err}");
    let err = one_line_error(&nenyax(
        &["fetch", "huggingface", "nosuch/space"],
        cache.path(),
        &env,
    ));
    assert!(err.contains("404"), "{err}");
    let err = one_line_error(&nenyax(
        &["fetch", "huggingface", "echo_env"],
        cache.path(),
        &env,
    ));
    assert!(err.contains("owner/name"), "{err}");
}

#[test]
fn prime_search_lists_verifiers_uris() {
    let hub = Hub::serve(|_| {
        routes(&[
            (
                "/api/v1/environmentshub/",
                fixture("prime/environments.json"),
            ),
            (
                "/api/v1/environmentshub/someone/secret-env/@latest",
                fixture("prime/details-private.json"),
            ),
        ])
    });
    let cache = tempfile::tempdir().unwrap();
    let env = [("NENYAX_PRIME_API", hub.base.as_str())];
    let rows = json_out(&nenyax(
        &["search", "prime", "math", "--json"],
        cache.path(),
        &env,
    ));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["name"], "primeintellect/gsm8k");
    assert_eq!(rows[0]["uri"], "verifiers:gsm8k");
    assert_eq!(rows[0]["meta"]["latest_version"], "0.1.14");
    assert_eq!(rows[1]["uri"], "verifiers:reverse_text");
    let asked = &hub.requests("/api/v1/environmentshub/")[0];
    for part in ["search=math", "limit=20", "include_teams=true"] {
        assert!(asked.url.contains(part), "{part} not in {}", asked.url);
    }
    assert!(!asked.headers.contains_key("authorization"));
    // The hub given with its /api/v1 suffix, and a key: both as prime-cli takes them.
    let base = format!("{}/api/v1", hub.base);
    let env_key = [
        ("NENYAX_PRIME_API", base.as_str()),
        ("PRIME_API_KEY", "pk-test"),
    ];
    json_out(&nenyax(
        &["search", "prime", "--json"],
        cache.path(),
        &env_key,
    ));
    let last = hub.requests("/api/v1/environmentshub/").pop().unwrap();
    assert_eq!(last.headers["authorization"], "Bearer pk-test");

    let err = one_line_error(&nenyax(
        &["fetch", "prime", "someone/secret-env"],
        cache.path(),
        &env,
    ));
    assert!(err.contains("private"), "{err}");
    let err = one_line_error(&nenyax(&["fetch", "prime", "gsm8k"], cache.path(), &env));
    assert!(err.contains("owner/name"), "{err}");
    let err = one_line_error(&nenyax(&["search", "primes"], cache.path(), &env));
    assert!(err.contains("did you mean prime"), "{err}");
    let err = one_line_error(&nenyax(
        &["search", "prime", "--limit", "0"],
        cache.path(),
        &env,
    ));
    assert!(err.contains("1 to 1000"), "{err}");
}

/// The module of the served package: a classic-API Verifiers environment of two questions.
const PACKAGE: &str = r#"import verifiers as vf
from datasets import Dataset

ROWS = [("What is 2 + 3?", "5"), ("What is 7 * 6?", "42")]


def load_environment() -> vf.Environment:
    rows = [{"question": q, "answer": a, "info": {"row": i}} for i, (q, a) in enumerate(ROWS)]
    parser = vf.Parser()

    def exact_match(completion, answer, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[exact_match], weights=[1.0], parser=parser)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(rows),
        system_prompt="Reply with the number only.",
        parser=parser,
        rubric=rubric,
    )
"#;

/// Build `nx_hub_arith-0.1.0-py3-none-any.whl` (module, METADATA, WHEEL, hashed RECORD) in
/// `dir` with `python`; returns its path.
fn build_wheel(python: &str, dir: &Path) -> PathBuf {
    std::fs::write(dir.join("module.py"), PACKAGE).unwrap();
    let script = r#"
import base64, hashlib, sys, zipfile
dist = "nx_hub_arith-0.1.0.dist-info"
files = {
    "nx_hub_arith/__init__.py": open(sys.argv[1] + "/module.py", "rb").read(),
    dist + "/METADATA": b"Metadata-Version: 2.1\nName: nx-hub-arith\nVersion: 0.1.0\n",
    dist + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: nenyax-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{name},sha256={digest},{len(data)}\n"
record += dist + "/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1] + "/nx_hub_arith-0.1.0-py3-none-any.whl", "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
    z.writestr(dist + "/RECORD", record)
"#;
    let o = Command::new(python)
        .args(["-c", script])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    dir.join("nx_hub_arith-0.1.0-py3-none-any.whl")
}

/// `nenyax fetch prime` installs the hub's package into the interpreter `verifiers:` runs
/// (NENYAX_PYTHON) from the hub's simple index, and the environment it installed then loads
/// and scores a rollout.
#[test]
fn prime_fetch_installs_the_package_the_verifiers_driver_then_loads() {
    let Some(vf_python) = integrations::python("verifiers_031") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let wheel = build_wheel(&vf_python, work.path());
    let wheel_bytes = std::fs::read(&wheel).unwrap();
    let sha = {
        let o = Command::new("sha256sum").arg(&wheel).output().unwrap();
        text(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    // A fresh venv that sees Verifiers (read-only, through a .pth) and gets the package.
    let venv = work.path().join("venv");
    let o = Command::new(&vf_python)
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let py = venv.join("bin/python").display().to_string();
    let vf_site = text(
        &Command::new(&vf_python)
            .args([
                "-c",
                "import verifiers, os; print(os.path.dirname(os.path.dirname(verifiers.__file__)))",
            ])
            .output()
            .unwrap()
            .stdout,
    );
    let site = text(
        &Command::new(&py)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .unwrap()
            .stdout,
    );
    std::fs::write(
        Path::new(site.trim()).join("verifiers_031.pth"),
        vf_site.trim(),
    )
    .unwrap();

    let wheel_name = "nx_hub_arith-0.1.0-py3-none-any.whl";
    let hub = Hub::serve(|base| {
        // The recorded reply, its package URLs moved from the hub's host to this server.
        let details = fixture("prime/details-nx-hub-arith.json")
            .replace("https://hub.primeintellect.ai", base);
        let link = format!(
            "<!DOCTYPE html><html><body><a href=\"{base}/nenyax-tests/files/{wheel_name}#sha256={sha}\">{wheel_name}</a></body></html>"
        );
        let mut r = HashMap::new();
        r.insert(
            "/api/v1/environmentshub/nenyax-tests/nx-hub-arith/@latest".to_string(),
            (200, details.into_bytes()),
        );
        r.insert(
            "/nenyax-tests/simple/nx-hub-arith/".to_string(),
            (200, link.into_bytes()),
        );
        r.insert(
            format!("/nenyax-tests/files/{wheel_name}"),
            (200, wheel_bytes),
        );
        r
    });
    let cache = tempfile::tempdir().unwrap();
    // Only this server is an index: nothing is looked up anywhere else.
    let index = format!("{}/nenyax-tests/simple/", hub.base);
    let o = nenyax(
        &["fetch", "prime", "nenyax-tests/nx-hub-arith"],
        cache.path(),
        &[
            ("NENYAX_PRIME_API", hub.base.as_str()),
            ("NENYAX_PYTHON", py.as_str()),
            ("PIP_INDEX_URL", index.as_str()),
            ("UV_DEFAULT_INDEX", index.as_str()),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "verifiers:nx_hub_arith");
    assert!(!hub
        .requests(&format!("/nenyax-tests/files/{wheel_name}"))
        .is_empty());

    let env = nenyax::load(&format!("verifiers:nx_hub_arith?python={py}&workers=1")).unwrap();
    assert_eq!(env.manifest().num_tasks, Some(2));
    let oracle = env.reference_policy(None).expect("rows carry answers");
    let t = env.rollout(&oracle, &nenyax::RolloutOptions::new(None, Some(1)));
    assert!(t.error.is_none(), "{:?}", t.error);
    assert_eq!(t.score(), Some(1.0));
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=nenyax",
            "-c",
            "user.email=tests@nenyax.invalid",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A git repository holding the two terminal-bench task folders the recorded registry pins
/// (each a copy of tests/harbor_tasks/simple-task) and one it does not list; the registry
/// fixture rewritten to point at it. Returns (registry text, commit).
fn local_terminal_bench(root: &Path) -> (String, String) {
    let repo = root.join("terminal-bench-2");
    let task = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harbor_tasks/simple-task");
    for name in ["adaptive-rejection-sampler", "bn-fit-modify", "not-listed"] {
        copy_dir(&task, &repo.join(name));
    }
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "tasks"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    // A later commit that the pin must not pick up.
    std::fs::write(
        repo.join("bn-fit-modify/instruction.md"),
        "changed after the pin\n",
    )
    .unwrap();
    git(&repo, &["commit", "-q", "-am", "later"]);
    // hello-world: unpinned, in the harbor repository's examples.
    let harbor = root.join("harbor");
    copy_dir(&task, &harbor.join("examples/tasks/hello-world"));
    git(&harbor, &["init", "-q"]);
    git(&harbor, &["add", "."]);
    git(&harbor, &["commit", "-q", "-m", "example"]);
    let registry = fixture("harbor/registry.json")
        .replace(
            "https://github.com/laude-institute/terminal-bench-2.git",
            &format!("file://{}", repo.display()),
        )
        .replace(
            "https://github.com/laude-institute/harbor.git",
            &format!("file://{}", harbor.display()),
        )
        .replace("69671fbaac6d67a7ef0dfec016cc38a64ef7a77c", &commit);
    (registry, commit)
}

#[test]
fn harbor_search_and_fetch_check_out_the_pinned_task_folders() {
    let work = tempfile::tempdir().unwrap();
    let (registry, _commit) = local_terminal_bench(work.path());
    let hub = Hub::serve(|_| routes(&[("/registry.json", registry.clone())]));
    let url = format!("{}/registry.json", hub.base);
    let cache = tempfile::tempdir().unwrap();
    let env = [("NENYAX_HARBOR_REGISTRY", url.as_str())];

    let rows = json_out(&nenyax(
        &["search", "harbor", "terminal", "--json"],
        cache.path(),
        &env,
    ));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["name"], "terminal-bench@2.0");
    assert_eq!(rows[0]["meta"]["tasks"], 2);
    let all = json_out(&nenyax(&["search", "harbor", "--json"], cache.path(), &env));
    assert_eq!(all.as_array().unwrap().len(), 2);
    // A task's name finds its dataset too.
    let by_task = json_out(&nenyax(
        &["search", "harbor", "bn-fit", "--json"],
        cache.path(),
        &env,
    ));
    assert_eq!(by_task[0]["name"], "terminal-bench@2.0");

    let o = nenyax(&["fetch", "harbor", "terminal-bench"], cache.path(), &env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let uri = text(&o.stdout).trim().to_string();
    assert_eq!(
        uri,
        rows[0]["uri"].as_str().unwrap(),
        "fetch gives the URI search listed"
    );
    let folder = PathBuf::from(uri.strip_prefix("harbor:").unwrap());
    assert!(
        folder.starts_with(cache.path().join("nenyax/hubs/harbor")),
        "{folder:?}"
    );
    assert!(folder
        .join("adaptive-rejection-sampler/task.toml")
        .is_file());
    // The pinned commit, not the branch head; only the listed folders.
    let instr = std::fs::read_to_string(folder.join("bn-fit-modify/instruction.md")).unwrap();
    assert!(!instr.contains("changed after the pin"), "{instr}");
    assert!(!folder.join("not-listed").exists());
    let info = json_out(&nenyax(&["info", &uri], cache.path(), &[]));
    assert_eq!(info["num_tasks"], 2, "{info}");

    // Again: the cached folder, without a second checkout (the repository is gone).
    std::fs::rename(
        work.path().join("terminal-bench-2"),
        work.path().join("moved"),
    )
    .unwrap();
    let again = nenyax(
        &["fetch", "harbor", "terminal-bench@2.0"],
        cache.path(),
        &env,
    );
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout).trim(), uri);

    // An unpinned task follows its repository's HEAD: fetched again, not reused.
    let hello = nenyax(&["fetch", "harbor", "hello-world"], cache.path(), &env);
    assert!(hello.status.success(), "{}", text(&hello.stderr));
    let hello = PathBuf::from(text(&hello.stdout).trim().strip_prefix("harbor:").unwrap());
    assert!(hello.join("hello-world/task.toml").is_file());
    let harbor = work.path().join("harbor");
    std::fs::write(
        harbor.join("examples/tasks/hello-world/instruction.md"),
        "moved on\n",
    )
    .unwrap();
    git(&harbor, &["commit", "-q", "-am", "moved on"]);
    let again = nenyax(&["fetch", "harbor", "hello-world@head"], cache.path(), &env);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let instr = std::fs::read_to_string(hello.join("hello-world/instruction.md")).unwrap();
    assert_eq!(instr, "moved on\n");

    // The registry as a local file; an unknown version; a pin git cannot find.
    let file = work.path().join("registry.json");
    let bad = registry.replace("\"2.0\"", "\"2.1\"");
    let bad = bad.replacen(
        &registry[registry.find("\"git_commit_id\": \"").unwrap() + 18..][..40],
        "0123456789abcdef0123456789abcdef01234567",
        2,
    );
    std::fs::write(&file, &bad).unwrap();
    let file_env = [("NENYAX_HARBOR_REGISTRY", file.to_str().unwrap())];
    let rows = json_out(&nenyax(
        &["search", "harbor", "--json"],
        cache.path(),
        &file_env,
    ));
    assert_eq!(rows[1]["name"], "terminal-bench@2.1");
    let err = one_line_error(&nenyax(
        &["fetch", "harbor", "terminal-bench@9"],
        cache.path(),
        &file_env,
    ));
    assert!(err.contains("terminal-bench@2.1"), "{err}");
    let err = one_line_error(&nenyax(
        &["fetch", "harbor", "terminal-bench@2.1"],
        cache.path(),
        &file_env,
    ));
    assert!(err.contains("fetching file://"), "{err}");

    // A registry entry that would write outside the cache is refused before any checkout.
    let escape = registry.replace("\"path\": \"bn-fit-modify\"", "\"path\": \"../../etc\"");
    std::fs::write(&file, escape).unwrap();
    let err = one_line_error(&nenyax(
        &["fetch", "harbor", "terminal-bench@2.0"],
        tempfile::tempdir().unwrap().path(),
        &file_env,
    ));
    assert!(err.contains("relative path"), "{err}");
}

/// Offline (nothing listening): one line naming the host and the variable that fixes it.
#[test]
fn search_offline_is_one_line_naming_the_host_and_the_fix() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = format!("http://127.0.0.1:{port}");
    let registry = format!("{dead}/registry.json");
    let cache = tempfile::tempdir().unwrap();
    for (hub, var, value) in [
        ("huggingface", "HF_ENDPOINT", dead.as_str()),
        ("prime", "NENYAX_PRIME_API", dead.as_str()),
        ("harbor", "NENYAX_HARBOR_REGISTRY", registry.as_str()),
    ] {
        let err = one_line_error(&nenyax(
            &["search", hub, "x"],
            cache.path(),
            &[(var, value)],
        ));
        assert!(
            err.contains(&format!("cannot reach 127.0.0.1:{port}")),
            "{err}"
        );
        assert!(err.contains(var), "{err}");
    }
}

/// `nenyax integrations --json` lists every kind, and a row whose key is missing names the
/// variable; setting it makes the row ready.
#[test]
fn integrations_list_every_kind_and_name_missing_variables() {
    let cache = tempfile::tempdir().unwrap();
    let none = [("NENYAX_PYTHON", "/nonexistent/python")];
    let rows = json_out(&nenyax(&["integrations", "--json"], cache.path(), &none));
    let rows = rows.as_array().unwrap();
    for kind in nenyax::integrations::KINDS {
        assert!(rows.iter().any(|r| r["kind"] == *kind), "no {kind} row");
    }
    let find = |rows: &[Value], kind: &str, name: &str| {
        rows.iter()
            .find(|r| r["kind"] == kind && r["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    for (kind, name) in [
        ("hub", "huggingface"),
        ("hub", "prime"),
        ("hub", "harbor"),
        ("telemetry", "otel"),
        ("telemetry", "mlflow"),
        ("telemetry", "wandb"),
        ("exporter", "jsonl"),
        ("exporter", "parquet"),
        ("exporter", "hf"),
        ("exporter", "atif"),
        ("sandbox", "process"),
        ("learner", "grpo"),
        ("judge", "llm_rubric"),
    ] {
        find(rows, kind, name);
    }
    let needs = |r: &Value| r["needs"].as_str().unwrap_or_default().to_string();
    let mlflow = find(rows, "telemetry", "mlflow");
    assert_eq!(mlflow["ready"], false);
    assert!(needs(&mlflow).contains("MLFLOW_TRACKING_URI"), "{mlflow}");
    let wandb = find(rows, "telemetry", "wandb");
    assert_eq!(wandb["ready"], false);
    assert!(needs(&wandb).contains("WANDB_API_KEY"), "{wandb}");
    let hf = find(rows, "exporter", "hf");
    assert_eq!(hf["ready"], false);
    assert!(needs(&hf).contains("HF_TOKEN"), "{hf}");
    assert_eq!(
        find(rows, "telemetry", "otel")["base_url"],
        "http://localhost:4318/v1/traces"
    );
    let prime = find(rows, "hub", "prime");
    assert_eq!(prime["ready"], false);
    assert!(needs(&prime).contains("/nonexistent/python"), "{prime}");
    assert_eq!(
        find(rows, "hub", "huggingface")["base_url"],
        "https://huggingface.co"
    );

    let set = [
        ("NENYAX_PYTHON", "/nonexistent/python"),
        ("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000"),
        ("WANDB_API_KEY", "w-test"),
        ("HF_TOKEN", "hf_test"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        ("HF_ENDPOINT", "http://mirror.invalid"),
    ];
    let rows = json_out(&nenyax(&["integrations", "--json"], cache.path(), &set));
    let rows = rows.as_array().unwrap();
    for (kind, name) in [("telemetry", "mlflow"), ("exporter", "hf")] {
        assert_eq!(find(rows, kind, name)["ready"], true, "{kind} {name}");
    }
    // A key is not enough: the sink drives the wandb SDK, which this interpreter lacks.
    let wandb = find(rows, "telemetry", "wandb");
    assert_eq!(wandb["ready"], false);
    assert!(needs(&wandb).contains("/nonexistent/python"), "{wandb}");
    assert_eq!(
        find(rows, "telemetry", "mlflow")["base_url"],
        "http://127.0.0.1:5000"
    );
    assert_eq!(
        find(rows, "telemetry", "otel")["base_url"],
        "http://collector:4318/v1/traces"
    );
    assert_eq!(
        find(rows, "hub", "huggingface")["base_url"],
        "http://mirror.invalid"
    );

    let t = text(&nenyax(&["integrations"], cache.path(), &none).stdout);
    for heading in [
        "hubs (use: nenyax search",
        "telemetry sinks",
        "exporters",
        "sandbox backends",
        "learners (use: nenyax train",
        "judges",
    ] {
        assert!(t.contains(heading), "{heading}: {t}");
    }
    assert!(t.contains("set MLFLOW_TRACKING_URI"), "{t}");
}
