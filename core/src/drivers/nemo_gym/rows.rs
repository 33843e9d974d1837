//! The task JSONL file: one row per line, checked up front so a bad row names its line and
//! field before any episode runs.

use serde_json::{Map, Value};
use std::path::Path;

use crate::contract::Message;
use crate::error::{Error, Result};
use crate::responses::items_to_messages;

/// One task row as read, with what the driver needs from it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// 1-based line in the data file.
    pub(crate) line: usize,
    /// The whole row, sent as-is to `/seed_session` and `/verify`.
    pub(crate) raw: Map<String, Value>,
    /// Names of the function tools in `responses_create_params.tools`.
    pub(crate) tools: Vec<String>,
}

impl Row {
    /// `responses_create_params`.
    pub(crate) fn params(&self) -> &Map<String, Value> {
        self.raw
            .get("responses_create_params")
            .and_then(Value::as_object)
            .expect("checked when the row was read")
    }

    /// The input as a list of items (a string input becomes one user message).
    pub(crate) fn input_items(&self) -> Vec<Value> {
        match self.params().get("input") {
            Some(Value::String(s)) => vec![serde_json::json!({"role": "user", "content": s})],
            Some(Value::Array(a)) => a.clone(),
            _ => Vec::new(),
        }
    }

    /// The row's input as chat messages, `instructions` first as a system message.
    pub(crate) fn messages(&self) -> Vec<Message> {
        let p = self.params();
        items_to_messages(
            p.get("instructions").and_then(Value::as_str),
            p.get("input").unwrap_or(&Value::Null),
        )
    }

    /// The last user message's text (the question), for task prompts and replay matching.
    pub(crate) fn prompt(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.role == crate::contract::Role::User)
            .and_then(Message::text)
            .unwrap_or_default()
    }
}

fn bad(file: &str, line: usize, field: &str, message: impl Into<String>) -> Error {
    Error::Define {
        file: file.to_string(),
        line,
        field: field.to_string(),
        message: message.into(),
    }
}

const ROLES: &[&str] = &["user", "assistant", "system", "developer"];
const ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
];

/// Check one input item; `at` is its field path.
fn check_item(file: &str, line: usize, at: &str, item: &Value) -> Result<()> {
    let obj = item
        .as_object()
        .ok_or_else(|| bad(file, line, at, "an input item must be a JSON object"))?;
    let kind = match obj.get("type") {
        None => "message",
        Some(Value::String(s)) if ITEM_TYPES.contains(&s.as_str()) => s.as_str(),
        Some(other) => {
            return Err(bad(
                file,
                line,
                &format!("{at}.type"),
                format!("unsupported item type {other}; expected one of {ITEM_TYPES:?}"),
            ))
        }
    };
    let need_str = |k: &str| -> Result<()> {
        match obj.get(k) {
            Some(Value::String(_)) => Ok(()),
            _ => Err(bad(
                file,
                line,
                &format!("{at}.{k}"),
                format!("a {kind} item needs a string `{k}`"),
            )),
        }
    };
    match kind {
        "message" => {
            match obj.get("role").and_then(Value::as_str) {
                Some(r) if ROLES.contains(&r) => {}
                _ => {
                    return Err(bad(
                        file,
                        line,
                        &format!("{at}.role"),
                        format!("a message needs `role`, one of {ROLES:?}"),
                    ))
                }
            }
            match obj.get("content") {
                Some(Value::String(_)) => Ok(()),
                Some(Value::Array(parts))
                    if parts
                        .iter()
                        .all(|p| p.get("text").is_some_and(Value::is_string)) =>
                {
                    Ok(())
                }
                _ => Err(bad(
                    file,
                    line,
                    &format!("{at}.content"),
                    "a message needs `content`: a string or a list of parts each with a string `text`",
                )),
            }
        }
        "function_call" => {
            need_str("name")?;
            need_str("arguments")?;
            need_str("call_id")
        }
        "function_call_output" => {
            need_str("call_id")?;
            need_str("output")
        }
        _ => Ok(()),
    }
}

/// Check one parsed row and pull out its tool names.
pub(crate) fn check_row(file: &str, line: usize, v: Value) -> Result<Row> {
    let Value::Object(raw) = v else {
        return Err(bad(file, line, "<row>", "each line must be a JSON object"));
    };
    let params = match raw.get("responses_create_params") {
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(bad(
                file,
                line,
                "responses_create_params",
                "must be an object (OpenAI Responses create parameters)",
            ))
        }
        None => {
            return Err(bad(
                file,
                line,
                "responses_create_params",
                "missing; every NeMo Gym task row has it, with at least `input`",
            ))
        }
    };
    match params.get("input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(items)) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                check_item(
                    file,
                    line,
                    &format!("responses_create_params.input[{i}]"),
                    item,
                )?;
            }
        }
        _ => {
            return Err(bad(
                file,
                line,
                "responses_create_params.input",
                "must be a string or a non-empty list of input items",
            ))
        }
    }
    if let Some(i) = params.get("instructions") {
        if !i.is_string() && !i.is_null() {
            return Err(bad(
                file,
                line,
                "responses_create_params.instructions",
                "must be a string",
            ));
        }
    }
    let mut tools = Vec::new();
    match params.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ts)) => {
            for (i, t) in ts.iter().enumerate() {
                let at = format!("responses_create_params.tools[{i}]");
                let name = t.get("name").and_then(Value::as_str);
                match (t.get("type").and_then(Value::as_str), name) {
                    (Some("function"), Some(n)) if !n.is_empty() => tools.push(n.to_string()),
                    (Some("function"), _) => {
                        return Err(bad(file, line, &format!("{at}.name"), "a function tool needs a non-empty string `name`"))
                    }
                    _ => {
                        return Err(bad(
                            file,
                            line,
                            &format!("{at}.type"),
                            "only function tools (`\"type\": \"function\"`) are served by resources servers",
                        ))
                    }
                }
            }
        }
        Some(_) => {
            return Err(bad(
                file,
                line,
                "responses_create_params.tools",
                "must be a list of tools",
            ))
        }
    }
    Ok(Row { line, raw, tools })
}

/// Read and check every row of `path`; blank lines are skipped, an empty file is an error.
pub(crate) fn load(path: &Path) -> Result<Vec<Row>> {
    let file = path.display().to_string();
    let text = crate::limits::read_text(path, &crate::limits::TASK_FILE).map_err(|e| {
        e.into_error(format!(
            "cannot read the NeMo Gym task file {file} (the URI's `data` parameter)"
        ))
    })?;
    let mut rows = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(l)
            .map_err(|e| bad(&file, i + 1, "<row>", format!("not valid JSON: {e}")))?;
        rows.push(check_row(&file, i + 1, v)?);
    }
    if rows.is_empty() {
        return Err(bad(
            &file,
            0,
            "<file>",
            "no task rows; expected one JSON object per line",
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        check_row("t.jsonl", 3, v).unwrap_err().to_string()
    }

    #[test]
    fn bad_rows_name_their_line_and_field() {
        assert!(err(json!({})).starts_with("t.jsonl:3: responses_create_params:"));
        let e =
            err(json!({"responses_create_params": {"input": [{"role": "robot", "content": "x"}]}}));
        assert!(
            e.contains("t.jsonl:3: responses_create_params.input[0].role"),
            "{e}"
        );
        let e = err(
            json!({"responses_create_params": {"input": "x", "tools": [{"type": "function"}]}}),
        );
        assert!(e.contains("responses_create_params.tools[0].name"), "{e}");
        let e = err(json!([1]));
        assert!(e.contains("t.jsonl:3: <row>"), "{e}");
    }

    #[test]
    fn good_rows_give_messages_and_tools() {
        let r = check_row(
            "t",
            1,
            json!({"responses_create_params": {"instructions": "sys", "input": "hi",
                "tools": [{"type": "function", "name": "get_weather", "parameters": {}}]}}),
        )
        .unwrap();
        assert_eq!(r.tools, ["get_weather"]);
        assert_eq!(r.messages().len(), 2);
        assert_eq!(r.prompt(), "hi");
    }
}
