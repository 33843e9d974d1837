//! `nenyax new-plugin KIND NAME --lang LANG`: a small buildable package (build file, source, a
//! test that runs the kind's conformance check, README) that passes on day one, from templates
//! compiled into the binary (scaffolds/), so it works from any install.

use std::path::{Path, PathBuf};

use nenyax::plugins::Kind;
use nenyax::Error;

/// What to make.
#[derive(clap::Args)]
pub struct NewPluginArgs {
    /// The kind: driver, sandbox, judge, learner, telemetry or hub (`nenyax plugins --kinds`)
    kind: String,
    /// Its name: lowercase letters, digits and `_` (a driver's URI scheme, a judge's `use` name)
    name: String,
    /// The language of the package
    #[arg(long, default_value = "python")]
    lang: String,
    /// The folder to create (default: ./NAME); it must not exist or be empty
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// One file of a template: its path (with `__NAME__` in it), contents, and whether it runs.
struct File {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

/// One template: a kind in a language.
struct Template {
    kind: Kind,
    lang: &'static str,
    /// What stands for the plugin's name in the files: `__NAME__` in scaffolds/, the example's
    /// own name where a worked example in examples/plugins is the template, so the scaffold and
    /// the example cannot drift apart.
    token: &'static str,
    /// Other replacements, e.g. the example's header path to the copy the package carries.
    replace: &'static [(&'static str, &'static str)],
    files: &'static [File],
    /// What to run afterwards, shown to the user.
    next: &'static str,
}

const fn file(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        executable: false,
    }
}

const fn script(path: &'static str, text: &'static str) -> File {
    File {
        path,
        text,
        executable: true,
    }
}

const TEMPLATES: &[Template] = &[
    Template {
        kind: Kind::Driver,
        lang: "python",
        token: "__NAME__",
        replace: &[],
        files: &[
            script(
                "nenyax-driver-__NAME__",
                include_str!("../scaffolds/driver-python/nenyax-driver-__NAME__"),
            ),
            script(
                "test.sh",
                include_str!("../scaffolds/driver-python/test.sh"),
            ),
            file(
                "README.md",
                include_str!("../scaffolds/driver-python/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Driver,
        lang: "go",
        token: "gosums",
        replace: &[],
        files: &[
            file(
                "go.mod",
                include_str!("../examples/plugins/driver-go/go.mod"),
            ),
            file(
                "main.go",
                include_str!("../examples/plugins/driver-go/main.go"),
            ),
            script("test.sh", include_str!("../scaffolds/driver-go/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/driver-go/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Judge,
        lang: "rust",
        token: "__NAME__",
        replace: &[],
        files: &[
            file(
                "Cargo.toml",
                include_str!("../scaffolds/judge-rust/Cargo.toml.in"),
            ),
            file(
                "src/lib.rs",
                include_str!("../scaffolds/judge-rust/src/lib.rs"),
            ),
            script("test.sh", include_str!("../scaffolds/judge-rust/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/judge-rust/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Judge,
        lang: "cpp",
        token: "exact_answer",
        replace: &[("../../../include/nenyax.h", "nenyax.h")],
        files: &[
            file(
                "exact_answer.cpp",
                include_str!("../examples/plugins/judge-cpp/exact_answer.cpp"),
            ),
            file(
                "Makefile",
                include_str!("../examples/plugins/judge-cpp/Makefile"),
            ),
            file("nenyax.h", include_str!("../include/nenyax.h")),
            script("test.sh", include_str!("../scaffolds/judge-cpp/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/judge-cpp/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Learner,
        lang: "go",
        token: "gotab",
        replace: &[("-I${SRCDIR}/../../../include", "-I${SRCDIR}")],
        files: &[
            file(
                "go.mod",
                include_str!("../examples/plugins/learner-go/go.mod"),
            ),
            file(
                "main.go",
                include_str!("../examples/plugins/learner-go/main.go"),
            ),
            file(
                "plugin.c",
                include_str!("../examples/plugins/learner-go/plugin.c"),
            ),
            file("nenyax.h", include_str!("../include/nenyax.h")),
            script("test.sh", include_str!("../scaffolds/learner-go/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/learner-go/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Learner,
        lang: "rust",
        token: "__NAME__",
        replace: &[],
        files: &[
            file(
                "Cargo.toml",
                include_str!("../scaffolds/learner-rust/Cargo.toml.in"),
            ),
            file(
                "src/lib.rs",
                include_str!("../scaffolds/learner-rust/src/lib.rs"),
            ),
            script("test.sh", include_str!("../scaffolds/learner-rust/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/learner-rust/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Telemetry,
        lang: "c",
        token: "jsonl_sink",
        replace: &[("../../../include/nenyax.h", "nenyax.h")],
        files: &[
            file(
                "jsonl_sink.c",
                include_str!("../examples/plugins/telemetry-c/jsonl_sink.c"),
            ),
            file(
                "Makefile",
                include_str!("../examples/plugins/telemetry-c/Makefile"),
            ),
            file("nenyax.h", include_str!("../include/nenyax.h")),
            script("test.sh", include_str!("../scaffolds/telemetry-c/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/telemetry-c/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Hub,
        lang: "c",
        token: "toy_hub",
        replace: &[("../../../include/nenyax.h", "nenyax.h")],
        files: &[
            file(
                "toy_hub.c",
                include_str!("../examples/plugins/hub-c/toy_hub.c"),
            ),
            file(
                "Makefile",
                include_str!("../examples/plugins/hub-c/Makefile"),
            ),
            file("nenyax.h", include_str!("../include/nenyax.h")),
            script("test.sh", include_str!("../scaffolds/hub-c/test.sh")),
            file("README.md", include_str!("../scaffolds/hub-c/README.md")),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Sandbox,
        lang: "c",
        token: "cjail",
        replace: &[("../../../include/nenyax.h", "nenyax.h")],
        files: &[
            file(
                "cjail.c",
                include_str!("../examples/plugins/sandbox-c/cjail.c"),
            ),
            file(
                "Makefile",
                include_str!("../examples/plugins/sandbox-c/Makefile"),
            ),
            file("nenyax.h", include_str!("../include/nenyax.h")),
            script("test.sh", include_str!("../scaffolds/sandbox-c/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/sandbox-c/README.md"),
            ),
        ],
        next: "./test.sh (as root: a jail needs it)",
    },
    Template {
        kind: Kind::Telemetry,
        lang: "rust",
        token: "__NAME__",
        replace: &[],
        files: &[
            file(
                "Cargo.toml",
                include_str!("../scaffolds/telemetry-rust/Cargo.toml.in"),
            ),
            file(
                "src/lib.rs",
                include_str!("../scaffolds/telemetry-rust/src/lib.rs"),
            ),
            script(
                "test.sh",
                include_str!("../scaffolds/telemetry-rust/test.sh"),
            ),
            file(
                "README.md",
                include_str!("../scaffolds/telemetry-rust/README.md"),
            ),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Hub,
        lang: "rust",
        token: "__NAME__",
        replace: &[],
        files: &[
            file(
                "Cargo.toml",
                include_str!("../scaffolds/hub-rust/Cargo.toml.in"),
            ),
            file(
                "src/lib.rs",
                include_str!("../scaffolds/hub-rust/src/lib.rs"),
            ),
            script("test.sh", include_str!("../scaffolds/hub-rust/test.sh")),
            file("README.md", include_str!("../scaffolds/hub-rust/README.md")),
        ],
        next: "./test.sh",
    },
    Template {
        kind: Kind::Sandbox,
        lang: "rust",
        token: "__NAME__",
        replace: &[],
        files: &[
            file(
                "Cargo.toml",
                include_str!("../scaffolds/sandbox-rust/Cargo.toml.in"),
            ),
            file(
                "src/lib.rs",
                include_str!("../scaffolds/sandbox-rust/src/lib.rs"),
            ),
            script("test.sh", include_str!("../scaffolds/sandbox-rust/test.sh")),
            file(
                "README.md",
                include_str!("../scaffolds/sandbox-rust/README.md"),
            ),
        ],
        next: "./test.sh",
    },
];

impl Template {
    /// `text` for a plugin called `name`.
    fn render(&self, text: &str, name: &str) -> String {
        let mut out = text.replace(self.token, name).replace("__NAME__", name);
        for (from, to) in self.replace {
            out = out.replace(from, to);
        }
        out
    }
}

/// Write the package; returns the folder made.
pub fn run(args: &NewPluginArgs) -> Result<PathBuf, Error> {
    let kind = Kind::parse(&args.kind).map_err(Error::Config)?;
    let name = &args.name;
    if name.is_empty()
        || !name.starts_with(|c: char| c.is_ascii_lowercase())
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(Error::Config(format!(
            "plugin name `{name}` must start with a lowercase letter and be lowercase letters, \
             digits and `_` (it becomes a URI scheme or a C identifier)"
        )));
    }
    let Some(template) = TEMPLATES
        .iter()
        .find(|t| t.kind == kind && t.lang == args.lang)
    else {
        let have: Vec<String> = TEMPLATES
            .iter()
            .map(|t| format!("{} --lang {}", t.kind, t.lang))
            .collect();
        return Err(Error::Config(format!(
            "no {kind} scaffold in `{}`; the scaffolds are: {}",
            args.lang,
            have.join(", ")
        )));
    };
    let dir = args.out.clone().unwrap_or_else(|| PathBuf::from(name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(Error::Config(format!(
            "{} already exists and is not empty; pick another --out",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    for f in template.files {
        let path = dir.join(template.render(f.path, name));
        write(&path, &template.render(f.text, name), f.executable)?;
    }
    outln!(
        "made {} ({kind} in {}); next: cd {} && {}",
        dir.display(),
        template.lang,
        dir.display(),
        template.next
    )?;
    Ok(dir)
}

fn write(path: &Path, text: &str, executable: bool) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
    }
    std::fs::write(path, text)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(format!("cannot make {} executable", path.display()), e))?;
    }
    Ok(())
}
