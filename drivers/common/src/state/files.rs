//! Plain `std::fs` helpers: configuration text, token files, and where a space's files go.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A file that could not be read, with its path for a one-line message.
#[derive(Debug, Error)]
#[error("cannot read {path}: {source}")]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: io::Error,
}

/// Reads a configuration file; returns its text and the folder it sits in (where `.mew/` lives).
pub fn read_config(path: &Path) -> Result<(String, PathBuf), ReadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadError {
        path: path.to_owned(),
        source,
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok((text, dir))
}

/// Where a space's files live, from the path of its `space.yaml`, by the reference's rules
/// (both layouts it uses: `<space>/.mew/space.yaml`, written by its `mew init`, and
/// `<space>/space.yaml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceLayout {
    /// The space folder: token files are in `<root>/.mew/tokens/`.
    pub root: PathBuf,
    /// The folder of `space.yaml`: relative `cwd`s of started processes resolve here.
    pub config_dir: PathBuf,
    /// Where the audit logs go: `<config folder>/.mew/logs` when that `.mew/` exists, else
    /// `<config folder>/logs` (so `<space>/.mew/space.yaml` logs to `<space>/.mew/logs`).
    pub log_dir: PathBuf,
}

impl SpaceLayout {
    /// The layout of the space whose configuration is at `config` (a file path). The log
    /// folder depends on whether `<config folder>/.mew/` exists when this is called.
    pub fn for_config(config: &Path) -> SpaceLayout {
        let config_dir = config
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("."));
        let inside_mew = config_dir.file_name().is_some_and(|n| n == ".mew");
        let root = if inside_mew {
            config_dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_owned)
                .unwrap_or_else(|| PathBuf::from("."))
        } else {
            config_dir.clone()
        };
        let nested = config_dir.join(".mew");
        let log_dir = if nested.is_dir() {
            nested.join("logs")
        } else {
            config_dir.join("logs")
        };
        SpaceLayout {
            root,
            config_dir,
            log_dir,
        }
    }
}

/// `<base>/.mew/tokens/<id>.token`, the reference's token file location (`base` is the space
/// folder, [`SpaceLayout::root`]): configured participants' tokens only (an invitation's
/// token is written to no file).
pub fn token_path(base: &Path, participant: &str) -> PathBuf {
    base.join(".mew")
        .join("tokens")
        .join(format!("{participant}.token"))
}

/// The token stored for `participant`, trimmed; `None` when absent, unreadable or empty.
pub fn read_token_file(base: &Path, participant: &str) -> Option<String> {
    // Ids come from the config; refuse any that would escape the tokens folder.
    mew_core::participant_id::check(participant).ok()?;
    let t = std::fs::read_to_string(token_path(base, participant)).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// Writes a generated token (mode 0600 on Unix), creating the folder.
pub fn write_token_file(base: &Path, participant: &str, token: &str) -> io::Result<PathBuf> {
    if let Err(e) = mew_core::participant_id::check(participant) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, e.to_string()));
    }
    let path = token_path(base, participant);
    if let Some(dir) = path.parent() {
        // Tokens are secrets: their folder is the user's alone.
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(dir)?;
    }
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path)?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    Ok(path)
}

/// Makes `dir` (and its missing parents) a folder of the user's alone: created 0700 on Unix,
/// and an existing one narrowed to 0700. For a space's own folders whose files may hold a
/// secret (logs of started processes and of the supervisor, the run file).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    crate::state::logs::create_private_dir(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        if mode != 0o700 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// Opens `path` for appending, creating it private to the user (0600 on Unix) and narrowing
/// an existing file to 0600, in a [`private_dir`].
pub fn open_private_append(path: &Path) -> io::Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        private_dir(dir)?;
    }
    let mut o = OpenOptions::new();
    o.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let f = o.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if f.metadata()?.permissions().mode() & 0o077 != 0 {
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(f)
}

/// Writes `text` to `path` whole (a reader never sees half of it: written beside it, then
/// renamed), private to the user (0600 on Unix), in a [`private_dir`].
pub fn write_private(path: &Path, text: &[u8]) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        private_dir(dir)?;
    }
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(&tmp)?;
    f.write_all(text)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn private_files_and_folders_are_the_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("mew-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        // Folders and files made earlier with looser modes are narrowed.
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::set_permissions(d.join("logs"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(d.join("logs/space.log"), "old\n").unwrap();
        std::fs::set_permissions(
            d.join("logs/space.log"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let mut f = open_private_append(&d.join("logs/space.log")).unwrap();
        f.write_all(b"new\n").unwrap();
        assert_eq!(mode(&d.join("logs")), 0o700);
        assert_eq!(mode(&d.join("logs/space.log")), 0o600);
        assert_eq!(
            std::fs::read_to_string(d.join("logs/space.log")).unwrap(),
            "old\nnew\n"
        );
        write_private(&d.join("run/space.json"), b"{}").unwrap();
        assert_eq!(mode(&d.join("run")), 0o700);
        assert_eq!(mode(&d.join("run/space.json")), 0o600);
        assert!(!d.join("run/space.json.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    fn tempdir(name: &str) -> mew_tests::scratch::Scratch {
        mew_tests::scratch::Scratch::new("common", name)
    }

    #[test]
    fn token_files_round_trip_with_private_mode() {
        let d = tempdir("tok");
        assert_eq!(read_token_file(&d, "agent"), None);
        let p = write_token_file(&d, "agent", "t0k").unwrap();
        assert_eq!(read_token_file(&d, "agent").as_deref(), Some("t0k"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(write_token_file(&d, "../evil", "x").is_err());
        assert_eq!(read_token_file(&d, "../evil"), None);
        // The id rule: nothing invisible, nothing long, ever names a file.
        assert!(write_token_file(&d, "a\u{200B}", "x").is_err());
        assert!(write_token_file(&d, &"a".repeat(129), "x").is_err());
    }

    #[test]
    fn layouts_of_the_reference() {
        let d = tempdir("layout");
        // <space>/.mew/space.yaml: logs in <space>/.mew/logs, tokens in <space>/.mew/tokens.
        std::fs::create_dir_all(d.join("a/.mew")).unwrap();
        let l = SpaceLayout::for_config(&d.join("a/.mew/space.yaml"));
        assert_eq!(l.root, d.join("a"));
        assert_eq!(l.log_dir, d.join("a/.mew/logs"));
        assert_eq!(token_path(&l.root, "x"), d.join("a/.mew/tokens/x.token"));
        // <space>/space.yaml beside an existing .mew/: logs in <space>/.mew/logs.
        std::fs::create_dir_all(d.join("b/.mew")).unwrap();
        let l = SpaceLayout::for_config(&d.join("b/space.yaml"));
        assert_eq!(
            (l.root.clone(), l.log_dir),
            (d.join("b"), d.join("b/.mew/logs"))
        );
        assert_eq!(l.config_dir, d.join("b"));
        // <space>/space.yaml with no .mew/: the folder itself.
        std::fs::create_dir_all(d.join("c")).unwrap();
        let l = SpaceLayout::for_config(&d.join("c/space.yaml"));
        assert_eq!(l.log_dir, d.join("c/logs"));
        // A bare file name in the working directory.
        let l = SpaceLayout::for_config(Path::new("space.yaml"));
        assert_eq!(l.root, PathBuf::from("."));
    }

    #[test]
    fn config_read_reports_the_path() {
        let e = read_config(Path::new("/nonexistent/space.yaml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read /nonexistent/space.yaml:")
        );
        let d = tempdir("cfg");
        std::fs::write(d.join("space.yaml"), "a: 1").unwrap();
        let (text, base) = read_config(&d.join("space.yaml")).unwrap();
        assert_eq!(text, "a: 1");
        assert_eq!(base, *d);
        let (_, base) = read_config(Path::new("Cargo.toml")).unwrap();
        assert_eq!(base, PathBuf::from("."));
    }
}
