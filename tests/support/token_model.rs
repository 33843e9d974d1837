//! A vLLM-shaped upstream model for the trace tests: a scripted model behind a ChatML chat
//! template (Hermes-style `<tool_call>` blocks, `<think>` reasoning) and a byte-level tokenizer,
//! on its own tiny_http server. Like vLLM it renders the whole conversation (tool results
//! included) through the template and tokenizes it for every call, and it returns
//! `prompt_token_ids`, `choices[0].token_ids` and `logprobs.content` only when the request asks
//! (`return_token_ids`, `logprobs`, `return_tokens_as_token_ids`), plain or streamed, and
//! serves vLLM's `POST /tokenize` for chat messages. Continuity between calls therefore holds
//! exactly when the template renders earlier turns as they were generated, as with a real
//! server. It plays the model only; environments stay the real packages.
#![allow(dead_code)]

use serde_json::{json, Map, Value};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the scripted model says in one turn.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Reasoning, generated as `<think>...</think>` and returned as `reasoning_content`.
    pub think: Option<String>,
    /// The visible text (empty for a tool-call-only turn, which vLLM returns as null content).
    pub content: String,
    /// Tool calls: name and arguments.
    pub calls: Vec<(String, Value)>,
}

impl Reply {
    /// A plain text reply.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply {
            content: s.into(),
            ..Reply::default()
        }
    }

    /// A reply of tool calls only.
    pub fn calls(calls: &[(&str, Value)]) -> Reply {
        Reply {
            calls: calls
                .iter()
                .map(|(n, a)| (n.to_string(), a.clone()))
                .collect(),
            ..Reply::default()
        }
    }

    /// The same reply, reasoning first.
    pub fn thinking(mut self, r: impl Into<String>) -> Reply {
        self.think = Some(r.into());
        self
    }
}

/// How the template renders earlier assistant turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum History {
    /// As generated, reasoning included (Qwen3 within one tool loop): prefix-stable.
    Keep,
    /// Without their reasoning (DeepSeek-R1's template): an earlier turn re-renders
    /// differently from what was sampled, so the prompt stops extending the last completion.
    DropThink,
}

/// The script: the request's messages in, the model's turn out.
pub type Script = dyn Fn(&[Value]) -> Reply + Send + Sync;

/// A running upstream; the server thread lives as long as the test binary.
pub struct TokenModel {
    /// `http://127.0.0.1:<port>/v1`.
    pub base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl TokenModel {
    /// Start a model answering with `script`, rendering history as `history` says.
    pub fn start(
        history: History,
        script: impl Fn(&[Value]) -> Reply + Send + Sync + 'static,
    ) -> TokenModel {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind the token model");
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
        let seen = requests.clone();
        let script: Arc<Script> = Arc::new(script);
        let counter = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for req in server.incoming_requests() {
                let (seen, script, counter) = (seen.clone(), script.clone(), counter.clone());
                std::thread::spawn(move || serve(req, history, &*script, &seen, &counter));
            }
        });
        TokenModel {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            requests,
        }
    }

    /// Every chat request received so far, as sent.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(
    mut req: tiny_http::Request,
    history: History,
    script: &Script,
    seen: &Mutex<Vec<Value>>,
    counter: &AtomicUsize,
) {
    let respond = |req: tiny_http::Request, status: u16, body: Value| {
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
            .expect("a valid header");
        let _ = req.respond(
            tiny_http::Response::from_data(body.to_string().into_bytes())
                .with_status_code(status)
                .with_header(header),
        );
    };
    let path = req.url().to_string();
    if path.ends_with("/models") {
        return respond(
            req,
            200,
            json!({"object": "list", "data": [{"id": "token-model"}]}),
        );
    }
    let mut text = String::new();
    let _ = req.as_reader().read_to_string(&mut text);
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    if path == "/tokenize" {
        // vLLM's chat tokenize: the templated prompt, generation prompt included.
        let ids = tokenize(&render_prompt(&messages, &body["tools"], history));
        let out = json!({"count": ids.len(), "max_model_len": 1 << 20, "tokens": ids,
            "token_strs": null});
        return respond(req, 200, out);
    }
    if !path.ends_with("/chat/completions") || !body["messages"].is_array() {
        let msg = format!("the token model serves POST /v1/chat/completions, not {path}");
        return respond(req, 404, json!({"error": {"message": msg}}));
    }
    seen.lock().unwrap().push(body.clone());
    let prompt = tokenize(&render_prompt(&messages, &body["tools"], history));
    let reply = script(&messages);
    let completion = tokenize(&(assistant_body(&reply) + IM_END));
    let n = counter.fetch_add(1, Ordering::SeqCst);
    let message = response_message(&reply, n);
    let finish = if reply.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let ids = body["return_token_ids"].as_bool() == Some(true);
    // `return_tokens_as_token_ids` spells each logprob's token as `token_id:<id>`, as vLLM does
    // (NeMo Gym's vllm_model server reads the sampled ids from there).
    let as_ids = body["return_tokens_as_token_ids"].as_bool() == Some(true);
    let logprobs = (body["logprobs"].as_bool() == Some(true)).then(|| {
        let content: Vec<Value> = completion
            .iter()
            .map(|&t| {
                let token = if as_ids {
                    format!("token_id:{t}")
                } else {
                    token_text(t)
                };
                json!({"token": token, "logprob": logprob(t), "bytes": [], "top_logprobs": []})
            })
            .collect();
        json!({ "content": content })
    });
    let usage = json!({"prompt_tokens": prompt.len(), "completion_tokens": completion.len(),
        "total_tokens": prompt.len() + completion.len()});
    let id = format!("chatcmpl-{n}");
    let model = body["model"].clone();
    if body["stream"].as_bool() != Some(true) {
        let mut choice = json!({"index": 0, "message": message, "logprobs": logprobs,
            "finish_reason": finish, "stop_reason": null});
        choice["token_ids"] = if ids { json!(completion) } else { Value::Null };
        let out = json!({"id": id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [choice], "usage": usage, "prompt_logprobs": null,
            "prompt_token_ids": if ids { json!(prompt) } else { Value::Null }});
        return respond(req, 200, out);
    }
    // As vLLM streams: the prompt ids on the first chunk, each delta with its own token ids.
    let chunk = |delta: Value, extra: Map<String, Value>, finish: Value| {
        let mut c = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        c.as_object_mut().unwrap().extend(extra);
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [c]})
    };
    let mut first = chunk(
        json!({"role": "assistant", "content": ""}),
        Map::new(),
        Value::Null,
    );
    if ids {
        first["prompt_token_ids"] = json!(prompt);
    }
    let mut delta = message.clone();
    delta.as_object_mut().unwrap().remove("role");
    if let Some(calls) = delta["tool_calls"].as_array_mut() {
        for (i, c) in calls.iter_mut().enumerate() {
            c["index"] = json!(i);
        }
    }
    let mut extra = Map::new();
    if ids {
        extra.insert("token_ids".into(), json!(completion));
    }
    let mut body_chunk = chunk(delta, extra, Value::Null);
    body_chunk["choices"][0]["logprobs"] = logprobs.unwrap_or(Value::Null);
    let mut events = vec![
        first,
        body_chunk,
        chunk(json!({}), Map::new(), json!(finish)),
    ];
    if body["stream_options"]["include_usage"].as_bool() == Some(true) {
        events.push(
            json!({"id": id, "object": "chat.completion.chunk", "created": 0,
            "model": model, "choices": [], "usage": usage}),
        );
    }
    let mut w = req.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    let mut out = head.to_string();
    for e in &events {
        out.push_str(&format!("data: {e}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    let _ = w.write_all(out.as_bytes());
    let _ = w.flush();
}

const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";
/// Special tokens, each one id (256 + its index); everything else is one id per byte.
const SPECIALS: [&str; 6] = [
    IM_START,
    IM_END,
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
];

/// The token ids of `s`: specials whole, other text byte by byte.
pub fn tokenize(s: &str) -> Vec<i64> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    'scan: while i < b.len() {
        for (k, sp) in SPECIALS.iter().enumerate() {
            if b[i..].starts_with(sp.as_bytes()) {
                out.push(256 + k as i64);
                i += sp.len();
                continue 'scan;
            }
        }
        out.push(i64::from(b[i]));
        i += 1;
    }
    out
}

/// The text of token ids (the inverse of [`tokenize`]).
pub fn detokenize(ids: &[i64]) -> String {
    let mut bytes = Vec::new();
    for &t in ids {
        match usize::try_from(t - 256).ok().and_then(|k| SPECIALS.get(k)) {
            Some(sp) => bytes.extend_from_slice(sp.as_bytes()),
            None => bytes.push(t as u8),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn token_text(t: i64) -> String {
    detokenize(&[t])
}

/// The sampling log-probability the model reports for token `t`: deterministic and exact in
/// binary, so a test can recompute it.
pub fn logprob(t: i64) -> f64 {
    -((t % 13) as f64 + 1.0) / 16.0
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .concat(),
        _ => String::new(),
    }
}

/// What the model generates for a turn, before its end token: `<think>` block, text, then one
/// `<tool_call>` block per call with canonical JSON (as a Hermes template re-renders calls).
fn assistant_body(r: &Reply) -> String {
    let mut s = String::new();
    if let Some(t) = &r.think {
        s.push_str(&format!("<think>\n{t}\n</think>\n\n"));
    }
    s.push_str(&r.content);
    for (name, args) in &r.calls {
        if !s.is_empty() {
            s.push('\n');
        }
        let call = json!({"name": name, "arguments": args});
        s.push_str(&format!("<tool_call>\n{call}\n</tool_call>"));
    }
    s
}

/// An assistant message of the conversation, read back as the turn it came from.
fn reply_of(m: &Value, history: History) -> Reply {
    let think = match history {
        History::Keep => m["reasoning_content"]
            .as_str()
            .or(m["reasoning"].as_str())
            .map(str::to_string),
        History::DropThink => None,
    };
    let calls = m["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let f = &c["function"];
            let args = match &f["arguments"] {
                Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                other => other.clone(),
            };
            (f["name"].as_str().unwrap_or_default().to_string(), args)
        })
        .collect();
    Reply {
        think,
        content: text_of(&m["content"]),
        calls,
    }
}

/// The ChatML rendering of the conversation plus the generation prompt; tools go into the
/// system turn, as Qwen's and Hermes' templates put them.
fn render_prompt(messages: &[Value], tools: &Value, history: History) -> String {
    let mut s = String::new();
    let mut rest = messages;
    if let Some(tools) = tools.as_array().filter(|t| !t.is_empty()) {
        let mut system = String::new();
        if let Some(first) = messages.first().filter(|m| m["role"] == "system") {
            system = text_of(&first["content"]) + "\n\n";
            rest = &messages[1..];
        }
        system.push_str("# Tools\n<tools>");
        for t in tools {
            system.push_str(&format!("\n{t}"));
        }
        system.push_str("\n</tools>");
        s.push_str(&format!("{IM_START}system\n{system}{IM_END}\n"));
    }
    for m in rest {
        let role = m["role"].as_str().unwrap_or("user");
        let body = if role == "assistant" {
            assistant_body(&reply_of(m, history))
        } else {
            text_of(&m["content"])
        };
        s.push_str(&format!("{IM_START}{role}\n{body}{IM_END}\n"));
    }
    s.push_str(&format!("{IM_START}assistant\n"));
    s
}

/// The response message vLLM's reasoning and Hermes tool parsers make of a turn.
fn response_message(r: &Reply, n: usize) -> Value {
    let content = if r.content.is_empty() && !r.calls.is_empty() {
        Value::Null
    } else {
        json!(r.content)
    };
    let mut m = json!({"role": "assistant", "content": content});
    if let Some(t) = &r.think {
        m["reasoning_content"] = json!(t);
    }
    if !r.calls.is_empty() {
        m["tool_calls"] = r
            .calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": format!("call_{n}_{i}"), "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
    }
    m
}
