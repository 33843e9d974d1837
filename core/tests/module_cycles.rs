//! No import cycles between the library's modules.
//!
//! Scans `core/src/**/*.rs`, builds the graph of which file module uses which (through `use`
//! declarations, `crate::`/`super::`/`self::` paths in code and paths through a child module
//! declared with `mod`), and fails naming every cycle with the line that makes each edge. The
//! unit is the file: `learn/loss.rs` and `learn/fast.rs` are two modules, and `learn/mod.rs` is a
//! third. A name reached through a module's `use` (a re-export such as `crate::Error`) counts as
//! a use of the module that defines it, not of the one that re-exports it, and a `pub use`
//! itself is no use: a facade such as lib.rs names its children's items without depending on
//! them. Code in `#[cfg(test)]` modules is left out: a test may reach anywhere.

#[path = "module_cycles/lex.rs"]
mod lex;

use lex::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One file module: its path in the crate (`crate` for lib.rs) and its code without comments,
/// strings and `#[cfg(test)]` modules.
struct Module {
    name: String,
    file: String,
    code: Vec<char>,
    /// Line number (1-based) of each char in `code`.
    lines: Vec<usize>,
    /// The names of the items it declares itself.
    defined: BTreeSet<String>,
    /// Its top-level `use` declarations, as (absolute path, bound name, line).
    uses: Vec<(Vec<String>, String, usize)>,
}

/// A use of another module: the module it resolves to and where it was written.
#[derive(Clone, Debug)]
struct Edge {
    to: String,
    line: usize,
    path: String,
}

/// The crate's modules by name, each with its code.
struct Crate {
    modules: BTreeMap<String, Module>,
}

impl Crate {
    fn new(files: &[(String, String)]) -> Crate {
        let mut modules = BTreeMap::new();
        for (file, src) in files {
            let rel = file.trim_end_matches(".rs");
            let rel = rel.strip_suffix("/mod").unwrap_or(rel);
            let name = if rel == "lib" {
                "crate".to_string()
            } else {
                rel.replace('/', "::")
            };
            let mut code = strip(src);
            drop_test_modules(&mut code);
            let mut lines = Vec::with_capacity(code.len());
            let mut line = 1;
            for &ch in src.chars().collect::<Vec<_>>().iter().take(code.len()) {
                lines.push(line);
                if ch == '\n' {
                    line += 1;
                }
            }
            let file = file.clone();
            let defined = definitions(&code);
            let module = Module {
                name: name.clone(),
                file,
                code,
                lines,
                defined,
                uses: Vec::new(),
            };
            modules.insert(name, module);
        }
        let mut krate = Crate { modules };
        let names: Vec<String> = krate.modules.keys().cloned().collect();
        for name in names {
            let uses = krate.top_uses(&name);
            krate.modules.get_mut(&name).unwrap().uses = uses;
        }
        krate
    }

    /// `crate::a::b` as the segments after `crate` ("" for the root module).
    fn segs(name: &str) -> Vec<String> {
        if name == "crate" {
            Vec::new()
        } else {
            name.split("::").map(String::from).collect()
        }
    }

    fn module_name(segs: &[String]) -> String {
        if segs.is_empty() {
            "crate".into()
        } else {
            segs.join("::")
        }
    }

    /// Whether `module` declares an item called `name` itself.
    fn defines(&self, module: &str, name: &str) -> bool {
        self.modules
            .get(module)
            .is_some_and(|m| m.defined.contains(name))
    }

    /// The top-level `use` declarations of a module, as (absolute path, bound name, line).
    fn top_uses(&self, module: &str) -> Vec<(Vec<String>, String, usize)> {
        let m = &self.modules[module];
        let scopes = inline_scopes(&m.code);
        let mut out = Vec::new();
        for (i, _, tree) in use_decls(&m.code) {
            if !scope_at(&scopes, i).is_empty() {
                continue;
            }
            for (path, alias) in expand_use(&tree) {
                if let Some(abs) = self.absolute(&m.name, &[], &path) {
                    out.push((abs, alias, m.lines[i]));
                }
            }
        }
        out
    }

    /// A path written in module `module` (inside its inline modules `inline`) as segments from
    /// the crate root, or None when it names something outside the crate.
    fn absolute(&self, module: &str, inline: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut here = Self::segs(module);
        here.extend(inline.iter().cloned());
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                here.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    here.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                // A relative path starts at a child module of the file, or leaves the crate.
                let mut child = here.clone();
                child.push(first.to_string());
                if !inline.is_empty() || !self.modules.contains_key(&Self::module_name(&child)) {
                    return None;
                }
            }
            None => return None,
        }
        here.extend(rest.iter().cloned());
        Some(here)
    }

    /// The file module a crate-absolute path lands in, following imports and re-exports of the
    /// item it names.
    fn resolve(&self, path: &[String], depth: usize) -> String {
        let mut n = path.len();
        while n > 0 && !self.modules.contains_key(&Self::module_name(&path[..n])) {
            n -= 1;
        }
        let module = Self::module_name(&path[..n]);
        let Some(item) = path.get(n) else {
            return module;
        };
        if depth > 8 || item == "*" || self.defines(&module, item) {
            return module;
        }
        let uses = &self.modules[&module].uses;
        if let Some((abs, _, _)) = uses.iter().find(|(_, alias, _)| alias == item) {
            let mut target = abs.clone();
            target.extend(path[n + 1..].iter().cloned());
            return self.resolve(&target, depth + 1);
        }
        for (abs, alias, _) in uses {
            if alias == "*" {
                let mut target = abs[..abs.len() - 1].to_vec();
                let from = self.resolve(&target, depth + 1);
                if self.defines(&from, item) {
                    target.extend(path[n..].iter().cloned());
                    return self.resolve(&target, depth + 1);
                }
            }
        }
        module
    }

    /// Every use each module makes of another.
    fn edges(&self) -> BTreeMap<String, Vec<Edge>> {
        let mut graph: BTreeMap<String, Vec<Edge>> = BTreeMap::new();
        for m in self.modules.values() {
            let scopes = inline_scopes(&m.code);
            let mut found: Vec<(usize, Vec<String>, Vec<String>)> = Vec::new();
            let decls = use_decls(&m.code);
            for (i, _, tree) in decls.iter().filter(|(i, _, _)| !is_pub(&m.code, *i)) {
                for (path, _) in expand_use(tree) {
                    found.push((*i, scope_at(&scopes, *i), path));
                }
            }
            let in_use = |i: usize| {
                decls
                    .iter()
                    .any(|(s, _, t)| i >= *s && i <= s + t.len() + 4)
            };
            for (i, path) in code_paths(&m.code) {
                if !in_use(i) {
                    found.push((i, scope_at(&scopes, i), path));
                }
            }
            let out = graph.entry(m.name.clone()).or_default();
            for (i, inline, path) in found {
                let Some(abs) = self.absolute(&m.name, &inline, &path) else {
                    continue;
                };
                let to = self.resolve(&abs, 0);
                if to != m.name && !out.iter().any(|e| e.to == to) {
                    out.push(Edge {
                        to,
                        line: m.lines[i],
                        path: path.join("::"),
                    });
                }
            }
        }
        graph
    }
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, Vec<Edge>>) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a BTreeMap<String, Vec<Edge>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit(s: &mut St, v: &str) {
        s.index.insert(v.into(), s.next);
        s.low.insert(v.into(), s.next);
        s.next += 1;
        s.stack.push(v.into());
        s.on.insert(v.into());
        let tos: Vec<String> =
            s.g.get(v)
                .into_iter()
                .flatten()
                .map(|e| e.to.clone())
                .collect();
        for w in tos {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let lw = s.low[&w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(&w) {
                let iw = s.index[&w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// One cycle through the component, as the edges that make it (shortest back to `comp[0]`).
fn one_cycle(graph: &BTreeMap<String, Vec<Edge>>, comp: &[String]) -> Vec<(String, Edge)> {
    let inside: BTreeSet<&String> = comp.iter().collect();
    let start = &comp[0];
    // Breadth-first from the start, within the component, until an edge returns to it.
    let mut prev: BTreeMap<String, (String, Edge)> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.clone()]);
    let mut seen = BTreeSet::from([start.clone()]);
    while let Some(v) = queue.pop_front() {
        for e in graph.get(&v).into_iter().flatten() {
            if !inside.contains(&e.to) {
                continue;
            }
            if &e.to == start {
                let mut path = vec![(v.clone(), e.clone())];
                let mut at = v.clone();
                while let Some((p, pe)) = prev.get(&at) {
                    path.push((p.clone(), pe.clone()));
                    at = p.clone();
                }
                path.reverse();
                return path;
            }
            if seen.insert(e.to.clone()) {
                prev.insert(e.to.clone(), (v.clone(), e.clone()));
                queue.push_back(e.to.clone());
            }
        }
    }
    Vec::new()
}

/// Every cycle, described with the line of each edge.
fn report(krate: &Crate) -> Vec<String> {
    let graph = krate.edges();
    let mut out = Vec::new();
    for comp in cycles(&graph) {
        let mut text = format!("cycle among {{{}}}:", comp.join(", "));
        for (from, e) in one_cycle(&graph, &comp) {
            let file = &krate.modules[&from].file;
            text += &format!(
                "\n    {from} -> {} (core/src/{file}:{} `{}`)",
                e.to, e.line, e.path
            );
        }
        out.push(text);
    }
    out
}

fn read_tree(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_tree(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn core_modules_have_no_import_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_tree(&root, &root, &mut files);
    assert!(
        files.len() > 20,
        "found only {} files under {}",
        files.len(),
        root.display()
    );
    let krate = Crate::new(&files);
    let bad = report(&krate);
    assert!(
        bad.is_empty(),
        "import cycles between modules:\n{}",
        bad.join("\n")
    );
}

fn synthetic(files: &[(&str, &str)]) -> Vec<String> {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(f, s)| (f.to_string(), s.to_string()))
        .collect();
    report(&Crate::new(&files))
}

#[test]
fn the_scanner_sees_each_kind_of_use() {
    // Through `use crate::`, a `super::` path in code and a child declared with `mod`.
    let bad = synthetic(&[
        ("lib.rs", "pub mod a; pub mod b;"),
        ("a.rs", "use crate::b::Thing; pub struct A;"),
        (
            "b.rs",
            "pub struct Thing; fn f() -> super::a::A { todo!() }",
        ),
    ]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("a -> b (core/src/a.rs:1 `crate::b::Thing`)"),
        "{}",
        bad[0]
    );
    assert!(bad[0].contains("b -> a"), "{}", bad[0]);
    let bad = synthetic(&[
        ("lib.rs", "pub mod p;"),
        ("p/mod.rs", "mod c;\npub struct T;\nfn f() { c::g() }"),
        ("p/c.rs", "use super::T;\npub fn g() {}"),
    ]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("p -> p::c (core/src/p/mod.rs:3 `c::g`)"),
        "{}",
        bad[0]
    );
}

#[test]
fn the_scanner_ignores_comments_strings_tests_and_follows_re_exports() {
    let ok = synthetic(&[
        // lib.rs re-exports b's item; a uses it through the root, which is a use of b.
        (
            "lib.rs",
            "pub mod a; pub mod b; pub use b::Thing; pub use a::*;",
        ),
        ("a.rs", "use crate::Thing; pub struct A;"),
        (
            "b.rs",
            "pub struct Thing; // crate::a::A\nconst S: &str = \"crate::a::A\";\n\
             /* super::a */ const C: char = '\"';\n\
             #[cfg(test)]\nmod tests { use crate::a::A; }",
        ),
    ]);
    assert!(ok.is_empty(), "{ok:?}");
    // A glob re-export is followed too: `crate::A` is a's.
    let bad = synthetic(&[
        ("lib.rs", "pub mod a; pub mod b; pub use a::*;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B; fn f(_: crate::A) {}"),
    ]);
    assert_eq!(bad.len(), 1, "{bad:?}");
}
