//! A real HTTP server on loopback that speaks the OpenAI chat-completions API and replays
//! scripted turns, recording every request it receives: the stand-in for a hosted model.
//!
//! Each `POST …/chat/completions` takes the next [`Turn`]; when the script is spent, the
//! server answers 500 with a body saying so, so an over-eager agent fails loudly. A turn may
//! be computed from the request ([`Turn::Computed`], for agents whose calls race) or held
//! back for a while ([`Turn::Slow`], to cancel a call in flight).
//!
//! Real servers' shapes are replayed from recorded-shape fixtures
//! (`tests/fixtures/model-servers/<server>/<n>.json` and `<n>.sse`, see [`Turn::fixture`]):
//! a request with `stream: true` gets the server-sent-events form, sent an event at a time,
//! and the plain JSON form otherwise. [`ServerOptions::refuse_stream`] makes the server
//! answer streamed requests with an error, as llama.cpp's server did for streamed requests
//! with tools.

use serde_json::{Value, json};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A turn computed from the request body.
pub type TurnFn = Arc<dyn Fn(&Value) -> Turn + Send + Sync>;

/// One scripted answer.
#[derive(Clone)]
pub enum Turn {
    /// 200 with an assistant message saying this.
    Text(String),
    /// 200 with tool calls `(id, function name, arguments)`.
    ToolCalls(Vec<(String, String, Value)>),
    /// This status, `Retry-After` seconds if given, and an error body.
    Status(u16, Option<u64>),
    /// 200 with this raw body.
    Raw(String),
    /// 200 with this `text/event-stream` body, written an event at a time.
    Sse(String),
    /// This status with this raw body.
    Error(u16, String),
    /// The turn this function makes of the request.
    Computed(TurnFn),
    /// This turn, after this delay.
    Slow(Duration, Box<Turn>),
}

impl fmt::Debug for Turn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Turn::Text(t) => write!(f, "Text({t:?})"),
            Turn::ToolCalls(c) => write!(f, "ToolCalls({c:?})"),
            Turn::Status(s, r) => write!(f, "Status({s}, {r:?})"),
            Turn::Raw(b) => write!(f, "Raw({b:?})"),
            Turn::Sse(b) => write!(f, "Sse({b:?})"),
            Turn::Error(s, b) => write!(f, "Error({s}, {b:?})"),
            Turn::Computed(_) => f.write_str("Computed(..)"),
            Turn::Slow(d, t) => write!(f, "Slow({d:?}, {t:?})"),
        }
    }
}

/// The text of the last `user` message of a chat-completions request body.
pub fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

impl Turn {
    /// A text answer.
    pub fn text(t: &str) -> Turn {
        Turn::Text(t.into())
    }

    /// One tool call.
    pub fn call(id: &str, name: &str, args: Value) -> Turn {
        Turn::ToolCalls(vec![(id.into(), name.into(), args)])
    }

    /// Turn `n` of a recorded-shape fixture folder: `<n>.sse` for a request that asks for a
    /// stream (when the file exists), `<n>.json` otherwise.
    pub fn fixture(dir: &std::path::Path, n: usize) -> Turn {
        let json = std::fs::read_to_string(dir.join(format!("{n}.json")))
            .unwrap_or_else(|e| panic!("fixture {}/{n}.json: {e}", dir.display()));
        let sse = std::fs::read_to_string(dir.join(format!("{n}.sse"))).ok();
        Turn::computed(move |req| match &sse {
            Some(s) if req["stream"] == true => Turn::Sse(s.clone()),
            _ => Turn::Raw(json.clone()),
        })
    }

    /// A turn computed from each request.
    pub fn computed(f: impl Fn(&Value) -> Turn + Send + Sync + 'static) -> Turn {
        Turn::Computed(Arc::new(f))
    }

    fn response(&self, request: &Value) -> (u16, Vec<(String, String)>, String) {
        let ok = |message: Value| {
            json!({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
            })
            .to_string()
        };
        match self {
            Turn::Text(t) => (200, vec![], ok(json!({"role": "assistant", "content": t}))),
            Turn::ToolCalls(calls) => {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, args)| {
                        json!({"id": id, "type": "function",
                               "function": {"name": name, "arguments": args.to_string()}})
                    })
                    .collect();
                (
                    200,
                    vec![],
                    ok(json!({"role": "assistant", "content": null, "tool_calls": calls})),
                )
            }
            Turn::Status(code, retry) => (
                *code,
                retry
                    .map(|s| vec![("Retry-After".to_owned(), s.to_string())])
                    .unwrap_or_default(),
                json!({"error": {"message": format!("scripted status {code}"), "type": "scripted"}})
                    .to_string(),
            ),
            Turn::Raw(body) => (200, vec![], body.clone()),
            Turn::Sse(body) => (
                200,
                vec![("Content-Type".to_owned(), "text/event-stream".to_owned())],
                body.clone(),
            ),
            Turn::Error(code, body) => (*code, vec![], body.clone()),
            Turn::Computed(f) => f(request).response(request),
            Turn::Slow(d, t) => {
                std::thread::sleep(*d);
                t.response(request)
            }
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request path.
    pub path: String,
    /// `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body (`Null` when it did not parse).
    pub body: Value,
}

/// How the server behaves beyond its turns.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Answer requests with `stream: true` with 400 and this body, taking no turn.
    pub refuse_stream: Option<String>,
}

#[derive(Default)]
struct State {
    options: ServerOptions,
    turns: Vec<Turn>,
    next: usize,
    requests: Vec<Recorded>,
}

/// The running server; it stops with the process (each test binary is its own process).
#[derive(Clone)]
pub struct ModelServer {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

/// Largest request body read.
const MAX_BODY: usize = 8 * 1024 * 1024;

impl ModelServer {
    /// Starts a server replaying `turns` in order.
    pub fn start(turns: Vec<Turn>) -> ModelServer {
        ModelServer::start_with(turns, ServerOptions::default())
    }

    /// Starts a server replaying `turns` in order, behaving as `options` say.
    pub fn start_with(turns: Vec<Turn>, options: ServerOptions) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            options,
            turns,
            ..State::default()
        }));
        let st = state.clone();
        std::thread::Builder::new()
            .name("model-server".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let st = st.clone();
                    std::thread::spawn(move || {
                        let _ = serve(conn, &st);
                    });
                }
            })
            .expect("spawn the server thread");
        ModelServer { base_url, state }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// How many turns were served.
    pub fn served(&self) -> usize {
        self.state.lock().unwrap().next
    }
}

fn serve(conn: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut length = 0usize;
        let mut authorization = None;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let v = v.trim();
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.parse().unwrap_or(0).min(MAX_BODY);
                } else if k.eq_ignore_ascii_case("authorization") {
                    authorization = Some(v.to_owned());
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let turn = {
            let mut st = state.lock().unwrap();
            st.requests.push(Recorded {
                path: path.clone(),
                authorization,
                body: request.clone(),
            });
            if !path.ends_with("/chat/completions") {
                Err((404, json!({"error": {"message": "not found"}}).to_string()))
            } else if let Some(body) = st.options.refuse_stream.clone()
                && request["stream"] == true
            {
                Err((400, body))
            } else if let Some(t) = st.turns.get(st.next).cloned() {
                st.next += 1;
                Ok(t)
            } else {
                Err((
                    500,
                    json!({"error": {"message": "the script has no more turns"}}).to_string(),
                ))
            }
        };
        // Made outside the lock: a slow turn must not hold other calls back.
        let (status, headers, reply) = match turn {
            Ok(t) => t.response(&request),
            Err((status, body)) => (status, vec![], body),
        };
        let sse = headers.iter().any(|(k, _)| k == "Content-Type");
        let mut head = format!(
            "HTTP/1.1 {status} Scripted\r\nContent-Length: {}\r\n",
            reply.len()
        );
        if !sse {
            head.push_str("Content-Type: application/json\r\n");
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        out.write_all(head.as_bytes())?;
        if sse {
            // An event at a time, as a server streaming tokens does.
            for event in reply.split_inclusive("\n\n") {
                out.write_all(event.as_bytes())?;
                out.flush()?;
                std::thread::sleep(Duration::from_millis(2));
            }
        } else {
            out.write_all(reply.as_bytes())?;
        }
        out.flush()?;
    }
}
