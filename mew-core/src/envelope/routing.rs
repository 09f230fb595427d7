//! The gateway's routing view: the fields it needs, borrowed from the frame.

use super::Limits;
use super::parse::{
    PAYLOAD_NOT_OBJECT, ParseError, Strictness, diagnose, precheck, require_object,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use smallvec::SmallVec;
use std::borrow::Cow;

/// A string borrowed from the frame when it has no escapes, owned otherwise.
///
/// serde only borrows a `Cow` that is a struct field marked `borrow`; inside a sequence it
/// would always allocate, hence this newtype.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Text<'_> {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Text<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// `correlation_id` as sent: a bare string (reference clients) or a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorrelationIds<'a> {
    /// A single id sent as a bare string.
    One(Cow<'a, str>),
    /// The spec's form: a list of ids.
    Many(SmallVec<[Text<'a>; 2]>),
}

impl<'de: 'a, 'a> Deserialize<'de> for CorrelationIds<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A hand-written visitor: serde's untagged enums buffer the input and lose borrowing.
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = CorrelationIds<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(CorrelationIds::One(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CorrelationIds::One(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CorrelationIds::One(Cow::Owned(v)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = SmallVec::new();
                while let Some(t) = seq.next_element::<Text<'a>>()? {
                    out.push(t);
                }
                Ok(CorrelationIds::Many(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<'a> CorrelationIds<'a> {
    /// The ids in order, whichever form was sent.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many): (Option<&str>, &[Text<'a>]) = match self {
            CorrelationIds::One(s) => (Some(s.as_ref()), &[]),
            CorrelationIds::Many(v) => (None, v.as_slice()),
        };
        one.into_iter().chain(many.iter().map(|c| c.as_ref()))
    }

    /// The first id, if any.
    pub fn first(&self) -> Option<&str> {
        self.iter().next()
    }

    /// Whether the id was sent as a bare string (so the text needs normalising to forward).
    pub fn is_bare(&self) -> bool {
        matches!(self, CorrelationIds::One(_))
    }
}

/// A borrowed, partially parsed envelope: only what routing and enforcement read.
///
/// Fields the reference's clients may omit (`protocol`, `id`, `ts`, `from`) are optional
/// here; the gateway decides whether to fill them in or refuse. `payload` stays raw JSON
/// text, parsed only when a capability pattern needs to look inside it. `raw` is the whole
/// original frame, forwarded unchanged.
#[derive(Debug, Clone, Deserialize)]
pub struct RoutingView<'a> {
    /// Protocol string, if sent.
    #[serde(borrow, default)]
    pub protocol: Option<Text<'a>>,
    /// Envelope id, if sent.
    #[serde(borrow, default)]
    pub id: Option<Text<'a>>,
    /// Timestamp, if sent.
    #[serde(borrow, default)]
    pub ts: Option<Text<'a>>,
    /// Claimed sender, if sent.
    #[serde(borrow, default)]
    pub from: Option<Text<'a>>,
    /// Addressees; `None` or empty is a broadcast.
    #[serde(borrow, default)]
    pub to: Option<SmallVec<[Text<'a>; 4]>>,
    /// The kind's text.
    #[serde(borrow)]
    pub kind: Text<'a>,
    /// Related envelope ids.
    #[serde(borrow, default)]
    pub correlation_id: Option<CorrelationIds<'a>>,
    /// Sub-context, if sent.
    #[serde(borrow, default)]
    pub context: Option<Text<'a>>,
    /// The payload as unparsed JSON text.
    #[serde(borrow, default)]
    pub payload: Option<&'a RawValue>,
    /// The whole original frame.
    #[serde(skip)]
    pub raw: &'a str,
}

impl<'a> RoutingView<'a> {
    /// Parses the routing fields of `bytes` under `limits`, borrowing from them.
    pub fn parse(bytes: &'a [u8], limits: &Limits) -> Result<RoutingView<'a>, ParseError> {
        // Unknown fields and the raw payload are skipped without serde's recursion limit,
        // so the view always scans for depth.
        let text = precheck(bytes, limits, true)?;
        require_object(text, limits)?;
        let mut view: RoutingView<'a> = serde_json::from_str(text)
            .map_err(|e| diagnose(text, &e, limits, Strictness::Routing))?;
        if let Some(p) = &view.protocol
            && p != crate::PROTOCOL
        {
            return Err(ParseError::WrongProtocol {
                found: p.to_string(),
            });
        }
        if let Some(payload) = view.payload
            && !payload.get().starts_with('{')
            && payload.get() != "null"
        {
            return Err(PAYLOAD_NOT_OBJECT);
        }
        view.raw = text;
        Ok(view)
    }

    /// Whether `to` is absent or empty.
    pub fn is_broadcast(&self) -> bool {
        self.to.as_ref().is_none_or(|t| t.is_empty())
    }

    /// Parses the payload into a tree, for capability patterns that look inside it.
    /// An absent or `null` payload is `None`.
    pub fn payload_value(&self) -> Option<serde_json::Value> {
        let raw = self.payload?.get();
        if raw == "null" {
            return None;
        }
        // The text was already validated as JSON by the view's own parse.
        serde_json::from_str(raw).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrows_fields_and_keeps_raw() {
        let text = r#"{"protocol":"mew/v0.4","id":"e1","from":"a","to":["b","c"],"kind":"mcp/request","correlation_id":"p1","payload":{"method":"tools/list"},"extra":[1,2]}"#;
        let v = RoutingView::parse(text.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(v.id.as_deref(), Some("e1"));
        assert_eq!(v.kind, "mcp/request");
        assert_eq!(v.to.as_ref().unwrap().len(), 2);
        assert!(matches!(v.id, Some(Text(Cow::Borrowed(_)))));
        assert!(matches!(v.to.as_ref().unwrap()[0], Text(Cow::Borrowed(_))));
        assert_eq!(v.correlation_id.as_ref().unwrap().first(), Some("p1"));
        assert!(v.correlation_id.as_ref().unwrap().is_bare());
        assert_eq!(v.raw, text);
        assert_eq!(
            v.payload_value().unwrap()["method"],
            serde_json::json!("tools/list")
        );
    }

    #[test]
    fn lenient_on_reference_omissions_strict_on_kind() {
        let v = RoutingView::parse(
            br#"{"kind":"chat","payload":{"text":"x"}}"#,
            &Limits::default(),
        )
        .unwrap();
        assert!(v.from.is_none() && v.id.is_none() && v.is_broadcast());
        assert_eq!(
            RoutingView::parse(br#"{"payload":{}}"#, &Limits::default()).unwrap_err(),
            ParseError::MissingField("kind")
        );
        assert_eq!(
            RoutingView::parse(br#"{"kind":"chat","payload":[1]}"#, &Limits::default())
                .unwrap_err()
                .code(),
            "wrong_type"
        );
        assert_eq!(
            RoutingView::parse(br#""chat""#, &Limits::default()).unwrap_err(),
            ParseError::NotAnObject
        );
        assert_eq!(
            RoutingView::parse(
                br#"{"protocol":"mew/v0.2","kind":"chat"}"#,
                &Limits::default()
            )
            .unwrap_err()
            .code(),
            "wrong_protocol"
        );
    }
}
