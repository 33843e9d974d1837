//! The contract's unit tests: shapes and round trips.

use super::trajectory::JudgmentWire;
use super::*;
use crate::error::Error;
use serde_json::json;

#[test]
fn isolation_is_ordered_weakest_first() {
    assert!(Isolation::Container.satisfies(Isolation::Process));
    assert!(!Isolation::Process.satisfies(Isolation::Jail));
    assert!(Isolation::None < Isolation::Microvm);
}

#[test]
fn tool_calls_read_both_shapes_and_emit_the_wire_shape() {
    let wire: ToolCall = serde_json::from_value(json!({
        "id": "c1", "type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 1}"}
    }))
    .unwrap();
    assert_eq!(wire.name, "add");
    assert_eq!(wire.arguments, json!("{\"a\": 1}"));
    let ours: ToolCall =
        serde_json::from_value(json!({"id": null, "name": "add", "arguments": {"a": 1}})).unwrap();
    let out = ours.to_openai();
    assert_eq!(out["type"], "function");
    assert_eq!(out["function"]["arguments"], "{\"a\":1}");
    assert!(out["id"].as_str().unwrap().starts_with("call_"));
    let bad = serde_json::from_value::<ToolCall>(json!({"function": {"arguments": "{}"}}));
    assert!(bad.unwrap_err().to_string().contains("name"));
}

#[test]
fn message_keeps_extra_fields_and_emits_content_always() {
    let m: Message = serde_json::from_value(json!({
        "role": "assistant", "content": null, "nenyax_ids": [1, 2],
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]
    }))
    .unwrap();
    assert_eq!(m.extra["nenyax_ids"], json!([1, 2]));
    let wire = m.to_openai();
    assert!(wire.as_object().unwrap().contains_key("content"));
    assert_eq!(wire["tool_calls"][0]["function"]["name"], "f");
    assert!(Message::from_openai(&json!({"role": "robot", "content": "x"})).is_err());
    let e = Message::from_openai(&json!({"role": "user", "content": 3})).unwrap_err();
    assert!(e.to_string().contains("content must be"), "{e}");
}

#[test]
fn judgment_rejects_non_finite_scores_on_both_paths() {
    assert!(matches!(
        Judgment::new(f64::NAN, JudgeSource::Env, "j"),
        Err(Error::NonFiniteScore { .. })
    ));
    // JSON has no NaN literal and serde_json refuses 1e999, so check the validating path
    // that every deserialised judgment goes through.
    let wire: JudgmentWire = serde_json::from_str(r#"{"score": 1}"#).unwrap();
    let e = Judgment::try_from(JudgmentWire {
        score: f64::INFINITY,
        ..wire
    })
    .unwrap_err();
    assert!(e.contains("finite"), "{e}");
    assert!(serde_json::from_str::<Judgment>(r#"{"score": 1e999}"#).is_err());
    let ok: Judgment = serde_json::from_str(r#"{"score": 0.5}"#).unwrap();
    assert_eq!(ok.source, JudgeSource::Env);
}

#[test]
fn manifest_rejects_unknown_fields() {
    let e = serde_json::from_value::<Manifest>(json!({
        "id": "x", "name": "x", "source_format": "x", "mode": "step", "colour": 1
    }))
    .unwrap_err();
    assert!(e.to_string().contains("colour"));
}

#[test]
fn tokens_are_extracted_from_vllm_shaped_responses() {
    let mut call = ModelCall {
        request: JsonMap::new(),
        response: Some(
            json!({
                "prompt_token_ids": [1, 2],
                "choices": [{"token_ids": [7, 8], "logprobs": {"content": [
                    {"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.0}]}}]
            })
            .as_object()
            .unwrap()
            .clone(),
        ),
        error: None,
        latency_s: None,
        started_at: None,
        prompt_token_ids: None,
        completion_token_ids: None,
        completion_logprobs: None,
    };
    call.extract_tokens();
    assert_eq!(call.prompt_token_ids, Some(vec![1, 2]));
    assert_eq!(call.completion_token_ids, Some(vec![7, 8]));
    assert_eq!(call.completion_logprobs, Some(vec![-0.5, -1.0]));
}

#[test]
fn tokens_are_extracted_from_nemo_gym_training_messages_and_items() {
    let extracted = |response: serde_json::Value| {
        let mut call = ModelCall {
            request: JsonMap::new(),
            response: Some(response.as_object().unwrap().clone()),
            error: None,
            latency_s: None,
            started_at: None,
            prompt_token_ids: None,
            completion_token_ids: None,
            completion_logprobs: None,
        };
        call.extract_tokens();
        (
            call.prompt_token_ids,
            call.completion_token_ids,
            call.completion_logprobs,
        )
    };
    let want = (Some(vec![1, 2]), Some(vec![7, 8]), Some(vec![-0.5, -1.0]));
    let bundle = json!({"prompt_token_ids": [1, 2], "generation_token_ids": [7, 8],
        "generation_log_probs": [-0.5, -1.0]});
    // Chat: vllm_model moves them onto the message (and drops vLLM's own fields).
    let mut message = json!({"role": "assistant", "content": "hi"});
    message
        .as_object_mut()
        .unwrap()
        .extend(bundle.as_object().unwrap().clone());
    assert_eq!(
        extracted(json!({"choices": [{"message": message, "logprobs": null}]})),
        want
    );
    // Responses: onto the turn's last output item, here a function call after the text.
    let mut call = json!({"type": "function_call", "name": "f", "arguments": "{}"});
    call.as_object_mut()
        .unwrap()
        .extend(bundle.as_object().unwrap().clone());
    let text = json!({"type": "message", "role": "assistant", "content": []});
    assert_eq!(extracted(json!({"output": [text, call]})), want);
    // Neither: nothing is made up.
    assert_eq!(extracted(json!({"output": [text]})), (None, None, None));
}
