//! MCP protocol revisions this client and server speak.
//!
//! Two families: the session revisions (up to 2025-11-25), negotiated once through the
//! `initialize` handshake, and the stateless revision 2026-07-28, where every request carries
//! the revision in `_meta` and `server/discover` tells what a server speaks.

use std::fmt;

/// A dated MCP protocol revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// `2024-11-05`
    V2024_11_05,
    /// `2025-03-26`
    V2025_03_26,
    /// `2025-06-18`
    V2025_06_18,
    /// `2025-11-25`
    V2025_11_25,
    /// `2026-07-28`: stateless, no `initialize`.
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every revision known, oldest first.
    pub const ALL: [ProtocolVersion; 5] = [
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2026_07_28,
    ];

    /// The revisions negotiated through `initialize`, oldest first.
    pub const SESSION: [ProtocolVersion; 4] = [
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
    ];

    /// The newest session revision: what `initialize` offers by default, and what the server
    /// side answers to a version it does not know.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The newest revision of all.
    pub const NEWEST: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// The revision's wire text.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether the revision is stateless (no `initialize`; `_meta` on every request).
    pub const fn is_stateless(self) -> bool {
        matches!(self, ProtocolVersion::V2026_07_28)
    }

    /// Parses wire text; `None` for revisions not known here.
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Parses wire text of a session revision (one `initialize` may name).
    pub fn parse_session(s: &str) -> Option<ProtocolVersion> {
        Self::parse(s).filter(|v| !v.is_stateless())
    }

    /// The newest revision in `offered` (wire texts) that is known here and not newer than
    /// `newest`.
    pub fn newest_shared<'a>(
        offered: impl IntoIterator<Item = &'a str>,
        newest: ProtocolVersion,
    ) -> Option<ProtocolVersion> {
        offered
            .into_iter()
            .filter_map(ProtocolVersion::parse)
            .filter(|v| *v <= newest)
            .max()
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_unknown() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(v));
        }
        assert_eq!(
            ProtocolVersion::parse("2026-07-28"),
            Some(ProtocolVersion::V2026_07_28)
        );
        assert_eq!(ProtocolVersion::parse_session("2026-07-28"), None);
        assert_eq!(
            ProtocolVersion::parse_session("2025-06-18"),
            Some(ProtocolVersion::V2025_06_18)
        );
        assert_eq!(ProtocolVersion::parse("2099-01-01"), None);
        assert_eq!(ProtocolVersion::parse(""), None);
        assert!(ProtocolVersion::ALL.windows(2).all(|w| w[0] < w[1]));
        assert!(ProtocolVersion::SESSION.iter().all(|v| !v.is_stateless()));
        assert!(ProtocolVersion::NEWEST.is_stateless());
    }

    #[test]
    fn newest_shared_picks_the_newest_known_not_above_the_cap() {
        let offered = ["2025-06-18", "2026-07-28", "2099-01-01", "2025-11-25"];
        assert_eq!(
            ProtocolVersion::newest_shared(offered, ProtocolVersion::NEWEST),
            Some(ProtocolVersion::V2026_07_28)
        );
        assert_eq!(
            ProtocolVersion::newest_shared(offered, ProtocolVersion::V2025_11_25),
            Some(ProtocolVersion::V2025_11_25)
        );
        assert_eq!(
            ProtocolVersion::newest_shared(["2099-01-01"], ProtocolVersion::NEWEST),
            None
        );
    }
}
