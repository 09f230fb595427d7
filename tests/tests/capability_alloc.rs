//! Matching a compiled capability set performs no heap allocation.
//!
//! A counting global allocator wraps the system one; the count is taken per thread so the
//! test harness's own threads do not disturb it.
#![allow(unsafe_code)]

use mew_core::capability::CapabilitySet;
use mew_core::{Envelope, Limits};
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with` so allocations during thread teardown do not panic.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded unchanged to `System`; the counter is a thread-local
// `Cell` of a `const`-initialised `u64`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn matching_does_not_allocate() {
    let set = CapabilitySet::compile(&[
        json!({"kind": "chat"}),
        json!({"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}),
        json!({"kind": "mcp/request", "payload": {"method": "!tools/*"}}),
        json!({"kind": "mcp/{proposal,response}", "payload": {"**": "/^[a-z]+:[0-9]+$/"}}),
        json!({"kind": "stream/*", "payload": {"$.items[*].name": "file_?"}}),
    ])
    .unwrap();

    let frames = [
        (
            r#"{"protocol":"mew/v0.4","id":"1","from":"a","kind":"chat","payload":{"text":"hi"}}"#,
            true,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"2","from":"a","kind":"mcp/request","payload":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/x"}}}}"#,
            true,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"3","from":"a","kind":"mcp/request","payload":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_file"}}}"#,
            false,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"4","from":"a","kind":"mcp/request","payload":{"jsonrpc":"2.0","id":3,"method":"resources/list"}}"#,
            true,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"5","from":"a","kind":"mcp/response","payload":{"result":{"content":[{"text":"host:8080"}]}}}"#,
            true,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"6","from":"a","kind":"mcp/proposal","payload":{"result":{"content":[{"text":"nothing"}]}}}"#,
            false,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"7","from":"a","kind":"stream/data","payload":{"items":[{"name":"dir"},{"name":"file_a"}]}}"#,
            true,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"8","from":"a","kind":"stream/data","payload":{"items":[{"name":"file_ab"}]}}"#,
            false,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"9","from":"a","kind":"reasoning/start"}"#,
            false,
        ),
        (
            r#"{"protocol":"mew/v0.4","id":"10","from":"a","kind":"mcp/request"}"#,
            false,
        ),
    ];
    let envelopes: Vec<(Envelope, bool)> = frames
        .iter()
        .map(|(f, want)| {
            (
                Envelope::parse(f.as_bytes(), &Limits::default()).unwrap(),
                *want,
            )
        })
        .collect();

    // Warm-up: the `regex` engine sets up its per-thread scratch space on first use.
    for (env, _) in &envelopes {
        let _ = set.allows(env.kind.as_str(), env.payload.as_ref());
    }

    let before = allocations();
    let mut allowed = 0;
    for _ in 0..100 {
        for (env, want) in &envelopes {
            let got = set.allows(env.kind.as_str(), env.payload.as_ref());
            assert_eq!(got, *want, "{}", env.id);
            allowed += usize::from(got);
            let _ = set.precheck(env.kind.as_str());
            let _ = set.first_match(env.kind.as_str(), env.payload.as_ref());
        }
    }
    let after = allocations();
    assert_eq!(allowed, 500);
    assert_eq!(after - before, 0, "allocations while matching");

    // The counter itself works.
    let v = std::hint::black_box(vec![1u8; 16]);
    assert!(allocations() > after);
    drop(v);
}
