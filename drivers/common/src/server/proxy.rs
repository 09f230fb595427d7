//! Who the client is behind a reverse proxy: `X-Forwarded-For` and `Forwarded` are believed
//! only from the networks of `gateway.trusted_proxies`, so a client cannot pick the address
//! its connections are counted (and logged) under.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::server::http::RequestHead;

/// The networks whose forwarding headers are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses CIDR networks or bare addresses (a bare address is a network of one).
    pub fn parse<S: AsRef<str>>(list: &[S]) -> Result<TrustedProxies, String> {
        list.iter()
            .map(|s| {
                let s = s.as_ref();
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("`{s}` is not an address or a network (CIDR)"))
            })
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }

    /// Whether none is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether connections from `addr` may say whom they forward.
    pub fn trusts(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        self.0.iter().any(|n| n.contains(&addr))
    }

    /// The client a request from the trusted proxy `peer` comes from: the nearest address
    /// of the forwarding chain that is not itself a trusted proxy (proxies append, so the
    /// right end is the one written by the proxy we trust). `Forwarded` is read before
    /// `X-Forwarded-For`; without either the proxy itself is the client.
    pub fn client_address(&self, peer: IpAddr, head: &RequestHead) -> IpAddr {
        let chain = forwarded_chain(head);
        let mut client = peer;
        for addr in chain.into_iter().rev() {
            client = addr;
            if !self.trusts(addr) {
                break;
            }
        }
        client
    }
}

/// An IPv4 address in IPv6 clothing (`::ffff:a.b.c.d`, as a dual-stack socket reports it)
/// is compared as the IPv4 address.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Every address of the forwarding headers, leftmost (the original client) first. Entries
/// that are not addresses (`unknown`, obfuscated names) end the chain there: nothing to
/// their left can be attributed.
fn forwarded_chain(head: &RequestHead) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let forwarded: Vec<&str> = headers(head, "forwarded");
    if !forwarded.is_empty() {
        for element in forwarded.iter().flat_map(|h| h.split(',')) {
            let node = element
                .split(';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("for"))
                .map(|(_, v)| v.trim().trim_matches('"'));
            match node.and_then(parse_node) {
                Some(a) => out.push(a),
                None => out.clear(),
            }
        }
        return out;
    }
    for entry in headers(head, "x-forwarded-for")
        .iter()
        .flat_map(|h| h.split(','))
    {
        match parse_node(entry.trim()) {
            Some(a) => out.push(a),
            None => out.clear(),
        }
    }
    out
}

fn headers<'a>(head: &'a RequestHead, name: &str) -> Vec<&'a str> {
    head.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]`, `[2001:db8::1]:443` or `2001:db8::1`.
fn parse_node(s: &str) -> Option<IpAddr> {
    if let Ok(a) = s.parse::<IpAddr>() {
        return Some(canonical(a));
    }
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Some(canonical(sa.ip()));
    }
    let inner = s.strip_prefix('[')?.split(']').next()?;
    inner.parse::<IpAddr>().ok().map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            method: "GET".into(),
            path: "/".into(),
            query: None,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            version: 1,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_nearest_untrusted_address_is_the_client() {
        let t = TrustedProxies::parse(&["10.0.0.0/8", "192.0.2.7"]).unwrap();
        assert!(t.trusts(ip("10.1.2.3")));
        assert!(t.trusts(ip("::ffff:10.1.2.3")));
        assert!(!t.trusts(ip("11.0.0.1")));
        let peer = ip("10.0.0.1");
        // The client put a fake address first; the proxy appended the real one.
        let h = head(&[("X-Forwarded-For", "6.6.6.6, 203.0.113.5, 192.0.2.7")]);
        assert_eq!(t.client_address(peer, &h), ip("203.0.113.5"));
        let h = head(&[(
            "Forwarded",
            "for=\"[2001:db8::1]:4711\", for=203.0.113.9;proto=https",
        )]);
        assert_eq!(t.client_address(peer, &h), ip("203.0.113.9"));
        // Forwarded wins over X-Forwarded-For.
        let h = head(&[
            ("x-forwarded-for", "198.51.100.1"),
            ("forwarded", "for=198.51.100.2"),
        ]);
        assert_eq!(t.client_address(peer, &h), ip("198.51.100.2"));
        // Without a header, the proxy is the client.
        assert_eq!(t.client_address(peer, &head(&[])), peer);
        // Two header lines are one list.
        let h = head(&[
            ("X-Forwarded-For", "198.51.100.3"),
            ("X-Forwarded-For", "10.9.9.9"),
        ]);
        assert_eq!(t.client_address(peer, &h), ip("198.51.100.3"));
    }

    #[test]
    fn bad_networks_are_named() {
        let e = TrustedProxies::parse(&["10.0.0.0/33"]).unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
        assert!(TrustedProxies::parse(&["::1", "fd00::/8"]).is_ok());
    }
}
