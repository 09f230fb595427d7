//! What every simulated world shares besides its clock: the seed (from `MEW_SIM_SEED` or
//! the test), its printing when a test panics, and the trace hash of the history.

/// The seed `MEW_SIM_SEED` names, else `default`.
pub fn seed_or(default: u64) -> u64 {
    env_seed().unwrap_or(default)
}

/// The seeds a test loops over: the one `MEW_SIM_SEED` names alone, else `seeds`.
pub fn seeds(seeds: std::ops::Range<u64>) -> Vec<u64> {
    match env_seed() {
        Some(s) => vec![s],
        None => seeds.collect(),
    }
}

fn env_seed() -> Option<u64> {
    std::env::var("MEW_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// A world's seed, printed with how to replay it when the world is dropped by a panic.
#[derive(Debug, PartialEq, Eq)]
pub struct Seed(pub u64);

impl Drop for Seed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "simulation seed: {} (replay with MEW_SIM_SEED={})",
                self.0, self.0
            );
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// A hash (FNV-1a) of a history: two runs with equal traces saw the same history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trace(u64);

impl Default for Trace {
    fn default() -> Trace {
        Trace(FNV_OFFSET)
    }
}

impl Trace {
    /// The hash so far.
    pub fn hash(&self) -> u64 {
        self.0
    }

    /// Adds `bytes`.
    pub fn record(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
    }

    /// Adds one event of the history: when, what (`tag`), where (`at`, a connection or a
    /// position), and its bytes.
    pub fn event(&mut self, now: mew_core::Time, tag: u8, at: u64, bytes: &[u8]) {
        self.record(&now.as_unix_millis().to_le_bytes());
        self.record(&[tag]);
        self.record(&at.to_le_bytes());
        self.record(bytes);
    }
}
