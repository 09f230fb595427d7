//! Opening a space's state folder: the snapshot restored, the log after it applied, a torn
//! last entry cut, and anything else that is wrong said (never cut).

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use mew_core::cluster::journal::{self, FormatError};
use mew_core::cluster::{Node, NodeInput, NodeOptions, NodeOutput, Record, Replica};
use mew_core::gateway::{Fsync, Gateway, IdentityVerifier, SnapshotError, SpaceConfig};
use serde_json::json;
use std::sync::Arc;

use super::log::StateDir;
use super::{LOCAL_NODE, LOG, LOG_NEXT, SET_ASIDE, SNAPSHOT, SNAPSHOT_EVERY, open_rw};

/// Why a space's state could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The folder or a file in it cannot be read or written.
    #[error("cannot use the space's state in {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A state file of another format.
    #[error("{path}: {source}; run `mew space reset` to start the space afresh")]
    Format {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: FormatError,
    },
    /// The snapshot does not fit this space.
    #[error(
        "{path}: {source} (was space.yaml changed? restore it, or run `mew space reset` to start afresh)"
    )]
    Snapshot {
        /// Which file.
        path: PathBuf,
        /// Why.
        source: SnapshotError,
    },
    /// The log does not follow its snapshot.
    #[error("{path}: {0}; run `mew space reset` to start afresh", path = .1.display())]
    Broken(String, PathBuf),
    /// The log is damaged where whole entries follow: a crash never leaves that, and
    /// cutting the log there would drop changes that were acknowledged (a revocation).
    #[error(
        "{path}: damaged at byte {offset} ({why}) with whole entries after it (entry {seq} at byte {resumes}), which a crash never leaves; the space does not start. Copy {dir} aside if it is wanted, then `mew space reset` starts the space afresh (its runtime grants, invitations and history are lost)",
        path = path.display(), dir = path.parent().unwrap_or(path).display()
    )]
    Damaged {
        /// The log file.
        path: PathBuf,
        /// Where the damage starts (the end of the last whole entry before it).
        offset: u64,
        /// What is wrong there.
        why: String,
        /// Where the first whole entry after it starts.
        resumes: u64,
        /// That entry's sequence number.
        seq: u64,
    },
}

impl StateError {
    /// The state files are there but cannot be read as the space's state (damaged, of
    /// another format or for another `space.yaml`), as against a folder that cannot be
    /// used at all.
    pub fn unreadable(&self) -> bool {
        !matches!(self, StateError::Io { .. })
    }
}

/// What was restored when the space started (for logs and `GET /health`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// The state folder.
    pub dir: PathBuf,
    /// The entry the snapshot ended at (`None`: there was none).
    pub snapshot_entry: Option<u64>,
    /// Entries of the log applied after the snapshot.
    pub replayed: u64,
    /// Bytes cut from the log's torn tail, and why they were unreadable.
    pub cut: Option<(u64, String)>,
    /// Members of the space after the restore (configured, invited, anonymous).
    pub members: usize,
    /// Runtime grants held.
    pub grants: usize,
    /// Envelopes in the polling history.
    pub history: usize,
    /// Where the state saved under an earlier `space.yaml` was moved (it could not be read
    /// under the current one).
    pub set_aside: Option<PathBuf>,
}

impl RestoreReport {
    /// Whether any state was found.
    pub fn restored(&self) -> bool {
        self.snapshot_entry.is_some() || self.replayed > 0
    }

    /// The report as JSON (the `restored` field of `GET /health`).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "dir": self.dir.display().to_string(),
            "snapshot_entry": self.snapshot_entry,
            "entries_replayed": self.replayed,
            "bytes_cut": self.cut.as_ref().map(|c| c.0),
            "members": self.members,
            "grants": self.grants,
            "history": self.history,
            "set_aside": self.set_aside.as_ref().map(|p| p.display().to_string()),
        })
    }
}

/// A space restored from its state folder, ready to serve.
pub struct Restored {
    /// The files.
    pub state: StateDir,
    /// The node, its replica (and the space's gateway) caught up.
    pub node: Node,
    /// What was found.
    pub report: RestoreReport,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Opens (creating it if needed) the state folder `dir` and restores the space from it;
/// `verifier` judges the bearer tokens the configuration does not list (JWTs), if any.
pub fn open(
    dir: &Path,
    config: SpaceConfig,
    fsync: Fsync,
    verifier: Option<Arc<dyn IdentityVerifier>>,
) -> Result<Restored, StateError> {
    match open_once(dir, config.clone(), fsync, verifier.clone()) {
        Err(StateError::Snapshot {
            source: SnapshotError::OtherConfig,
            ..
        }) => {
            // space.yaml was edited while the gateway was down: the snapshot's members and
            // grants are laid out for the old file and cannot be read under the new one.
            // Starting is worth more than the run-time state, which is kept aside (not
            // deleted) for whoever wants to go back to the old file.
            let aside = dir.with_file_name(SET_ASIDE);
            if aside.exists() {
                fs::remove_dir_all(&aside).map_err(io_err(&aside))?;
            }
            fs::rename(dir, &aside).map_err(io_err(dir))?;
            tracing::warn!(
                "space.yaml changed since the space's state was saved: that state was moved to {} and the space starts afresh",
                aside.display()
            );
            let mut restored = open_once(dir, config, fsync, verifier)?;
            restored.report.set_aside = Some(aside);
            Ok(restored)
        }
        other => other,
    }
}

fn open_once(
    dir: &Path,
    config: SpaceConfig,
    fsync: Fsync,
    verifier: Option<Arc<dyn IdentityVerifier>>,
) -> Result<Restored, StateError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(io_err(dir))?;
    let snap_path = dir.join(SNAPSHOT);
    let snapshot = match fs::read(&snap_path) {
        Ok(b) => Some(journal::decode_snapshot(&Bytes::from(b)).map_err(|source| {
            StateError::Format {
                path: snap_path.clone(),
                source,
            }
        })?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&snap_path)(e)),
    };
    let snap = snapshot.as_ref().map(|(_, s)| &s[..]);
    let replica = Replica::open(LOCAL_NODE, config, snap, verifier).map_err(|source| {
        StateError::Snapshot {
            path: snap_path.clone(),
            source,
        }
    })?;
    let log_path = dir.join(LOG);
    // A log being created when the process stopped (the snapshot before it holds
    // everything): never renamed into place, never read.
    let _ = fs::remove_file(dir.join(LOG_NEXT));
    let mut log = open_rw(&log_path, false).map_err(io_err(&log_path))?;
    let mut bytes = Vec::new();
    log.read_to_end(&mut bytes).map_err(io_err(&log_path))?;
    let bytes = Bytes::from(bytes);
    let after = snapshot.as_ref().map_or(0, |(a, _)| *a);
    let scan = journal::scan_log(&bytes, after).map_err(|source| StateError::Format {
        path: log_path.clone(),
        source,
    })?;
    if let Some(next) = scan.damaged {
        return Err(StateError::Damaged {
            path: log_path,
            offset: scan.good_len as u64,
            why: scan.torn.unwrap_or_default(),
            resumes: next.offset as u64,
            seq: next.seq,
        });
    }
    let mut report = RestoreReport {
        dir: dir.to_owned(),
        snapshot_entry: snapshot.as_ref().map(|(a, _)| *a),
        ..RestoreReport::default()
    };
    if let Some(why) = &scan.torn {
        let cut = bytes.len() - scan.good_len;
        tracing::warn!(
            file = %log_path.display(), bytes = cut,
            "the state log ends in a torn or damaged entry ({why}); cutting it"
        );
        report.cut = Some((cut as u64, why.clone()));
    }
    let mut good_len = scan.good_len as u64;
    if good_len == 0 {
        log.set_len(0).map_err(io_err(&log_path))?;
        log.seek(SeekFrom::Start(0)).map_err(io_err(&log_path))?;
        log.write_all(journal::LOG_HEADER)
            .map_err(io_err(&log_path))?;
        good_len = journal::LOG_HEADER.len() as u64;
    } else if log.metadata().map_err(io_err(&log_path))?.len() > good_len {
        // A torn tail, or zeros an earlier version wrote ahead: entries go after the
        // last whole one.
        log.set_len(good_len).map_err(io_err(&log_path))?;
    }
    log.sync_all().map_err(io_err(&log_path))?;
    log.seek(SeekFrom::Start(good_len))
        .map_err(io_err(&log_path))?;
    let mut options = NodeOptions::new(LOCAL_NODE);
    // One node beats for nobody; its log's time moves with its own entries.
    options.heartbeat = Duration::from_secs(3600);
    options.snapshot_every = SNAPSHOT_EVERY;
    options.snapshot_at_rest = true;
    let mut node = Node::new(options, replica, 0, crate::secret::EntropyPool::source());
    for (seq, rec) in scan.entries {
        if seq <= node.applied() {
            continue;
        }
        // An entry that passes its checksum and cannot be read was written so by a
        // build that wrote something else: passing over it (as a cluster's replicas do,
        // all alike) could forget a change it made here.
        let rec = Record::decode(rec).map_err(|e| {
            StateError::Broken(
                format!("entry {seq} cannot be read ({e})"),
                log_path.clone(),
            )
        })?;
        let at = rec.at;
        node.handle_input(at, NodeInput::Record { seq, record: rec });
        report.replayed += 1;
        // What the entries did was carried out in the earlier life.
        while let Some(o) = node.poll_output() {
            if let NodeOutput::Broken(why) = o {
                return Err(StateError::Broken(why, log_path));
            }
        }
        discard_outputs(node.gateway_mut());
    }
    let gateway = node.gateway();
    let h = gateway.health();
    report.members = gateway.participants().len();
    report.grants = gateway.grant_count();
    report.history = h.history_len;
    Ok(Restored {
        state: StateDir::new(dir.to_owned(), log, good_len, fsync),
        node,
        report,
    })
}

pub(super) fn discard_outputs(g: &mut Gateway) {
    while g.poll_output().is_some() {}
    while g.poll_audit(|_| Vec::new()).is_some() {}
}

/// Removes a space's state folder (for `mew space reset`); whether there was one.
pub fn reset(dir: &Path) -> io::Result<bool> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
