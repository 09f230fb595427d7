//! What a server offers: tools, resources and prompts, as discovered by the `*/list` calls.
//!
//! Definitions are kept exactly as the server sent them, so a bridge can serve them on
//! (`tools/list` answered from here) without losing fields newer revisions add.

use serde_json::{Map, Value};

/// The three listable things.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListKind {
    /// `tools/list`
    Tools,
    /// `resources/list`
    Resources,
    /// `prompts/list`
    Prompts,
}

impl ListKind {
    /// All kinds, in the order they are listed after the handshake.
    pub const ALL: [ListKind; 3] = [ListKind::Tools, ListKind::Resources, ListKind::Prompts];

    /// The list method.
    pub const fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Resources => "resources/list",
            ListKind::Prompts => "prompts/list",
        }
    }

    /// The member of the server's `capabilities` that offers this kind, and of the list
    /// result that holds the items.
    pub const fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Resources => "resources",
            ListKind::Prompts => "prompts",
        }
    }

    /// The notification announcing that the list changed.
    pub const fn changed_notification(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Resources => "notifications/resources/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
        }
    }

    /// The kind a `notifications/*/list_changed` method announces.
    pub fn from_changed_notification(method: &str) -> Option<ListKind> {
        Self::ALL
            .into_iter()
            .find(|k| k.changed_notification() == method)
    }

    /// The identifying member of each item (`name`, or `uri` for resources).
    const fn key(self) -> &'static str {
        match self {
            ListKind::Resources => "uri",
            ListKind::Tools | ListKind::Prompts => "name",
        }
    }
}

/// A tool the server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The tool's name (what `tools/call` takes).
    pub name: String,
    /// The full definition as listed (`description`, `inputSchema`, `outputSchema`, ...).
    pub definition: Map<String, Value>,
}

/// A resource the server lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// The resource's URI (what `resources/read` takes).
    pub uri: String,
    /// The full definition as listed.
    pub definition: Map<String, Value>,
}

/// A prompt the server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The prompt's name (what `prompts/get` takes).
    pub name: String,
    /// The full definition as listed.
    pub definition: Map<String, Value>,
}

/// Everything currently known to be offered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    /// Tools, in the server's order.
    pub tools: Vec<Tool>,
    /// Resources, in the server's order.
    pub resources: Vec<Resource>,
    /// Prompts, in the server's order.
    pub prompts: Vec<Prompt>,
}

impl Catalog {
    /// Replaces the list of `kind` with `items` (objects already checked to carry their key).
    pub(crate) fn replace(&mut self, kind: ListKind, items: Vec<(String, Map<String, Value>)>) {
        match kind {
            ListKind::Tools => {
                self.tools = items
                    .into_iter()
                    .map(|(name, definition)| Tool { name, definition })
                    .collect()
            }
            ListKind::Resources => {
                self.resources = items
                    .into_iter()
                    .map(|(uri, definition)| Resource { uri, definition })
                    .collect()
            }
            ListKind::Prompts => {
                self.prompts = items
                    .into_iter()
                    .map(|(name, definition)| Prompt { name, definition })
                    .collect()
            }
        }
    }

    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// What to do after a page arrived.
#[derive(Debug, PartialEq)]
pub(crate) enum PageOutcome {
    /// Ask for the next page with this cursor.
    Next(String),
    /// The list is complete.
    Done(Vec<(String, Map<String, Value>)>),
}

/// Accumulates the pages of one list pass, with bounds on items and pages so that a server
/// handing out cursors forever cannot hold the client in a loop.
#[derive(Debug)]
pub(crate) struct Pager {
    kind: ListKind,
    items: Vec<(String, Map<String, Value>)>,
    pages: usize,
    max_items: usize,
    max_pages: usize,
    /// Items dropped because they lack their key; a bridge could not address them anyway.
    skipped: usize,
}

impl Pager {
    pub(crate) fn new(kind: ListKind, max_items: usize, max_pages: usize) -> Self {
        Pager {
            kind,
            items: Vec::new(),
            pages: 0,
            max_items,
            max_pages,
            skipped: 0,
        }
    }

    /// Items dropped because they lacked their identifying member.
    #[cfg(test)]
    pub(crate) fn skipped(&self) -> usize {
        self.skipped
    }

    /// Takes one page's result.
    pub(crate) fn on_page(&mut self, result: Value) -> Result<PageOutcome, &'static str> {
        let Value::Object(mut obj) = result else {
            return Err("result is not an object");
        };
        let Some(Value::Array(items)) = obj.remove(self.kind.field()) else {
            return Err("result lacks its item array");
        };
        self.pages += 1;
        for item in items {
            if self.items.len() >= self.max_items {
                return Err("too many items");
            }
            let Value::Object(def) = item else {
                self.skipped += 1;
                continue;
            };
            match def.get(self.kind.key()) {
                Some(Value::String(k)) => {
                    let k = k.clone();
                    self.items.push((k, def));
                }
                _ => self.skipped += 1,
            }
        }
        match obj.remove("nextCursor") {
            Some(Value::String(c)) if !c.is_empty() => {
                if self.pages >= self.max_pages {
                    Err("too many pages")
                } else {
                    Ok(PageOutcome::Next(c))
                }
            }
            _ => Ok(PageOutcome::Done(std::mem::take(&mut self.items))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pages_accumulate_until_no_cursor() {
        let mut p = Pager::new(ListKind::Resources, 100, 10);
        assert_eq!(
            p.on_page(json!({"resources":[{"uri":"a://1"}],"nextCursor":"c1"})),
            Ok(PageOutcome::Next("c1".into()))
        );
        let Ok(PageOutcome::Done(items)) =
            p.on_page(json!({"resources":[{"uri":"a://2"},{"name":"no uri"},3],"nextCursor":""}))
        else {
            panic!()
        };
        let uris: Vec<_> = items.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(uris, ["a://1", "a://2"]);
        assert_eq!(p.skipped(), 2);
    }

    #[test]
    fn bounds_hold() {
        let mut p = Pager::new(ListKind::Tools, 100, 2);
        assert!(matches!(
            p.on_page(json!({"tools":[],"nextCursor":"x"})),
            Ok(PageOutcome::Next(_))
        ));
        assert_eq!(
            p.on_page(json!({"tools":[],"nextCursor":"x"})),
            Err("too many pages")
        );
        let mut p = Pager::new(ListKind::Tools, 1, 10);
        assert_eq!(
            p.on_page(json!({"tools":[{"name":"a"},{"name":"b"}]})),
            Err("too many items")
        );
        let mut p = Pager::new(ListKind::Prompts, 1, 10);
        assert!(p.on_page(json!([])).is_err());
        assert!(p.on_page(json!({"tools":[]})).is_err());
    }

    #[test]
    fn notifications_map_to_kinds() {
        for k in ListKind::ALL {
            assert_eq!(
                ListKind::from_changed_notification(k.changed_notification()),
                Some(k)
            );
        }
        assert_eq!(
            ListKind::from_changed_notification("notifications/message"),
            None
        );
    }
}
