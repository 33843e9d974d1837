//! The lexing half of the cycle test: comments and strings blanked out, `use` trees expanded,
//! declarations and paths found in the code that is left.

use std::collections::BTreeSet;

/// Replaces comments, string and char literals with spaces (newlines kept), so paths inside
/// them are not read as uses.
pub(super) fn strip(src: &str) -> Vec<char> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::with_capacity(c.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if at(0) == 'r'
            && (at(1) == '"' || (at(1) == '#' && (at(2) == '"' || at(2) == '#')))
            && (i == 0 || !is_ident(c[i - 1]))
        {
            // A raw string: r"..." or r#"..."#, with as many #s at the end as at the start.
            let mut hashes = 0;
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend(c[i..j.min(c.len())].iter().map(|&ch| blank(ch)));
            i = j;
        } else if at(0) == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if at(0) == '\'' && (at(1) == '\\' || at(2) == '\'') {
            // A char literal ('x', '\n', '\u{1F600}'); a lifetime ('a) has no closing quote.
            let mut j = i + 1;
            if c.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            out.extend(c[i..(j + 1).min(c.len())].iter().map(|&ch| blank(ch)));
            i = j + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.truncate(c.len());
    out
}

pub(super) fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The identifier starting at `i`, if any.
pub(super) fn ident_at(c: &[char], i: usize) -> Option<String> {
    if i >= c.len() || !(c[i].is_alphabetic() || c[i] == '_') {
        return None;
    }
    let mut j = i;
    while j < c.len() && is_ident(c[j]) {
        j += 1;
    }
    Some(c[i..j].iter().collect())
}

pub(super) fn skip_ws(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

/// Whether the keyword `kw` stands alone at `i`.
pub(super) fn word_at(c: &[char], i: usize, kw: &str) -> bool {
    let k: Vec<char> = kw.chars().collect();
    c.len() >= i + k.len()
        && c[i..i + k.len()] == k[..]
        && (i == 0 || !is_ident(c[i - 1]))
        && c.get(i + k.len()).map_or(true, |&ch| !is_ident(ch))
}

/// Blanks out every inline `mod name { ... }` marked `#[cfg(test)]`.
pub(super) fn drop_test_modules(c: &mut [char]) {
    let text: String = c.iter().collect();
    let mut from = 0;
    while let Some(off) = text[from..].find("#[cfg(test)]") {
        let start = from + off;
        let chars_start = text[..start].chars().count();
        let mut i = skip_ws(c, chars_start + "#[cfg(test)]".len());
        if word_at(c, i, "pub") {
            i = skip_ws(c, i + 3);
        }
        if word_at(c, i, "mod") {
            let mut j = i;
            while j < c.len() && c[j] != '{' && c[j] != ';' {
                j += 1;
            }
            if j < c.len() && c[j] == '{' {
                let mut depth = 0;
                let mut k = j;
                while k < c.len() {
                    match c[k] {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    k += 1;
                    if depth == 0 {
                        break;
                    }
                }
                for ch in &mut c[chars_start..k] {
                    if *ch != '\n' {
                        *ch = ' ';
                    }
                }
            }
        }
        from = start + 1;
    }
}

/// The inline modules (`mod name { ... }`) open at each char: their names, outermost first.
pub(super) fn inline_scopes(c: &[char]) -> Vec<Vec<String>> {
    let mut scopes = Vec::with_capacity(c.len());
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending: Option<String> = None;
    let mut i = 0;
    while i < c.len() {
        if word_at(c, i, "mod") {
            let j = skip_ws(c, i + 3);
            if let Some(name) = ident_at(c, j) {
                let k = skip_ws(c, j + name.len());
                if c.get(k) == Some(&'{') {
                    pending = Some(name);
                }
            }
        }
        match c[i] {
            '{' => {
                depth += 1;
                if let Some(name) = pending.take() {
                    stack.push((name, depth));
                }
            }
            '}' => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        scopes.push(stack.iter().map(|(n, _)| n.clone()).collect());
        i += 1;
    }
    scopes
}

/// Expands a use tree (the text after `use`, without the `;`) into paths; an `as` alias is the
/// last element of the pair.
pub(super) fn expand_use(tree: &str) -> Vec<(Vec<String>, String)> {
    fn walk(s: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        let mut path = prefix.to_vec();
        loop {
            *i = skip_ws(s, *i);
            if *i >= s.len() {
                break;
            }
            if s[*i] == '{' {
                *i += 1;
                loop {
                    *i = skip_ws(s, *i);
                    if *i >= s.len() || s[*i] == '}' {
                        *i += 1;
                        break;
                    }
                    if s[*i] == ',' {
                        *i += 1;
                        continue;
                    }
                    walk(s, i, &path, out);
                }
                return;
            }
            if s[*i] == '*' {
                *i += 1;
                path.push("*".into());
                let last = "*".to_string();
                out.push((path, last));
                return;
            }
            let Some(seg) = ident_at(s, *i) else {
                *i += 1;
                return;
            };
            *i += seg.chars().count();
            path.push(seg.clone());
            *i = skip_ws(s, *i);
            if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
                *i += 2;
                continue;
            }
            let mut alias = seg;
            if word_at(s, *i, "as") {
                *i = skip_ws(s, *i + 2);
                if let Some(a) = ident_at(s, *i) {
                    *i += a.chars().count();
                    alias = a;
                }
            }
            out.push((path, alias));
            return;
        }
    }
    let s: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let s = if s.first() == Some(&':') {
        &s[2..]
    } else {
        &s[..]
    };
    walk(s, &mut i, &[], &mut out);
    out
}

/// The names of the items declared in some code.
pub(super) fn definitions(c: &[char]) -> BTreeSet<String> {
    let kws = [
        "fn", "struct", "enum", "union", "trait", "type", "const", "static", "mod",
    ];
    let mut out = BTreeSet::new();
    for i in 0..c.len() {
        if i != 0 && is_ident(c[i - 1]) {
            continue;
        }
        let after = if word_at(c, i, "macro_rules") {
            Some(i + "macro_rules!".len())
        } else {
            kws.iter()
                .find(|kw| word_at(c, i, kw))
                .map(|kw| i + kw.len())
        };
        if let Some(j) = after {
            if let Some(name) = ident_at(c, skip_ws(c, j)) {
                out.insert(name);
            }
        }
    }
    out
}

/// Whether the item starting at `i` is marked `pub` (or `pub(crate)`, ...): a re-export.
pub(super) fn is_pub(c: &[char], i: usize) -> bool {
    let mut j = i;
    while j > 0 && c[j - 1].is_whitespace() {
        j -= 1;
    }
    if j > 0 && c[j - 1] == ')' {
        while j > 0 && c[j - 1] != '(' {
            j -= 1;
        }
        j = j.saturating_sub(1);
    }
    j >= 3 && c[j - 3..j] == ['p', 'u', 'b'] && (j == 3 || !is_ident(c[j - 4]))
}

pub(super) fn scope_at(scopes: &[Vec<String>], i: usize) -> Vec<String> {
    scopes.get(i).cloned().unwrap_or_default()
}

/// Every `use ...;` declaration: where it starts, its inline scope (filled by the caller) and
/// its tree.
pub(super) fn use_decls(c: &[char]) -> Vec<(usize, (), String)> {
    let mut out = Vec::new();
    for i in 0..c.len() {
        if word_at(c, i, "use") {
            let j = i + 3;
            let mut k = j;
            while k < c.len() && c[k] != ';' {
                k += 1;
            }
            let tree: String = c[j..k].iter().collect();
            // `use` also starts closures' `move` lists in no context, but a path must follow.
            let t = tree.trim_start();
            if t.starts_with(|ch: char| ch.is_alphabetic() || ch == '_' || ch == ':' || ch == '{') {
                out.push((i, (), tree));
            }
        }
    }
    out
}

/// Paths in code (outside `use`): `crate::`, `super::`, `self::` and `name::` paths, as the
/// position of their first char and their identifier segments.
pub(super) fn code_paths(c: &[char]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let starts = (c[i].is_alphabetic() || c[i] == '_')
            && (i == 0 || !(is_ident(c[i - 1]) || c[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let start = i;
        let mut segs = Vec::new();
        let mut j = i;
        while let Some(seg) = ident_at(c, j) {
            j += seg.chars().count();
            segs.push(seg);
            if c.get(j) == Some(&':') && c.get(j + 1) == Some(&':') {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 || (segs.len() == 1 && j > start && c.get(j - 1) == Some(&':')) {
            out.push((start, segs));
        }
        i = j.max(i + 1);
    }
    out
}
