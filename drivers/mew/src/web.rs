//! The space's web page (`drivers/mew/web/`), embedded in the program: the gateway serves it
//! under `/ui/` (see `mew_driver_common::server::ui` for the headers and the policy) and `mew space
//! up` / `mew space connect --web` print its link for the space's human.

use mew_driver_common::server::ui::Asset;

/// Every file of the page, by its path under `/ui/`.
pub static ASSETS: &[Asset] = &[
    Asset {
        path: "index.html",
        body: include_bytes!("../web/index.html"),
    },
    Asset {
        path: "app.js",
        body: include_bytes!("../web/app.js"),
    },
    Asset {
        path: "model.js",
        body: include_bytes!("../web/model.js"),
    },
    Asset {
        path: "style.css",
        body: include_bytes!("../web/style.css"),
    },
    Asset {
        path: "icon.svg",
        body: include_bytes!("../web/icon.svg"),
    },
];

/// The page's address for a participant: the token rides in the fragment, which a browser
/// never sends to a server (so no log holds it) and the page moves to session storage at once.
pub fn link(http_base: &str, space: &str, token: Option<&str>) -> String {
    let base = http_base.trim_end_matches('/');
    let space = encode(space);
    match token {
        Some(t) => format!("{base}/ui/?space={space}#token={}", encode(t)),
        None => format!("{base}/ui/?space={space}"),
    }
}

/// Percent-encodes everything but unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_carry_the_token_in_the_fragment() {
        assert_eq!(
            link("http://127.0.0.1:8080", "my space", Some("t+k/=")),
            "http://127.0.0.1:8080/ui/?space=my%20space#token=t%2Bk%2F%3D"
        );
        assert_eq!(link("http://h:1/", "s", None), "http://h:1/ui/?space=s");
    }

    #[test]
    fn every_file_the_page_names_is_embedded() {
        let index = std::str::from_utf8(ASSETS[0].body).unwrap();
        for name in ["app.js", "style.css", "icon.svg"] {
            assert!(index.contains(name), "{name}");
            assert!(ASSETS.iter().any(|a| a.path == name), "{name}");
        }
        let app = std::str::from_utf8(ASSETS[1].body).unwrap();
        assert!(app.contains("\"./model.js\""));
    }
}
