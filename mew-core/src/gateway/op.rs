//! An accepted envelope being carried out by the gateway-owned operations (grants,
//! membership, pauses, streams).

use crate::envelope::RoutingView;
use serde_json::Value;

/// An accepted envelope being carried out.
pub(super) struct Op<'v, 'a> {
    pub(super) member: usize,
    pub(super) id: &'v str,
    pub(super) kind: &'v str,
    pub(super) to: Option<&'v [crate::envelope::Text<'a>]>,
    /// Already parsed when a capability pattern needed it.
    pub(super) payload: Option<&'v Value>,
    pub(super) view: &'v RoutingView<'a>,
}

impl Op<'_, '_> {
    /// The payload as a tree (parsed now if enforcement did not need it).
    pub(super) fn payload(&self) -> Value {
        match self.payload {
            Some(p) => p.clone(),
            None => self
                .view
                .payload_value()
                .unwrap_or_else(|| Value::Object(Default::default())),
        }
    }

    /// The `to` ids.
    pub(super) fn targets(&self) -> impl Iterator<Item = &str> {
        self.to.into_iter().flatten().map(|t| &**t)
    }
}
