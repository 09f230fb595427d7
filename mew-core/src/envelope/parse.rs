//! Parsing limits and errors shared by [`Envelope`](super::Envelope) and
//! [`RoutingView`](super::RoutingView).

use super::Envelope;
use thiserror::Error;

/// The deepest nesting serde_json itself parses (it refuses the 128th level).
pub const SERDE_MAX_DEPTH: usize = 127;

/// Bounds applied before and while parsing untrusted bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted frame in bytes (default 1 MiB).
    pub max_frame_bytes: usize,
    /// Deepest accepted JSON nesting, `{"a":[1]}` being 2 (default and ceiling
    /// [`SERDE_MAX_DEPTH`]; larger values act as the ceiling).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 1024 * 1024,
            max_depth: SERDE_MAX_DEPTH,
        }
    }
}

impl Limits {
    /// The depth limit in force: the configured one, capped by serde_json's.
    pub fn effective_depth(&self) -> usize {
        self.max_depth.min(SERDE_MAX_DEPTH)
    }
}

/// Why bytes were not accepted as an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The frame exceeds [`Limits::max_frame_bytes`].
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Size of the offending frame.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// JSON nested deeper than [`Limits::max_depth`].
    #[error("JSON nesting deeper than {max} levels")]
    TooDeep {
        /// The limit in force.
        max: usize,
    },
    /// Not valid UTF-8.
    #[error("frame is not valid UTF-8")]
    InvalidUtf8,
    /// Not syntactically valid JSON.
    #[error("invalid JSON at line {line} column {column}: {message}")]
    InvalidJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the JSON parser found.
        message: String,
    },
    /// Valid JSON, but not an object.
    #[error("an envelope must be a JSON object")]
    NotAnObject,
    /// `protocol` present but not `mew/v0.4`.
    #[error("unsupported protocol {found:?}: this peer speaks mew/v0.4")]
    WrongProtocol {
        /// The protocol string received.
        found: String,
    },
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The field name.
        field: &'static str,
        /// What the field must be, in words.
        expected: &'static str,
    },
    /// An envelope field appears twice in the object.
    #[error("field `{0}` appears more than once")]
    DuplicateField(&'static str),
}

impl ParseError {
    /// A stable machine-readable code, used in `system/error` payloads.
    pub fn code(&self) -> &'static str {
        match self {
            ParseError::TooLarge { .. } => "frame_too_large",
            ParseError::TooDeep { .. } => "nesting_too_deep",
            ParseError::InvalidUtf8 => "invalid_utf8",
            ParseError::InvalidJson { .. } => "invalid_json",
            ParseError::NotAnObject => "not_an_object",
            ParseError::WrongProtocol { .. } => "wrong_protocol",
            ParseError::MissingField(_) => "missing_field",
            ParseError::WrongType { .. } => "wrong_type",
            ParseError::DuplicateField(_) => "duplicate_field",
        }
    }

    pub(crate) fn from_json(e: &serde_json::Error) -> ParseError {
        ParseError::InvalidJson {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        }
    }
}

/// Fails when `bytes` nest arrays/objects deeper than `max`, scanning without allocating.
///
/// Strings are skipped quote to quote with `memchr`; a quote preceded by an odd number of
/// backslashes is escaped and does not end the string.
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), ParseError> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let mut j = i + 1;
                loop {
                    let Some(k) = memchr::memchr(b'"', &bytes[j..]) else {
                        return Ok(());
                    };
                    let quote = j + k;
                    let backslashes = bytes[j..quote]
                        .iter()
                        .rev()
                        .take_while(|&&b| b == b'\\')
                        .count();
                    j = quote + 1;
                    if backslashes % 2 == 0 {
                        break;
                    }
                }
                i = j;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(ParseError::TooDeep { max });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Size, UTF-8 and, when `scan` is set or a limit below serde_json's is configured, depth.
pub(super) fn precheck<'a>(
    bytes: &'a [u8],
    limits: &Limits,
    scan: bool,
) -> Result<&'a str, ParseError> {
    if bytes.len() > limits.max_frame_bytes {
        return Err(ParseError::TooLarge {
            size: bytes.len(),
            max: limits.max_frame_bytes,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::InvalidUtf8)?;
    if scan || limits.max_depth < SERDE_MAX_DEPTH {
        let max = limits.effective_depth();
        // Nesting never exceeds the number of openers, and counting them is a branch-free
        // loop the compiler vectorises: typical envelopes skip the exact scan altogether.
        if count_openers(bytes) > max {
            check_depth(bytes, max)?;
        }
    }
    Ok(text)
}

/// How many `{` and `[` bytes `bytes` holds, strings included: an upper bound on depth.
#[inline]
fn count_openers(bytes: &[u8]) -> usize {
    // `[` is 0x5B and `{` is 0x7B: setting bit 5 maps both, and nothing else, to `{`.
    // Counting per chunk in a u8 keeps the vector lanes narrow.
    let mut total = 0usize;
    let mut chunks = bytes.chunks_exact(255);
    for chunk in &mut chunks {
        total += usize::from(count_chunk(chunk));
    }
    total + usize::from(count_chunk(chunks.remainder()))
}

#[inline]
fn count_chunk(chunk: &[u8]) -> u8 {
    chunk
        .iter()
        .fold(0u8, |n, &b| n + u8::from(b | 0x20 == b'{'))
}

/// Rejects anything but a JSON object before a typed parse, which would accept an array
/// as a struct's fields in order.
pub(super) fn require_object(text: &str, limits: &Limits) -> Result<(), ParseError> {
    if text.trim_start().starts_with('{') {
        return Ok(());
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(text) {
        Ok(_) => Err(ParseError::NotAnObject),
        Err(e) => Err(syntax_error(&e, limits)),
    }
}

/// Maps a serde_json failure that is not about a field's contents.
pub(super) fn syntax_error(e: &serde_json::Error, limits: &Limits) -> ParseError {
    if e.to_string().starts_with("recursion limit exceeded") {
        return ParseError::TooDeep {
            max: limits.effective_depth(),
        };
    }
    ParseError::from_json(e)
}

/// Which envelope fields must be present: all of them for [`Envelope`], only `kind` for
/// the gateway's lenient view of reference clients' envelopes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Strictness {
    Envelope,
    Routing,
}

const FIELDS: [&str; 9] = [
    "protocol",
    "id",
    "ts",
    "from",
    "to",
    "kind",
    "correlation_id",
    "context",
    "payload",
];

/// Explains why a typed parse failed: slow, but only ever run on the error path.
///
/// The fast typed parse says little about *which* field was wrong, so the text is parsed
/// again as a tree and checked field by field in a fixed order.
pub(super) fn diagnose(
    text: &str,
    e: &serde_json::Error,
    limits: &Limits,
    strictness: Strictness,
) -> ParseError {
    if !e.is_data() {
        return syntax_error(e, limits);
    }
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return syntax_error(&e, limits),
    };
    let Some(obj) = value.as_object() else {
        return ParseError::NotAnObject;
    };
    if let Err(err) = check_fields(obj, strictness) {
        return err;
    }
    // The tree keeps only the last of repeated keys, so duplicates pass the field checks.
    let msg = e.to_string();
    if let Some(rest) = msg.strip_prefix("duplicate field `")
        && let Some(name) = rest.split('`').next()
        && let Some(field) = FIELDS.iter().find(|f| **f == name)
    {
        return ParseError::DuplicateField(field);
    }
    ParseError::from_json(e)
}

fn check_fields(
    obj: &serde_json::Map<String, serde_json::Value>,
    strictness: Strictness,
) -> Result<(), ParseError> {
    use serde_json::Value;
    let strict = strictness == Strictness::Envelope;
    let str_field = |name: &'static str, required: bool| -> Result<(), ParseError> {
        match obj.get(name) {
            None | Some(Value::Null) if required => Err(ParseError::MissingField(name)),
            None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
            Some(_) => Err(ParseError::WrongType {
                field: name,
                expected: "a string",
            }),
        }
    };
    str_field("protocol", strict)?;
    if let Some(Value::String(p)) = obj.get("protocol")
        && p != crate::PROTOCOL
    {
        return Err(ParseError::WrongProtocol { found: p.clone() });
    }
    str_field("id", strict)?;
    str_field("from", strict)?;
    str_field("kind", true)?;
    str_field("ts", false)?;
    str_field("context", false)?;
    match obj.get("to") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => {
            return Err(ParseError::WrongType {
                field: "to",
                expected: "an array of participant id strings",
            });
        }
    }
    match obj.get("correlation_id") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => {
            return Err(ParseError::WrongType {
                field: "correlation_id",
                expected: "a string or an array of strings",
            });
        }
    }
    match obj.get("payload") {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(PAYLOAD_NOT_OBJECT),
    }
}

pub(super) const PAYLOAD_NOT_OBJECT: ParseError = ParseError::WrongType {
    field: "payload",
    expected: "an object",
};

pub(super) fn parse_envelope(bytes: &[u8], limits: &Limits) -> Result<Envelope, ParseError> {
    let text = precheck(bytes, limits, false)?;
    require_object(text, limits)?;
    let env: Envelope =
        serde_json::from_str(text).map_err(|e| diagnose(text, &e, limits, Strictness::Envelope))?;
    if env.protocol != crate::PROTOCOL {
        return Err(ParseError::WrongProtocol {
            found: env.protocol,
        });
    }
    if env.payload.as_ref().is_some_and(|p| !p.is_object()) {
        return Err(PAYLOAD_NOT_OBJECT);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Envelope, ParseError> {
        Envelope::parse(s.as_bytes(), &Limits::default())
    }

    #[test]
    fn accepts_minimal_and_normalises_correlation() {
        let e = parse(r#"{"protocol":"mew/v0.4","id":"a","from":"x","kind":"chat","correlation_id":"c1","payload":{"text":"hi"}}"#).unwrap();
        assert_eq!(e.correlation_id, Some(vec!["c1".to_string()]));
        assert!(e.is_broadcast());
        assert!(e.to_json().contains(r#""correlation_id":["c1"]"#));
    }

    #[test]
    fn each_error_is_distinct() {
        let small = Limits {
            max_frame_bytes: 10,
            max_depth: 3,
        };
        assert_eq!(
            Envelope::parse(b"{\"protocol\":1234567}", &small)
                .unwrap_err()
                .code(),
            "frame_too_large"
        );
        assert_eq!(
            Envelope::parse(
                b"[[[[1]]]]",
                &Limits {
                    max_frame_bytes: 100,
                    max_depth: 3
                }
            )
            .unwrap_err()
            .code(),
            "nesting_too_deep"
        );
        assert_eq!(parse("{").unwrap_err().code(), "invalid_json");
        assert_eq!(parse("[1]").unwrap_err().code(), "not_an_object");
        assert_eq!(
            Envelope::parse(&[0xff, 0xfe], &Limits::default()).unwrap_err(),
            ParseError::InvalidUtf8
        );
        assert_eq!(
            parse(r#"{"protocol":"mew/v0.3","id":"a","from":"x","kind":"chat"}"#).unwrap_err(),
            ParseError::WrongProtocol {
                found: "mew/v0.3".into()
            }
        );
        assert_eq!(
            parse(r#"{"protocol":"mew/v0.4","from":"x","kind":"chat"}"#).unwrap_err(),
            ParseError::MissingField("id")
        );
        assert_eq!(
            parse(r#"{"protocol":"mew/v0.4","id":"a","from":"x","kind":"chat","to":"bob"}"#)
                .unwrap_err()
                .code(),
            "wrong_type"
        );
    }

    #[test]
    fn depth_scan_ignores_brackets_in_strings() {
        assert!(check_depth(br#"{"a":"[[[[[[[[[["}"#, 2).is_ok());
        assert!(check_depth(br#"{"a":"\"[[[[","b":[[1]]}"#, 3).is_ok());
        assert!(check_depth(br#"{"b":[[[1]]]}"#, 3).is_err());
    }

    const HEAD: &str = r#""protocol":"mew/v0.4","id":"a","from":"x","kind":"chat""#;

    fn with(extra: &str) -> Result<Envelope, ParseError> {
        parse(&format!("{{{HEAD},{extra}}}"))
    }

    fn view(s: &str) -> Result<crate::RoutingView<'_>, ParseError> {
        crate::RoutingView::parse(s.as_bytes(), &Limits::default())
    }

    #[test]
    fn every_variant_has_its_own_code_and_message() {
        let deep = format!(
            r#"{{{HEAD},"payload":{{"x":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let cases: Vec<(Result<Envelope, ParseError>, ParseError)> = vec![
            (
                Envelope::parse(
                    b"{}",
                    &Limits {
                        max_frame_bytes: 1,
                        ..Limits::default()
                    },
                ),
                ParseError::TooLarge { size: 2, max: 1 },
            ),
            (
                parse(&deep),
                ParseError::TooDeep {
                    max: SERDE_MAX_DEPTH,
                },
            ),
            (
                Envelope::parse(b"{\"id\":\"\xc3\x28\"}", &Limits::default()),
                ParseError::InvalidUtf8,
            ),
            (
                parse("   "),
                ParseError::InvalidJson {
                    line: 1,
                    column: 3,
                    message: "EOF while parsing a value at line 1 column 3".into(),
                },
            ),
            (parse("\"chat\""), ParseError::NotAnObject),
            (parse("null"), ParseError::NotAnObject),
            (
                parse(r#"{"protocol":"mew/v0.3","id":"a","from":"x","kind":"chat"}"#),
                ParseError::WrongProtocol {
                    found: "mew/v0.3".into(),
                },
            ),
            (
                parse(r#"{"id":"a","from":"x","kind":"chat"}"#),
                ParseError::MissingField("protocol"),
            ),
            (
                parse(r#"{"protocol":"mew/v0.4","id":"a","kind":"chat"}"#),
                ParseError::MissingField("from"),
            ),
            (
                parse(r#"{"protocol":"mew/v0.4","id":"a","from":"x"}"#),
                ParseError::MissingField("kind"),
            ),
            (
                parse(r#"{"protocol":"mew/v0.4","id":null,"from":"x","kind":"chat"}"#),
                ParseError::MissingField("id"),
            ),
            (
                with(r#""ts":5"#),
                ParseError::WrongType {
                    field: "ts",
                    expected: "a string",
                },
            ),
            (
                with(r#""context":{}"#),
                ParseError::WrongType {
                    field: "context",
                    expected: "a string",
                },
            ),
            (
                with(r#""to":["a",1]"#),
                ParseError::WrongType {
                    field: "to",
                    expected: "an array of participant id strings",
                },
            ),
            (
                with(r#""correlation_id":7"#),
                ParseError::WrongType {
                    field: "correlation_id",
                    expected: "a string or an array of strings",
                },
            ),
            (with(r#""payload":"text""#), PAYLOAD_NOT_OBJECT),
            (with(r#""payload":[{}]"#), PAYLOAD_NOT_OBJECT),
            (with(r#""id":"b""#), ParseError::DuplicateField("id")),
        ];
        let mut codes = std::collections::BTreeSet::new();
        for (got, want) in cases {
            let got = got.expect_err("must be refused");
            assert_eq!(got, want);
            assert!(!got.to_string().is_empty());
            codes.insert(got.code());
        }
        assert_eq!(codes.len(), 9, "one code per variant: {codes:?}");
    }

    #[test]
    fn view_reports_the_same_errors_leniently() {
        assert!(view(r#"{"kind":"chat"}"#).is_ok());
        assert_eq!(
            view(r#"{"kind":"chat","to":"bob"}"#).unwrap_err(),
            ParseError::WrongType {
                field: "to",
                expected: "an array of participant id strings",
            }
        );
        assert_eq!(
            view(r#"{"kind":"chat","from":1}"#).unwrap_err(),
            ParseError::WrongType {
                field: "from",
                expected: "a string",
            }
        );
        assert_eq!(
            view(r#"{"kind":"chat","kind":"chat"}"#).unwrap_err(),
            ParseError::DuplicateField("kind")
        );
        assert_eq!(view("[1]").unwrap_err(), ParseError::NotAnObject);
        // Deep nesting in a field the view never reads is still refused.
        let deep = format!(
            r#"{{"kind":"chat","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(
            view(&deep).unwrap_err(),
            ParseError::TooDeep {
                max: SERDE_MAX_DEPTH
            }
        );
    }

    #[test]
    fn depth_limit_is_exact_both_ways() {
        for (max, scanned) in [(SERDE_MAX_DEPTH, false), (5, true)] {
            let limits = Limits {
                max_depth: max,
                ..Limits::default()
            };
            // The payload object is level 2; `x` adds `max - 2` more levels.
            let nest = |n: usize| {
                format!(
                    r#"{{{HEAD},"payload":{{"x":{}1{}}}}}"#,
                    "[".repeat(n),
                    "]".repeat(n)
                )
            };
            let ok = nest(max - 2);
            let too_deep = nest(max - 1);
            assert!(
                Envelope::parse(ok.as_bytes(), &limits).is_ok(),
                "scanned={scanned}"
            );
            assert_eq!(
                Envelope::parse(too_deep.as_bytes(), &limits).unwrap_err(),
                ParseError::TooDeep { max }
            );
            assert!(crate::RoutingView::parse(ok.as_bytes(), &limits).is_ok());
            assert_eq!(
                crate::RoutingView::parse(too_deep.as_bytes(), &limits).unwrap_err(),
                ParseError::TooDeep { max }
            );
        }
        // Configured above serde_json's ceiling: the ceiling applies.
        let limits = Limits {
            max_depth: 1000,
            ..Limits::default()
        };
        assert_eq!(limits.effective_depth(), SERDE_MAX_DEPTH);
    }

    #[test]
    fn correlation_id_normalises_to_a_list() {
        assert_eq!(
            with(r#""correlation_id":"c1""#).unwrap().correlation_id,
            Some(vec!["c1".into()])
        );
        assert_eq!(
            with(r#""correlation_id":["c1","c2"]"#)
                .unwrap()
                .correlation_id,
            Some(vec!["c1".into(), "c2".into()])
        );
        assert_eq!(
            with(r#""correlation_id":null"#).unwrap().correlation_id,
            None
        );
        assert_eq!(
            with(r#""correlation_id":[]"#).unwrap().correlation_id,
            Some(vec![])
        );
        let e = with(r#""correlation_id":"c\"1""#).unwrap();
        assert_eq!(e.first_correlation(), Some("c\"1"));
        assert!(e.to_json().contains(r#""correlation_id":["c\"1"]"#));
        let text = format!(r#"{{{HEAD},"correlation_id":["c1","c2"]}}"#);
        let v = view(&text).unwrap();
        let ids = v.correlation_id.as_ref().unwrap();
        assert!(!ids.is_bare());
        assert_eq!(ids.iter().collect::<Vec<_>>(), ["c1", "c2"]);
    }

    #[test]
    fn openers_are_counted_exactly() {
        assert_eq!(count_openers(b""), 0);
        assert_eq!(count_openers(br#"{"a":[1,{"b":"[{"}]}"#), 5);
        // Neighbours of the two openers in the byte table do not count.
        assert_eq!(count_openers(b"[{;{{{]}KkZz"), 5);
        // Across the 255-byte chunks, and past what one chunk's u8 could hold.
        let many = "[".repeat(1000) + &"x".repeat(77) + &"{".repeat(300);
        assert_eq!(count_openers(many.as_bytes()), 1300);
    }

    #[test]
    fn serde_json_alone_does_not_bound_skipped_values() {
        // Why the view scans: serde_json skips unknown fields and raw values iteratively,
        // without its recursion limit, so a 200-deep payload would otherwise pass.
        #[derive(serde::Deserialize)]
        struct Skips<'a> {
            #[serde(borrow)]
            payload: &'a serde_json::value::RawValue,
        }
        let deep = format!(
            r#"{{"payload":{}{},"x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200),
            "{\"a\":".repeat(200),
            "}".repeat(200)
        );
        let skipped = serde_json::from_str::<Skips<'_>>(&deep).expect("no depth limit on skips");
        assert_eq!(skipped.payload.get().len(), 400);
        assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
        assert_eq!(
            crate::RoutingView::parse(
                deep.replace("\"payload\"", "\"kind\":\"chat\",\"payload\"")
                    .as_bytes(),
                &Limits::default()
            )
            .unwrap_err(),
            ParseError::TooDeep {
                max: SERDE_MAX_DEPTH
            }
        );
    }

    #[test]
    fn openers_inside_strings_only_trigger_the_exact_scan() {
        // Many brackets in a string exceed the opener bound, but the exact scan accepts.
        let text = format!(
            r#"{{"kind":"chat","payload":{{"t":"{}"}}}}"#,
            "[".repeat(500)
        );
        assert!(crate::RoutingView::parse(text.as_bytes(), &Limits::default()).is_ok());
    }

    #[test]
    fn string_skipping_survives_escapes_at_the_end() {
        assert!(check_depth(br#""\"#, 1).is_ok());
        assert!(check_depth(br#"["\\"]"#, 1).is_ok());
        assert!(check_depth(br#"["\\",[1]]"#, 1).is_err());
        assert!(check_depth(b"\"", 1).is_ok());
    }

    #[test]
    fn numbers_survive_a_round_trip() {
        // A long integer literal becomes a float; it must print back to the same float.
        let e = with(r#""payload":{"n":10485766666666666666666666666666666666666666666666666666666666666666666,"f":0.1,"g":-2.2250738585072014e-308}"#).unwrap();
        let again = parse(&e.to_json()).unwrap();
        assert_eq!(again, e);
    }
}
