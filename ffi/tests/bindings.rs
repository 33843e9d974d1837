//! The C++, Go and Julia bindings checked against include/nenyax.h, so a status, constant or
//! function added to the header (or mis-copied by hand) fails here instead of in a user's build:
//! every status code by name and value, every `#define` a binding mirrors, and every exported
//! function called by each binding. Julia cannot be run here, so its `ccall` signatures are also
//! checked against the header's parameter lists (count and types).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One exported function: its name, return type and parameter types (C, normalised).
struct Function {
    name: String,
    ret: String,
    params: Vec<String>,
}

struct Header {
    /// `NENYAX_STATUS_*` names with their values, in declaration order.
    statuses: Vec<(String, i64)>,
    /// `#define NENYAX_*` names with their literal values (the include guard left out).
    defines: Vec<(String, String)>,
    functions: Vec<Function>,
}

/// Drop `//` and `/* */` comments (string literals in these sources never contain either).
fn strip_c_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("//") {
            rest = tail.find('\n').map_or("", |j| &tail[j..]);
        } else if let Some(body) = tail.strip_prefix("/*") {
            rest = body.find("*/").map_or("", |j| &body[j + 2..]);
        } else {
            out.push('/');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Drop `#` comments (Julia); `#` inside a string literal is not used by these sources.
fn strip_hash_comments(src: &str) -> String {
    src.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn normalise_type(t: &str) -> String {
    let t = t
        .replace("const ", "")
        .replace("struct ", "")
        .replace("enum ", "");
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    t.replace(" *", "*").replace('*', " *").replace("* *", "**")
}

/// The text inside the parenthesis that opens at `open` (an index of `(`) and its end index.
fn balanced(s: &str, open: usize) -> Option<(&str, usize)> {
    let mut depth = 0i32;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some((&s[open + 1..open + i], open + i));
                }
            }
            _ => {}
        }
    }
    None
}

/// Split at commas outside any bracket.
fn split_top(s: &str) -> Vec<String> {
    let (mut parts, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    parts.push(cur.trim().to_string());
    parts.retain(|p| !p.is_empty());
    parts
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn parse_header(text: &str) -> Header {
    let src = strip_c_comments(text);
    let mut defines = Vec::new();
    for line in src.lines() {
        if let Some(rest) = line.trim().strip_prefix("#define ") {
            let mut it = rest.splitn(2, char::is_whitespace);
            let name = it.next().unwrap_or("").to_string();
            let value = it.next().unwrap_or("").trim().to_string();
            if name.starts_with("NENYAX_") && !value.is_empty() {
                defines.push((name, value));
            }
        }
    }
    let start = src
        .find("typedef enum nenyax_status_t")
        .expect("the status enum");
    let body = &src[start..start + src[start..].find('}').expect("the enum's end")];
    let statuses = body
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().trim_end_matches(',').split_once('=')?;
            Some((name.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect();
    let api_start = src.find("extern \"C\" {").expect("the extern \"C\" block");
    let api = &src[api_start + "extern \"C\" {".len()..];
    let api = &api[..api.find("#ifdef __cplusplus").unwrap_or(api.len())];
    let api: String = api
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut functions = Vec::new();
    for decl in api.split(';') {
        let decl = decl.split_whitespace().collect::<Vec<_>>().join(" ");
        // The first lower-case `nenyax_...(` is the function: attribute macros are upper case.
        let mut search = 0;
        while let Some(pos) = decl[search..].find("nenyax_").map(|p| p + search) {
            let end = pos
                + decl[pos..]
                    .find(|c: char| !is_ident(c))
                    .unwrap_or(decl.len() - pos);
            let before_ok = pos == 0 || !is_ident(decl[..pos].chars().last().unwrap());
            if before_ok && decl[end..].starts_with('(') {
                let (inside, _) = balanced(&decl, end).expect("a closed parameter list");
                let mut params: Vec<String> = split_top(inside)
                    .iter()
                    .map(|p| {
                        // Drop the parameter name (function-pointer parameters are typedefs).
                        let t = p.trim_end_matches(|c: char| is_ident(c));
                        normalise_type(if t.trim().is_empty() { p } else { t })
                    })
                    .collect();
                if params == ["void"] {
                    params.clear();
                }
                let ret = decl[..pos]
                    .split(')')
                    .next_back()
                    .unwrap_or("")
                    .split_whitespace()
                    .filter(|w| !w.chars().any(|c| c.is_ascii_uppercase()))
                    .collect::<Vec<_>>()
                    .join(" ");
                functions.push(Function {
                    name: decl[pos..end].to_string(),
                    ret: normalise_type(&ret),
                    params,
                });
                break;
            }
            search = end;
        }
    }
    Header {
        statuses,
        defines,
        functions,
    }
}

fn header() -> Header {
    // NENYAX_BINDINGS_HEADER checks the bindings against another header (e.g. a newer one).
    let path = std::env::var_os("NENYAX_BINDINGS_HEADER")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("include/nenyax.h"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let h = parse_header(&text);
    assert!(h.statuses.len() >= 25, "too few statuses parsed");
    assert!(h.functions.len() >= 59, "too few functions parsed");
    for (i, (name, value)) in h.statuses.iter().enumerate() {
        // The bindings' name tables are indexed by value.
        assert_eq!(
            *value, i as i64,
            "{name}: status values must be 0, 1, 2, ..."
        );
    }
    h
}

/// Every file under `dir` whose name ends with one of `exts`, test files left out, joined.
fn sources(dir: &Path, exts: &[&str]) -> String {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                stack.push(path);
            } else if exts.iter().any(|e| name.ends_with(e)) && !name.ends_with("_test.go") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

fn cpp_sources() -> String {
    strip_c_comments(&sources(&root().join("bindings/cpp/include"), &[".hpp"]))
}

/// Go sources with `//` comments dropped (the cgo preamble is a `/* */` comment and stays), and
/// the package's C shims with all comments dropped.
fn go_sources() -> (String, String) {
    let go = sources(&root().join("bindings/go"), &[".go"])
        .lines()
        .map(|l| l.split("// ").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let c = strip_c_comments(&sources(&root().join("bindings/go"), &[".c"]));
    (go, c)
}

fn julia_sources() -> String {
    strip_hash_comments(&sources(&root().join("bindings/julia/src"), &[".jl"]))
}

/// A status name without its prefix and underscores, lower case: how the bindings' name tables
/// spell it modulo case ("INVALID_URI" -> "invaliduri", Go "InvalidURI", Julia "InvalidURI").
fn squash(status: &str) -> String {
    status
        .trim_start_matches("NENYAX_STATUS_")
        .replace('_', "")
        .to_lowercase()
}

/// The quoted strings of the first `{...}` or `(...)` after `marker`.
fn string_table(src: &str, marker: &str) -> Option<Vec<String>> {
    let at = src.find(marker)? + marker.len();
    let open = at + src[at..].find(['{', '('])?;
    let (inside, _) = balanced(src, open)?;
    Some(
        split_top(inside)
            .into_iter()
            .map(|s| s.trim_matches('"').to_string())
            .collect(),
    )
}

fn check_table(problems: &mut Vec<String>, binding: &str, table: Option<Vec<String>>, h: &Header) {
    let Some(table) = table else {
        problems.push(format!("{binding}: the status name table is missing"));
        return;
    };
    if table.len() != h.statuses.len() {
        problems.push(format!(
            "{binding}: the status name table has {} names, the header {} statuses",
            table.len(),
            h.statuses.len()
        ));
    }
    for (name, value) in &h.statuses {
        let got = table.get(*value as usize).map(|s| s.to_lowercase());
        if got.as_deref() != Some(squash(name).as_str()) {
            problems.push(format!(
                "{binding}: status {value} is {name} in the header but {got:?} in the name table"
            ));
        }
    }
}

/// `problems`, one per line, as a failure; nothing when empty.
fn report(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what}: {} problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn every_status_is_copied_by_name_and_value() {
    let h = header();
    let mut problems = Vec::new();

    // C++: status_name's switch names each enumerator and returns its own name.
    let cpp = cpp_sources();
    for (name, _) in &h.statuses {
        if !cpp.contains(&format!("case {name}: return \"{name}\";")) {
            problems.push(format!(
                "cpp: status_name has no `case {name}: return \"{name}\";`"
            ));
        }
    }
    let cases = cpp.matches("case NENYAX_STATUS_").count();
    if cases != h.statuses.len() {
        problems.push(format!(
            "cpp: status_name has {cases} cases for {} statuses",
            h.statuses.len()
        ));
    }

    // Go: one `StatusX Status = C.NENYAX_STATUS_X` per status (values come from cgo), and the
    // positional statusNames table.
    let (go, _) = go_sources();
    for (name, _) in &h.statuses {
        let found = go.lines().any(|l| {
            let l: Vec<&str> = l.split_whitespace().collect();
            l.len() == 4
                && l[1] == "Status"
                && l[2] == "="
                && l[3] == format!("C.{name}")
                && l[0].to_lowercase() == format!("status{}", squash(name))
        });
        if !found {
            problems.push(format!("go: no `Status... Status = C.{name}` constant"));
        }
    }
    check_table(
        &mut problems,
        "go",
        string_table(&go, "var statusNames ="),
        &h,
    );

    // Julia: `const STATUS_X = Int32(value)` and the positional STATUS_NAMES tuple.
    let jl = julia_sources();
    let consts = julia_consts(&jl);
    for (name, value) in &h.statuses {
        let short = name.trim_start_matches("NENYAX_");
        match consts.get(short) {
            Some(v) if *v == format!("Int32({value})") => {}
            other => problems.push(format!(
                "julia: {short} is {other:?}, the header says {value}"
            )),
        }
    }
    let jl_statuses = consts
        .keys()
        .filter(|k| k.starts_with("STATUS_") && *k != "STATUS_NAMES")
        .count();
    if jl_statuses != h.statuses.len() {
        problems.push(format!(
            "julia: {jl_statuses} STATUS_* constants for {} statuses",
            h.statuses.len()
        ));
    }
    check_table(
        &mut problems,
        "julia",
        string_table(&jl, "const STATUS_NAMES ="),
        &h,
    );
    report("status codes", &problems);
}

/// Julia's top-level `const NAME = value` lines.
fn julia_consts(jl: &str) -> BTreeMap<String, String> {
    jl.lines()
        .filter_map(|l| {
            let (name, value) = l.strip_prefix("const ")?.split_once('=')?;
            Some((name.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

/// The Julia name of a header constant: NENYAX_ dropped, the version macros as HEADER_VERSION*.
fn julia_const_name(define: &str) -> String {
    let short = define.trim_start_matches("NENYAX_");
    match short {
        "VERSION_STRING" => "HEADER_VERSION".to_string(),
        s if s.starts_with("VERSION_") => format!("HEADER_{s}"),
        s => s.to_string(),
    }
}

#[test]
fn every_constant_is_mirrored_with_its_value() {
    let h = header();
    let mut problems = Vec::new();
    let cpp = cpp_sources();
    if !cpp.contains("#include <nenyax.h>") {
        problems.push("cpp: nenyax.hpp does not include <nenyax.h>".to_string());
    }
    if !cpp.contains("NENYAX_VTABLE_VERSION") {
        problems.push("cpp: vtables are not built with NENYAX_VTABLE_VERSION".to_string());
    }
    let (go, _) = go_sources();
    let jl = julia_sources();
    let consts = julia_consts(&jl);
    for (name, value) in &h.defines {
        // Go takes each value from the header through cgo, so it cannot drift.
        if !go.contains(&format!("C.{name}")) {
            problems.push(format!("go: no constant from C.{name}"));
        }
        let jname = julia_const_name(name);
        let got = consts.get(&jname).map(|v| {
            // `UInt32(1)` -> `1`; strings and bare numbers stay as they are.
            match v.find('(') {
                Some(i) if v.ends_with(')') && !v.starts_with('"') => {
                    v[i + 1..v.len() - 1].to_string()
                }
                _ => v.clone(),
            }
        });
        if got.as_deref() != Some(value.as_str()) {
            problems.push(format!(
                "julia: {jname} is {got:?}, the header's {name} is {value}"
            ));
        }
    }
    report("constants", &problems);
}

/// `(:name, libnenyax)` ccalls of the Julia sources: name -> (return type, argument types).
fn julia_ccalls(jl: &str) -> Vec<(String, String, Vec<String>)> {
    let mut calls = Vec::new();
    let marker = "(:nenyax_";
    let mut at = 0;
    while let Some(p) = jl[at..].find(marker).map(|p| p + at) {
        at = p + marker.len();
        let name_end = p + 2 + jl[p + 2..].find(|c: char| !is_ident(c)).unwrap();
        let name = jl[p + 2..name_end].to_string();
        let Some((inside, close)) = balanced(jl, p) else {
            continue;
        };
        if !inside.trim_end().ends_with("libnenyax") {
            continue;
        }
        // ccall((:f, lib), Ret, (Types...), args...): the text after the library tuple.
        let rest = jl[close + 1..].trim_start();
        let Some(rest) = rest.strip_prefix(',') else {
            continue;
        };
        let Some(ret) = split_top(rest).into_iter().next() else {
            continue;
        };
        let after = &rest[rest.find(ret.as_str()).unwrap() + ret.len()..];
        let Some(open) = after.find('(') else {
            continue;
        };
        let types = balanced(after, open)
            .map(|(t, _)| split_top(t))
            .unwrap_or_default();
        calls.push((name, ret, types));
    }
    calls
}

/// Whether a Julia `ccall` type fits a (normalised) C type.
fn julia_type_fits(c: &str, jl: &str) -> bool {
    let scalar = |t: &str| -> Option<&'static [&'static str]> {
        Some(match t {
            "void" => &["Cvoid"],
            "bool" => &["Bool"],
            "size_t" => &["Csize_t", "UInt"],
            "uint32_t" => &["UInt32"],
            "int32_t" | "nenyax_status_t" => &["Int32", "Cint"],
            "int64_t" => &["Int64"],
            "uint8_t" | "char" => &["UInt8"],
            "double" => &["Float64", "Cdouble"],
            "float" => &["Float32", "Cfloat"],
            _ => return None,
        })
    };
    if c.ends_with("_fn") {
        return jl == "Ptr{Cvoid}";
    }
    if let Some(base) = c.strip_suffix(" **") {
        let _ = base;
        return ["Ref{Ptr{", "Ptr{Ptr{"].iter().any(|p| jl.starts_with(p));
    }
    if let Some(base) = c.strip_suffix(" *") {
        if base == "char" && jl == "Cstring" {
            return true;
        }
        let Some(inner) = jl
            .strip_prefix("Ptr{")
            .or_else(|| jl.strip_prefix("Ref{"))
            .and_then(|s| s.strip_suffix('}'))
        else {
            return false;
        };
        return match scalar(base) {
            Some(ok) if base != "void" => ok.contains(&inner),
            // void * and the library's structs and handles: any pointer.
            _ => true,
        };
    }
    scalar(c).is_some_and(|ok| ok.contains(&jl))
}

/// Whether `src` has `name` as a whole identifier: a call, or the function's address (a C++
/// `Handle<T, nenyax_x_free>`, `&nenyax_pg_loss`).
fn mentions(src: &str, name: &str) -> bool {
    src.match_indices(name).any(|(i, _)| {
        let before = !matches!(src[..i].chars().next_back(), Some(c) if is_ident(c));
        let after = src[i + name.len()..]
            .chars()
            .next()
            .map_or(true, |c| !is_ident(c));
        before && after
    })
}

/// Whether a binding calls a function.
type Calls<'a> = Box<dyn Fn(&str) -> bool + 'a>;

#[test]
fn every_function_is_wrapped_by_every_binding() {
    let h = header();
    let cpp = cpp_sources();
    let (go, go_c) = go_sources();
    let jl = julia_sources();
    let calls = julia_ccalls(&jl);
    let mut problems = Vec::new();
    let mut lines = Vec::new();
    let bindings: [(&str, Calls); 3] = [
        ("cpp", Box::new(|f| mentions(&cpp, f))),
        (
            "go",
            Box::new(|f| mentions(&go, &format!("C.{f}")) || mentions(&go_c, f)),
        ),
        ("julia", Box::new(|f| calls.iter().any(|(n, _, _)| n == f))),
    ];
    for (binding, calls_it) in &bindings {
        let missing: Vec<&str> = h
            .functions
            .iter()
            .map(|f| f.name.as_str())
            .filter(|f| !calls_it(f))
            .collect();
        let n = h.functions.len();
        lines.push(format!("{binding} {}/{n}", n - missing.len()));
        if !missing.is_empty() {
            problems.push(format!("{binding} does not call: {}", missing.join(", ")));
        }
    }
    println!("{}", lines.join("\n"));

    // Julia is not compiled here: its ccall signatures must match the header's.
    for (name, ret, types) in &calls {
        let Some(f) = h.functions.iter().find(|f| &f.name == name) else {
            problems.push(format!(
                "julia: ccall of {name}, which the header does not declare"
            ));
            continue;
        };
        if types.len() != f.params.len() {
            problems.push(format!(
                "julia: {name} is called with {} argument types, the header has {} parameters",
                types.len(),
                f.params.len()
            ));
            continue;
        }
        if !julia_type_fits(&f.ret, ret) {
            problems.push(format!(
                "julia: {name} returns {} but the ccall says {ret}",
                f.ret
            ));
        }
        for (i, (c, j)) in f.params.iter().zip(types).enumerate() {
            if !julia_type_fits(c, j) {
                problems.push(format!(
                    "julia: {name} parameter {i} is `{c}` but the ccall says {j}"
                ));
            }
        }
    }
    report("exported functions", &problems);
}

#[test]
fn the_parser_reads_a_known_declaration() {
    let h = parse_header(
        "#define NENYAX_X 3\ntypedef enum nenyax_status_t {\n  NENYAX_STATUS_OK = 0,\n} s;\n\
         extern \"C\" {\n// doc\nNENYAX_DEPRECATED(\"use y\") struct nenyax_error_t *nenyax_a(const \
         double *x,\n size_t n, struct nenyax_env_t **out);\nvoid nenyax_b(void);\n#ifdef __cplusplus\n}",
    );
    assert_eq!(h.defines, [("NENYAX_X".to_string(), "3".to_string())]);
    assert_eq!(h.statuses, [("NENYAX_STATUS_OK".to_string(), 0)]);
    let f: Vec<_> = h
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.ret.as_str(), f.params.clone()))
        .collect();
    assert_eq!(f[0].0, "nenyax_a");
    assert_eq!(f[0].1, "nenyax_error_t *");
    assert_eq!(f[0].2, ["double *", "size_t", "nenyax_env_t **"]);
    assert_eq!((f[1].0, f[1].1, f[1].2.len()), ("nenyax_b", "void", 0));
    let jl = "x = ccall((:nenyax_a, libnenyax), Ptr{Cvoid}, (Ptr{Float64}, Csize_t, Ref{Ptr{Cvoid}}), a, b, c)";
    let calls = julia_ccalls(jl);
    assert_eq!(calls[0].0, "nenyax_a");
    assert_eq!(calls[0].1, "Ptr{Cvoid}");
    assert_eq!(calls[0].2, ["Ptr{Float64}", "Csize_t", "Ref{Ptr{Cvoid}}"]);
    assert!(!julia_type_fits("double *", "Ptr{Float32}"));
    assert!(julia_type_fits("nenyax_env_t **", "Ref{Ptr{Cvoid}}"));
}
