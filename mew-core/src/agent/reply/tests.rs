use super::*;

fn reply(message: Value) -> ModelReply {
    ModelReply::from_json(
        &json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
            .to_string(),
    )
    .unwrap()
}

#[test]
fn think_text_and_reasoning_fields_are_kept_apart() {
    let r = reply(json!({"role": "assistant",
        "content": "<think>\nThe user greets me.\n</think>\n\nHello!"}));
    assert_eq!(r.reasoning.as_deref(), Some("The user greets me."));
    assert_eq!(r.content.as_deref(), Some("Hello!"));
    // The template opened the tag: only its end is in the text.
    let r = reply(json!({"content": "Plan it first.</think>Done."}));
    assert_eq!(r.reasoning.as_deref(), Some("Plan it first."));
    assert_eq!(r.content.as_deref(), Some("Done."));
    // Cut inside the reasoning: no answer at all.
    let r = reply(json!({"content": "<think>still thinking"}));
    assert_eq!(r.content, None);
    assert_eq!(r.reasoning.as_deref(), Some("still thinking"));
    let r = reply(json!({"content": "Hi", "reasoning_content": "say hi"}));
    assert_eq!(
        (r.content.as_deref(), r.reasoning.as_deref()),
        (Some("Hi"), Some("say hi"))
    );
    let r = reply(json!({"content": "Hi", "reasoning": "ollama style"}));
    assert_eq!(r.reasoning.as_deref(), Some("ollama style"));
    // A think tag later in the answer is the answer's text.
    let r = reply(json!({"content": "Use <think> tags like this: <think>x</think>"}));
    assert_eq!(r.reasoning, None);
}

#[test]
fn tool_calls_written_in_text_are_recognised() {
    let r = reply(json!({"content":
        "I will look.\n<tool_call>\n{\"name\": \"files__read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n</tool_call>\n<tool_call>{\"name\": \"files__list\", \"arguments\": {}}</tool_call>"}));
    assert_eq!(r.text_calls, Some(TextCalls::Hermes));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].name, "files__read_file");
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
    assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
    assert_eq!(r.content.as_deref(), Some("I will look."));
    assert!(r.raw_content.unwrap().contains("<tool_call>"));
    // Unclosed last block (the stop token ate it).
    let r = reply(json!({"content": "<tool_call>\n{\"name\": \"a__b\", \"arguments\": {}}"}));
    assert_eq!(r.tool_calls[0].name, "a__b");
    let r = reply(json!({"content":
        "Sure:\n```json\n{\"name\": \"w__get\", \"arguments\": {\"city\": \"Oslo\"}}\n```"}));
    assert_eq!(r.text_calls, Some(TextCalls::Json));
    assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
    assert_eq!(r.content.as_deref(), Some("Sure:"));
    let r =
        reply(json!({"content": "{\"name\": \"w__get\", \"parameters\": {\"city\": \"Rome\"}}"}));
    assert_eq!(r.tool_calls[0].name, "w__get");
    let r = reply(json!({"content":
        "[TOOL_CALLS][{\"name\": \"w__get\", \"arguments\": {\"city\": \"Paris\"}}]"}));
    assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
    // After reasoning too.
    let r = reply(json!({"content":
        "<think>need a tool</think>\n<tool_call>\n{\"name\": \"a__b\", \"arguments\": {}}\n</tool_call>"}));
    assert_eq!(r.reasoning.as_deref(), Some("need a tool"));
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.content, None);
    // JSON that is not a call is the answer.
    let r = reply(json!({"content": "```json\n{\"city\": \"Oslo\"}\n```"}));
    assert!(r.tool_calls.is_empty() && r.text_calls.is_none());
    // A native call wins over text.
    let r = reply(
        json!({"content": "<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>",
        "tool_calls": [{"id": "n1", "type": "function", "function": {"name": "y", "arguments": "{}"}}]}),
    );
    assert_eq!(r.tool_calls[0].name, "y");
    assert_eq!(r.text_calls, None);
}

#[test]
fn quirks_of_real_servers() {
    // Arguments as an object, missing and repeated ids.
    let r = reply(json!({"content": null, "tool_calls": [
        {"type": "function", "function": {"name": "a", "arguments": {"k": 1}}},
        {"id": "dup", "type": "function", "function": {"name": "b", "arguments": ""}},
        {"id": "dup", "type": "function", "function": {"name": "c", "arguments": "{}"}}]}));
    assert_eq!(r.tool_calls[0].arguments, r#"{"k":1}"#);
    assert_eq!(r.tool_calls[1].arguments, "{}");
    let ids: std::collections::BTreeSet<_> = r.tool_calls.iter().map(|c| &c.id).collect();
    assert_eq!(ids.len(), 3);
    assert!(r.tool_calls.iter().all(|c| !c.id.is_empty()));
    assert_eq!(r.usage, None);
    let cut = ModelReply::from_json(
        r#"{"choices":[{"message":{"content":"The answer is"},"finish_reason":"length"}]}"#,
    )
    .unwrap();
    assert!(cut.truncated);
    let e = ModelReply::from_json(r#"{"choices":[]}"#).unwrap_err();
    assert!(e.contains("empty"), "{e}");
    let e = ModelReply::from_json(r#"{"error":{"message":"model not loaded","code":503}}"#)
        .unwrap_err();
    assert!(e.contains("model not loaded"), "{e}");
    let e = ModelReply::from_json(r#"{"error":"out of memory"}"#).unwrap_err();
    assert!(e.contains("out of memory"), "{e}");
}

fn sse(events: &[Value]) -> String {
    let mut s: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

#[test]
fn streams_are_assembled_from_their_fragments() {
    let body = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "<th"}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "ink>weigh it"}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": " up</think>Let me"}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": " check.", "tool_calls": [
            {"index": 0, "id": "c1", "type": "function", "function": {"name": "w__get", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "{\"city\":"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": "\"Oslo\"}"}},
            {"index": 1, "id": "c2", "function": {"name": "w__get", "arguments": "{}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}),
    ]);
    // Byte by byte, to split every line and tag.
    let mut a = StreamAssembler::default();
    let mut reasoning = String::new();
    let mut content = String::new();
    let mut i = 0;
    while i < body.len() {
        let mut j = i + 1;
        while !body.is_char_boundary(j) {
            j += 1;
        }
        for d in a.push(&body[i..j]) {
            match d {
                Delta::Reasoning(r) => reasoning.push_str(&r),
                Delta::Content(c) => content.push_str(&c),
            }
        }
        i = j;
    }
    assert_eq!(reasoning, "weigh it up");
    assert_eq!(content, "Let me check.");
    let r = a.finish().unwrap();
    assert_eq!(r.reasoning.as_deref(), Some("weigh it up"));
    assert_eq!(r.content.as_deref(), Some("Let me check."));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
    assert_eq!(r.usage.unwrap().prompt_tokens, 9);
    // The same body read whole.
    assert_eq!(ModelReply::from_body(&body).unwrap().tool_calls.len(), 2);
    let reasoning_field = sse(&[
        json!({"choices": [{"delta": {"reasoning_content": "hmm"}}]}),
        json!({"choices": [{"delta": {"content": "ok"}, "finish_reason": "length"}]}),
    ]);
    let r = ModelReply::from_body(&reasoning_field).unwrap();
    assert_eq!(
        (r.reasoning.as_deref(), r.content.as_deref(), r.truncated),
        (Some("hmm"), Some("ok"), true)
    );
    let err = ModelReply::from_body("data: {\"error\": {\"message\": \"boom\"}}\n\n").unwrap_err();
    assert!(err.contains("boom"), "{err}");
}
