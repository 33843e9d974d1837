//! Credentials in URLs stay out of everything nenyax prints or records.
//!
//! A base URL may carry a login (`https://user:secret@host/v1`); the client still sends it (as
//! HTTP basic auth, unless an API key is set), but error messages, logs, trajectories and
//! listings show the URL with its userinfo replaced by `***`.

use std::borrow::Cow;

/// `text` with the userinfo of every `scheme://user:pass@host` in it replaced by `***`
/// (`https://***@host/v1`); text without one comes back borrowed. Works on whole messages, so
/// a URL quoted inside an error from a lower layer is redacted too.
pub fn redact_url(text: &str) -> Cow<'_, str> {
    if !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        let after = &rest[i + 3..];
        // The authority ends where the path, query or fragment begins, or the URL does.
        let end = after
            .find(|c: char| {
                matches!(
                    c,
                    '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>' | ')' | ']'
                ) || c.is_whitespace()
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&authority[at..]);
                changed = true;
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn userinfo_is_hidden_wherever_a_url_appears() {
        let cases = [
            (
                "https://user:secret@api.example.com/v1",
                "https://***@api.example.com/v1",
            ),
            ("http://token@127.0.0.1:8000", "http://***@127.0.0.1:8000"),
            (
                "endpoint http://u:p%40ss@h:1/v1/chat/completions: refused",
                "endpoint http://***@h:1/v1/chat/completions: refused",
            ),
            // An unencoded '@' in the password: everything before the last one goes.
            ("http://u:p@ss@h/v1", "http://***@h/v1"),
            (
                "a http://a:b@x/ and `https://c:d@y?q=1`",
                "a http://***@x/ and `https://***@y?q=1`",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(redact_url(raw), want, "{raw}");
        }
        for same in [
            "http://127.0.0.1:8000/v1",
            "user@example.com wrote",
            "http://h/models/org@v1",
            "",
        ] {
            assert_eq!(redact_url(same), same);
        }
    }
}
