//! Reading `space.yaml`: every key checked against what it may hold, every problem
//! reported with where it is (errors), and keys this implementation ignores named
//! (warnings), with the known key a misspelt one most likely meant.

use super::*;
use crate::capability::{Capability, CapabilitySet};
use serde_json::Value;
use serde_norway::Value as Yaml;

/// [`SpaceConfig::from_yaml`].
pub(super) fn from_yaml(text: &str) -> Result<SpaceConfig, ConfigErrors> {
    let root: Yaml = serde_norway::from_str(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            location: e
                .location()
                .map(|l| format!("line {} column {}", l.line(), l.column()))
                .unwrap_or_default(),
            message: format!("invalid YAML: {e}"),
        }])
    })?;
    let mut cx = Cx::default();
    let mut cfg = cx.space(&root);
    cfg.warnings = cx.warnings;
    if cx.errors.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigErrors(cx.errors))
    }
}

/// Keys of a participant entry this implementation reads (the reference's and mew-rs's).
const PARTICIPANT_KEYS: &[&str] = &[
    "type",
    "agent_config",
    "tokens",
    "token",
    "capabilities",
    "auto_start",
    "command",
    "args",
    "env",
    "output_log",
    "auto_connect",
    "mcp_server",
    "bridge_config",
    "restart_policy",
    "default_to",
    "fifo",
    "io",
    "person",
    "connections",
];

/// Top-level keys this implementation reads.
const TOP_KEYS: &[&str] = &[
    "space",
    "participants",
    "defaults",
    "logging",
    "gateway",
    "mew",
];

/// The known key `key` is most likely a misspelling of: at most two edits away, and not
/// shorter than 4 characters (so `id` is not taken for `io`).
fn near_miss(key: &str, known: &[&'static str]) -> Option<&'static str> {
    if key.len() < 4 {
        return None;
    }
    known
        .iter()
        .map(|k| (strsim::levenshtein(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

#[derive(Default)]
struct Cx {
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigWarning>,
}

fn type_name(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "null",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

impl Cx {
    /// Records every key of `m` not in `known` as ignored.
    fn unknown_keys(&mut self, m: &serde_norway::Mapping, known: &[&'static str], loc: &str) {
        for k in m.keys() {
            let key = match k {
                Yaml::String(s) => s.clone(),
                other => serde_norway::to_string(other)
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_default(),
            };
            if !known.contains(&key.as_str()) {
                self.warnings.push(ConfigWarning {
                    location: if loc.is_empty() {
                        key.clone()
                    } else {
                        format!("{loc}.{key}")
                    },
                    did_you_mean: near_miss(&key, known),
                });
            }
        }
    }

    fn err(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            location: location.into(),
            message: message.into(),
        });
    }

    fn map<'a>(&mut self, v: &'a Yaml, loc: &str) -> Option<&'a serde_norway::Mapping> {
        match v {
            Yaml::Mapping(m) => Some(m),
            Yaml::Null => None,
            other => {
                self.err(
                    loc,
                    format!("expected a mapping, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn string(&mut self, v: Option<&Yaml>, loc: &str) -> Option<String> {
        match v? {
            Yaml::String(s) => Some(s.clone()),
            Yaml::Number(n) => Some(n.to_string()),
            Yaml::Null => None,
            other => {
                self.err(
                    loc,
                    format!("expected a string, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn boolean(&mut self, v: Option<&Yaml>, loc: &str, default: bool) -> bool {
        match v {
            None | Some(Yaml::Null) => default,
            Some(Yaml::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    loc,
                    format!("expected true or false, found {}", type_name(other)),
                );
                default
            }
        }
    }

    fn uint(&mut self, v: Option<&Yaml>, loc: &str, default: u64, min: u64) -> u64 {
        match v {
            None | Some(Yaml::Null) => default,
            Some(Yaml::Number(n)) => match n.as_u64() {
                Some(x) if x >= min => x,
                _ => {
                    self.err(loc, format!("expected an integer >= {min}, found {n}"));
                    default
                }
            },
            Some(other) => {
                self.err(
                    loc,
                    format!("expected an integer, found {}", type_name(other)),
                );
                default
            }
        }
    }

    fn strings(&mut self, v: Option<&Yaml>, loc: &str) -> Vec<String> {
        match v {
            None | Some(Yaml::Null) => Vec::new(),
            Some(Yaml::Sequence(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, it)| self.string(Some(it), &format!("{loc}[{i}]")))
                .collect(),
            Some(other) => {
                self.err(loc, format!("expected a list, found {}", type_name(other)));
                Vec::new()
            }
        }
    }

    /// `headers` of an HTTP MCP server: `NAME: value`, `NAME: {env: VAR, prefix: P}` or
    /// `NAME: {file: PATH, prefix: P}`; a credential header may not hold a plain value.
    fn header_sources(&mut self, v: Option<&Yaml>, loc: &str) -> BTreeMap<String, HeaderSource> {
        let mut out = BTreeMap::new();
        let Some(v) = v else { return out };
        let Some(m) = self.map(v, loc) else {
            return out;
        };
        for (k, val) in m {
            let Some(name) = k.as_str() else {
                self.err(loc, "keys must be strings");
                continue;
            };
            let kl = format!("{loc}.{name}");
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            {
                self.err(kl, "not a valid header name");
                continue;
            }
            let source = match val {
                Yaml::Mapping(sm) => {
                    let sm = sm.clone();
                    let prefix = self
                        .string(sm.get("prefix"), &format!("{kl}.prefix"))
                        .unwrap_or_default();
                    if prefix.contains(['{', '}', '\r', '\n']) {
                        self.err(
                            format!("{kl}.prefix"),
                            "a prefix may not hold braces or line breaks",
                        );
                        continue;
                    }
                    let env = self.string(sm.get("env"), &format!("{kl}.env"));
                    let file = self.string(sm.get("file"), &format!("{kl}.file"));
                    match (env, file) {
                        (Some(var), None) if !var.is_empty() => HeaderSource::Env { var, prefix },
                        (None, Some(path)) if !path.is_empty() => {
                            HeaderSource::File { path, prefix }
                        }
                        _ => {
                            self.err(kl, "expected exactly one of env or file");
                            continue;
                        }
                    }
                }
                Yaml::String(s) => {
                    if HeaderSource::is_credential_header(name) {
                        self.err(
                            kl,
                            "a credential is not written in space.yaml: use {env: VAR} or {file: PATH}",
                        );
                        continue;
                    }
                    HeaderSource::Value(s.clone())
                }
                other => {
                    self.err(
                        kl,
                        format!("expected a string or a mapping, found {}", type_name(other)),
                    );
                    continue;
                }
            };
            out.insert(name.to_owned(), source);
        }
        out
    }

    fn string_map(&mut self, v: Option<&Yaml>, loc: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(v) = v else { return out };
        let Some(m) = self.map(v, loc) else {
            return out;
        };
        for (k, val) in m {
            let Some(key) = k.as_str() else {
                self.err(loc, "keys must be strings");
                continue;
            };
            let kl = format!("{loc}.{key}");
            match val {
                Yaml::String(s) => {
                    out.insert(key.to_owned(), s.clone());
                }
                Yaml::Number(n) => {
                    out.insert(key.to_owned(), n.to_string());
                }
                Yaml::Bool(b) => {
                    out.insert(key.to_owned(), b.to_string());
                }
                other => self.err(kl, format!("expected a string, found {}", type_name(other))),
            }
        }
        out
    }

    fn capabilities(&mut self, v: &Yaml, loc: &str) -> CapabilitySet {
        let Yaml::Sequence(items) = v else {
            self.err(loc, format!("expected a list, found {}", type_name(v)));
            return CapabilitySet::default();
        };
        let mut set = CapabilitySet::default();
        for (i, item) in items.iter().enumerate() {
            let l = format!("{loc}[{i}]");
            let json = match item {
                // A bare string is shorthand for `{kind: <string>}`.
                Yaml::String(s) => serde_json::json!({ "kind": s }),
                other => match serde_json::to_value(other) {
                    Ok(j) => j,
                    Err(e) => {
                        self.err(l, format!("invalid capability: {e}"));
                        continue;
                    }
                },
            };
            match Capability::compile(json) {
                Ok(c) => set.push(c),
                Err(e) => self.err(l, format!("invalid capability: {}", e.reason)),
            }
        }
        set
    }

    fn space(&mut self, root: &Yaml) -> SpaceConfig {
        let mut cfg = SpaceConfig {
            id: String::new(),
            name: None,
            description: None,
            participants: Vec::new(),
            default_capabilities: CapabilitySet::default(),
            logging: LoggingConfig::default(),
            gateway: GatewayOptions::default(),
            warnings: Vec::new(),
        };
        let Some(top) = self.map(root, "") else {
            self.err("", "the configuration is empty");
            return cfg;
        };
        self.unknown_keys(top, TOP_KEYS, "");
        match top.get("space") {
            Some(Yaml::String(s)) => cfg.id = s.clone(),
            Some(v) => {
                if let Some(m) = self.map(v, "space") {
                    cfg.id = self.string(m.get("id"), "space.id").unwrap_or_default();
                    cfg.name = self.string(m.get("name"), "space.name");
                    cfg.description = self.string(m.get("description"), "space.description");
                }
            }
            None => {}
        }
        if cfg.id.is_empty() {
            match &cfg.name {
                Some(n) => cfg.id = n.clone(),
                None => self.err("space.id", "missing: every space needs an id"),
            }
        }
        if let Some(d) = top.get("defaults")
            && let Some(m) = self.map(d, "defaults")
            && let Some(c) = m.get("capabilities")
        {
            cfg.default_capabilities = self.capabilities(c, "defaults.capabilities");
        }
        if let Some(l) = top.get("logging") {
            cfg.logging = self.logging(l);
        }
        let opts = match (top.get("gateway"), top.get("mew")) {
            (Some(g), _) => Some((g, "gateway")),
            (None, Some(m)) => Some((m, "mew")),
            _ => None,
        };
        if let Some((v, loc)) = opts {
            cfg.gateway = self.options(v, loc);
        }
        if let Some(p) = top.get("participants")
            && let Some(m) = self.map(p, "participants")
        {
            for (k, v) in m {
                let Some(id) = k.as_str() else {
                    self.err("participants", "participant ids must be strings");
                    continue;
                };
                if let Err(e) = crate::participant_id::check(id) {
                    let loc = if id.len() > crate::participant_id::MAX_BYTES {
                        format!("participants.{}...", cut(id, 32).escape_debug())
                    } else {
                        format!("participants.{}", id.escape_debug())
                    };
                    self.err(&loc, format!("invalid participant id: {e}"));
                    continue;
                }
                if let Some(other) = cfg
                    .participants
                    .iter()
                    .find(|p| crate::participant_id::confusable(&p.id, id))
                {
                    self.err(
                        format!("participants.{id}"),
                        format!(
                            "looks like participant `{}` (the same confusable skeleton, Unicode TR39): rename one",
                            other.id
                        ),
                    );
                    continue;
                }
                let loc = format!("participants.{id}");
                let p = self.participant(id, v, &loc, &cfg.default_capabilities);
                cfg.participants.push(p);
            }
        }
        // Tokens must identify exactly one participant.
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        let mut dups = Vec::new();
        for p in &cfg.participants {
            for (i, t) in p.tokens.iter().enumerate() {
                if let Some(first) = seen.insert(t, &p.id)
                    && first != p.id
                {
                    dups.push((
                        format!("participants.{}.tokens[{i}]", p.id),
                        format!("duplicate token: already used by participant `{first}`"),
                    ));
                }
            }
        }
        for (l, m) in dups {
            self.err(l, m);
        }
        cfg
    }

    fn participant(
        &mut self,
        id: &str,
        v: &Yaml,
        loc: &str,
        defaults: &CapabilitySet,
    ) -> ParticipantEntry {
        let mut p = ParticipantEntry::new(id, Vec::new(), defaults.clone());
        p.explicit_capabilities = false;
        let Some(m) = self.map(v, loc) else {
            return p;
        };
        let m = m.clone();
        self.unknown_keys(&m, PARTICIPANT_KEYS, loc);
        let get = |k: &str| m.get(k);
        match self.string(get("type"), &format!("{loc}.type")).as_deref() {
            None | Some("standard") => {}
            Some("mcp-bridge") => p.kind = ParticipantType::McpBridge,
            Some("local") => p.kind = ParticipantType::Local,
            Some("agent") => p.kind = ParticipantType::Agent,
            Some(other) => self.err(
                format!("{loc}.type"),
                format!("unknown participant type `{other}` (known: agent, local, mcp-bridge)"),
            ),
        }
        p.tokens = self.strings(get("tokens"), &format!("{loc}.tokens"));
        if let Some(t) = self.string(get("token"), &format!("{loc}.token")) {
            p.tokens.push(t);
        }
        if let Some(c) = get("capabilities") {
            p.capabilities = self.capabilities(c, &format!("{loc}.capabilities"));
            p.explicit_capabilities = true;
        }
        p.auto_start = self.boolean(get("auto_start"), &format!("{loc}.auto_start"), false);
        p.command = self.string(get("command"), &format!("{loc}.command"));
        p.args = self.strings(get("args"), &format!("{loc}.args"));
        p.env = self.string_map(get("env"), &format!("{loc}.env"));
        p.output_log = self.string(get("output_log"), &format!("{loc}.output_log"));
        p.auto_connect = self.boolean(get("auto_connect"), &format!("{loc}.auto_connect"), false);
        p.fifo = self.boolean(get("fifo"), &format!("{loc}.fifo"), false);
        p.io = self.string(get("io"), &format!("{loc}.io"));
        p.agent_config = self.string(get("agent_config"), &format!("{loc}.agent_config"));
        p.person = self.boolean(get("person"), &format!("{loc}.person"), false);
        if let Some(v) = get("connections") {
            let l = format!("{loc}.connections");
            let n = self.uint(Some(v), &l, 1, 1);
            if n > u64::from(super::MAX_CONNECTIONS) {
                self.err(
                    l,
                    format!(
                        "at most {} connections per participant",
                        super::MAX_CONNECTIONS
                    ),
                );
            } else {
                p.connections = Some(n as u8);
            }
        }
        p.default_to = match get("default_to") {
            Some(Yaml::String(s)) => vec![s.clone()],
            other => self.strings(other, &format!("{loc}.default_to")),
        };
        match self
            .string(get("restart_policy"), &format!("{loc}.restart_policy"))
            .as_deref()
        {
            None | Some("no") | Some("never") => {}
            Some("on-failure") => p.restart_policy = RestartPolicy::OnFailure,
            Some("always") => p.restart_policy = RestartPolicy::Always,
            Some(other) => self.err(
                format!("{loc}.restart_policy"),
                format!("unknown restart policy `{other}` (known: no, on-failure, always)"),
            ),
        }
        if p.auto_start
            && p.command.is_none()
            && !matches!(p.kind, ParticipantType::McpBridge | ParticipantType::Agent)
        {
            self.err(format!("{loc}.command"), "auto_start needs a command");
        }
        if let Some(s) = get("mcp_server") {
            let l = format!("{loc}.mcp_server");
            if let Some(sm) = self.map(s, &l) {
                let sm = sm.clone();
                let command = self.string(sm.get("command"), &format!("{l}.command"));
                let url = self.string(sm.get("url"), &format!("{l}.url"));
                match (&command, &url) {
                    (None, None) => self.err(
                        format!("{l}.command"),
                        "missing: an MCP server needs a command or a url",
                    ),
                    (Some(_), Some(_)) => self.err(
                        format!("{l}.url"),
                        "an MCP server has a command or a url, not both",
                    ),
                    _ => {}
                }
                if let Some(u) = &url
                    && !(u.starts_with("http://") || u.starts_with("https://"))
                {
                    self.err(format!("{l}.url"), "expected an http:// or https:// URL");
                }
                let headers = self.header_sources(sm.get("headers"), &format!("{l}.headers"));
                if url.is_none() && !headers.is_empty() {
                    self.err(format!("{l}.headers"), "headers go with a url");
                }
                let mut oauth = McpOAuthSettings::default();
                match sm.get("oauth") {
                    None => {}
                    Some(Yaml::Bool(b)) => oauth.enabled = *b,
                    Some(o) => {
                        let ol = format!("{l}.oauth");
                        if let Some(om) = self.map(o, &ol) {
                            let om = om.clone();
                            oauth.client_file =
                                self.string(om.get("client_file"), &format!("{ol}.client_file"));
                            oauth.client_metadata_url = self.string(
                                om.get("client_metadata_url"),
                                &format!("{ol}.client_metadata_url"),
                            );
                            for k in ["client_id", "client_secret"] {
                                if om.contains_key(k) {
                                    self.err(
                                        format!("{ol}.{k}"),
                                        "a client's credentials go in the file client_file names, not in space.yaml",
                                    );
                                }
                            }
                        }
                    }
                }
                if url.is_none() && sm.contains_key("oauth") {
                    self.err(format!("{l}.oauth"), "oauth goes with a url");
                }
                p.mcp_server = Some(McpServerConfig {
                    oauth,
                    command: command.unwrap_or_default(),
                    url,
                    headers,
                    args: self.strings(sm.get("args"), &format!("{l}.args")),
                    env: self.string_map(sm.get("env"), &format!("{l}.env")),
                    cwd: self.string(sm.get("cwd"), &format!("{l}.cwd")),
                });
            }
        } else if p.kind == ParticipantType::McpBridge {
            self.err(
                format!("{loc}.mcp_server"),
                "missing: an mcp-bridge participant needs mcp_server",
            );
        }
        if let Some(b) = get("bridge_config") {
            let l = format!("{loc}.bridge_config");
            if let Some(bm) = self.map(b, &l) {
                let bm = bm.clone();
                let d = BridgeSettings::default();
                p.bridge_config = Some(BridgeSettings {
                    init_timeout_ms: self.uint(
                        bm.get("init_timeout"),
                        &format!("{l}.init_timeout"),
                        d.init_timeout_ms,
                        1,
                    ),
                    reconnect: self.boolean(
                        bm.get("reconnect"),
                        &format!("{l}.reconnect"),
                        d.reconnect,
                    ),
                    max_reconnects: self
                        .uint(
                            bm.get("max_reconnects"),
                            &format!("{l}.max_reconnects"),
                            u64::from(d.max_reconnects),
                            0,
                        )
                        .min(u64::from(u32::MAX)) as u32,
                    sampling_answered_by: bm.get("sampling").and_then(|sv| {
                        let sl = format!("{l}.sampling");
                        let sm = self.map(sv, &sl)?.clone();
                        self.string(sm.get("answered_by"), &format!("{sl}.answered_by"))
                    }),
                    roots: self.strings(bm.get("roots"), &format!("{l}.roots")),
                    protocol_version: {
                        let pl = format!("{l}.protocol_version");
                        let v = self.string(bm.get("protocol_version"), &pl);
                        if let Some(v) = &v
                            && crate::mcp::ProtocolVersion::parse(v).is_none()
                        {
                            self.err(pl, format!("unknown MCP revision `{v}`"));
                        }
                        v
                    },
                });
            }
        }
        p
    }

    fn logging(&mut self, v: &Yaml) -> LoggingConfig {
        let mut l = LoggingConfig::default();
        match v {
            Yaml::Bool(b) => {
                l.enabled = *b;
                return l;
            }
            _ => {
                let Some(m) = self.map(v, "logging") else {
                    return l;
                };
                let m = m.clone();
                l.enabled = self.boolean(m.get("enabled"), "logging.enabled", true);
                l.envelope_history =
                    self.boolean(m.get("envelope_history"), "logging.envelope_history", true);
                l.capability_decisions = self.boolean(
                    m.get("capability_decisions"),
                    "logging.capability_decisions",
                    true,
                );
                // Kilobytes are accepted too, for small test spaces.
                let d = LoggingConfig::default();
                if m.contains_key("max_file_kb") {
                    l.max_file_bytes =
                        self.uint(m.get("max_file_kb"), "logging.max_file_kb", 0, 1) * 1024;
                } else {
                    l.max_file_bytes = self.uint(
                        m.get("max_file_mb"),
                        "logging.max_file_mb",
                        d.max_file_bytes / (1024 * 1024),
                        1,
                    ) * 1024
                        * 1024;
                }
                l.keep_files = self
                    .uint(
                        m.get("max_files"),
                        "logging.max_files",
                        u64::from(d.keep_files),
                        0,
                    )
                    .min(1000) as u32;
            }
        }
        l
    }

    fn options(&mut self, v: &Yaml, loc: &str) -> GatewayOptions {
        let mut o = GatewayOptions::default();
        let Some(m) = self.map(v, loc) else {
            return o;
        };
        let m = m.clone();
        let l = |k: &str| format!("{loc}.{k}");
        o.anonymous_joins = self.boolean(m.get("anonymous_joins"), &l("anonymous_joins"), false);
        match m.get("rate_limit") {
            None => {}
            Some(Yaml::Bool(false)) | Some(Yaml::Null) => o.rate_limit = None,
            Some(Yaml::String(s)) if s == "off" => o.rate_limit = None,
            Some(v) => {
                let loc = l("rate_limit");
                if let Some(rm) = self.map(v, &loc) {
                    let rm = rm.clone();
                    let d = super::super::rate::RateLimit::default();
                    let mut num = |k: &str, default: u64| {
                        self.uint(rm.get(k), &format!("{loc}.{k}"), default, 1)
                    };
                    o.rate_limit = Some(super::super::rate::RateLimit {
                        per_second: num("per_second", d.per_second),
                        burst: num("burst", d.burst),
                        bytes_per_second: num("bytes_per_second", d.bytes_per_second),
                        burst_bytes: num("burst_bytes", d.burst_bytes),
                    });
                }
            }
        }
        match m.get("durability") {
            None => {}
            Some(Yaml::Bool(false)) | Some(Yaml::Null) => o.durability = None,
            Some(Yaml::String(s)) if s == "off" => o.durability = None,
            Some(v) => {
                let loc = l("durability");
                if let Some(dm) = self.map(v, &loc) {
                    let dm = dm.clone();
                    let floc = format!("{loc}.fsync");
                    match dm.get("fsync") {
                        None => {}
                        Some(Yaml::String(s)) if s == "always" => {
                            o.durability = Some(Fsync::Always)
                        }
                        Some(Yaml::Mapping(fm)) if fm.contains_key("every_ms") => {
                            let ms =
                                self.uint(fm.get("every_ms"), &format!("{floc}.every_ms"), 100, 1);
                            o.durability = Some(Fsync::EveryMs(ms));
                        }
                        Some(_) => {
                            self.err(floc, "expected `always` or `{every_ms: N}`".to_owned())
                        }
                    }
                }
            }
        }
        match self.string(m.get("delivery"), &l("delivery")).as_deref() {
            None | Some("all") => {}
            Some("addressed") => o.delivery = DeliveryMode::Addressed,
            Some(other) => self.err(
                l("delivery"),
                format!("unknown delivery mode `{other}` (known: all, addressed)"),
            ),
        }
        let d = GatewayOptions::default();
        // A count of things, at least `min`.
        let count = |cx: &mut Cx, k: &str, d: usize, min: u64| {
            cx.uint(m.get(k), &l(k), d as u64, min) as usize
        };
        o.limits.max_frame_bytes = count(self, "max_frame_bytes", d.limits.max_frame_bytes, 64);
        o.limits.max_depth =
            count(self, "max_depth", d.limits.max_depth, 2).min(crate::envelope::SERDE_MAX_DEPTH);
        let ms = |cx: &mut Cx, k: &str, d: Duration| {
            Duration::from_millis(cx.uint(m.get(k), &l(k), d.as_millis() as u64, 1))
        };
        o.join_timeout = ms(self, "join_timeout_ms", d.join_timeout);
        o.heartbeat_interval = ms(self, "heartbeat_interval_ms", d.heartbeat_interval);
        o.idle_timeout = ms(self, "idle_timeout_ms", d.idle_timeout);
        o.max_queue_frames = count(self, "max_queue_frames", d.max_queue_frames, 1);
        o.max_queue_bytes = count(self, "max_queue_bytes", d.max_queue_bytes, 1);
        o.history_size = count(self, "history_size", d.history_size, 0);
        o.history_bytes = count(self, "history_bytes", d.history_bytes, 0);
        o.max_streams = count(self, "max_streams", d.max_streams, 0);
        o.max_participants = count(self, "max_participants", d.max_participants, 1);
        o.max_grants_per_participant = count(
            self,
            "max_grants_per_participant",
            d.max_grants_per_participant,
            0,
        );
        if let Some(v) = m.get("crowd")
            && let Some(cm) = self.map(v, &l("crowd"))
        {
            let cm = cm.clone();
            self.unknown_keys(&cm, &["size", "batch_ms", "batch_max"], &l("crowd"));
            let d = Crowd::default();
            let mut num = |k: &str, default: u64| {
                self.uint(cm.get(k), &format!("{loc}.crowd.{k}"), default, 1)
            };
            o.crowd = Crowd {
                size: num("size", d.size as u64) as usize,
                batch: Duration::from_millis(num("batch_ms", d.batch.as_millis() as u64)),
                batch_max: num("batch_max", d.batch_max as u64) as usize,
            };
        }
        if let Some(t) = m.get("tls") {
            o.tls = self.tls(t, &l("tls"));
        }
        if let Some(v) = m.get("limits")
            && let Some(lm) = self.map(v, &l("limits"))
        {
            let lm = lm.clone();
            let d = ConnectionLimits::default();
            let mut num = |k: &str, default: usize| {
                self.uint(lm.get(k), &format!("{loc}.limits.{k}"), default as u64, 1) as usize
            };
            o.connections = ConnectionLimits {
                max_connections: num("max_connections", d.max_connections),
                max_connections_per_address: num(
                    "max_connections_per_address",
                    d.max_connections_per_address,
                ),
                max_unauthenticated: num("max_unauthenticated", d.max_unauthenticated),
            };
        }
        let proxies = self.strings(m.get("trusted_proxies"), &l("trusted_proxies"));
        for (i, p) in proxies.iter().enumerate() {
            if !valid_cidr(p) {
                self.err(
                    format!("{loc}.trusted_proxies[{i}]"),
                    format!("`{p}` is not an address or a network (CIDR, e.g. 10.0.0.0/8)"),
                );
            }
        }
        o.trusted_proxies = proxies;
        if let Some(a) = m.get("auth")
            && let Some(am) = self.map(a, &l("auth"))
            && let Some(j) = am.get("jwt")
        {
            let am = am.clone();
            self.unknown_keys(&am, &["jwt"], &l("auth"));
            o.jwt = self.jwt(j, &format!("{loc}.auth.jwt"));
        }
        if let Some(v) = m.get("mcp")
            && let Some(mm) = self.map(v, &l("mcp"))
        {
            let mm = mm.clone();
            let known = [
                "loopback_as",
                "proposal_timeout_ms",
                "max_sessions",
                "idle_timeout_ms",
            ];
            self.unknown_keys(&mm, &known, &l("mcp"));
            let d = McpEndpoint::default();
            o.mcp.loopback_as =
                self.string(mm.get("loopback_as"), &format!("{loc}.mcp.loopback_as"));
            let mut num =
                |k: &str, default: u64| self.uint(mm.get(k), &format!("{loc}.mcp.{k}"), default, 1);
            o.mcp.proposal_timeout = Duration::from_millis(num(
                "proposal_timeout_ms",
                d.proposal_timeout.as_millis() as u64,
            ));
            o.mcp.max_sessions = num("max_sessions", d.max_sessions as u64) as usize;
            o.mcp.idle_timeout =
                Duration::from_millis(num("idle_timeout_ms", d.idle_timeout.as_millis() as u64));
        }
        o
    }

    fn tls(&mut self, v: &Yaml, loc: &str) -> Option<TlsConfig> {
        let m = self.map(v, loc)?.clone();
        self.unknown_keys(&m, &["cert", "key"], loc);
        let cert = self.string(m.get("cert"), &format!("{loc}.cert"));
        let key = self.string(m.get("key"), &format!("{loc}.key"));
        match (cert, key) {
            (Some(cert), Some(key)) => Some(TlsConfig { cert, key }),
            _ => {
                self.err(loc, "TLS needs both `cert` and `key` (PEM files)");
                None
            }
        }
    }

    fn jwt(&mut self, v: &Yaml, loc: &str) -> Option<JwtConfig> {
        let m = self.map(v, loc)?.clone();
        self.unknown_keys(
            &m,
            &[
                "issuer",
                "audience",
                "jwks_file",
                "jwks_url",
                "allow_unknown_subjects",
            ],
            loc,
        );
        let issuer = self.string(m.get("issuer"), &format!("{loc}.issuer"));
        let audience = self.string(m.get("audience"), &format!("{loc}.audience"));
        let jwks_file = self.string(m.get("jwks_file"), &format!("{loc}.jwks_file"));
        let jwks_url = self.string(m.get("jwks_url"), &format!("{loc}.jwks_url"));
        let allow_unknown_subjects = self.boolean(
            m.get("allow_unknown_subjects"),
            &format!("{loc}.allow_unknown_subjects"),
            false,
        );
        if issuer.is_none() {
            self.err(
                format!("{loc}.issuer"),
                "missing: the issuer tokens must name",
            );
        }
        if audience.is_none() {
            self.err(
                format!("{loc}.audience"),
                "missing: the audience tokens must name",
            );
        }
        if jwks_file.is_none() == jwks_url.is_none() {
            self.err(loc, "exactly one of `jwks_file` and `jwks_url` is needed");
        }
        Some(JwtConfig {
            issuer: issuer?,
            audience: audience?,
            jwks_file,
            jwks_url,
            allow_unknown_subjects,
        })
    }
}

/// Whether `s` is an IP address or an IP network in CIDR form.
fn valid_cidr(s: &str) -> bool {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    prefix.is_none_or(|p| p.parse::<u8>().is_ok_and(|n| n <= max))
}

/// Converts a capability list given as JSON (a grant's or an invite's payload) into a set,
/// naming the first bad entry.
pub(crate) fn compile_json_caps(v: Option<&Value>) -> Result<CapabilitySet, String> {
    let Some(Value::Array(items)) = v else {
        return Err("`capabilities` must be a list of capability objects".into());
    };
    CapabilitySet::compile(items).map_err(|e| e.to_string())
}

/// The first `max` bytes of `s` at most, cut on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
