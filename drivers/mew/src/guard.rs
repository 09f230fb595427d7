//! `mew guard -- PROGRAM ARGS...` (not listed in `--help`): runs PROGRAM so that it is
//! stopped (SIGTERM) when the process that started the guard dies, even by SIGKILL.
//!
//! The space's supervisor starts every process through it, and a bridge its MCP server, so
//! that killing the supervisor (or a bridge) with SIGKILL orphans nothing. The guard arms
//! Linux's parent-death signal on itself and then replaces itself with PROGRAM (`exec`: same
//! pid, the signal stays armed), which needs no code in the child between fork and exec.
//! Elsewhere it simply runs PROGRAM.

use std::os::unix::process::CommandExt;

/// Whether started processes go through the guard on this system.
pub const AVAILABLE: bool = cfg!(target_os = "linux");

/// Arms the parent-death signal and becomes `cmd`; returns only on failure (exit code).
pub fn run(cmd: &[String]) -> i32 {
    let Some((program, args)) = cmd.split_first() else {
        eprintln!("mew guard: no program to run");
        return mew_driver_common::exit::USAGE;
    };
    #[cfg(target_os = "linux")]
    {
        let parent = nix::unistd::getppid();
        if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
            eprintln!("mew guard: cannot arm the parent-death signal: {e}");
        }
        // The parent may have died before the signal was armed: then nobody supervises.
        if nix::unistd::getppid() != parent {
            return mew_driver_common::exit::RUNTIME;
        }
    }
    let err = std::process::Command::new(program).args(args).exec();
    eprintln!("mew guard: cannot run {program}: {err}");
    127
}

/// `program args` to run under the guard of executable `exe` (`exe guard -- program args`),
/// or as they are where the guard is not available.
pub fn wrap(exe: &str, program: &str, args: &[String]) -> (String, Vec<String>) {
    // A program that cannot be found is started as it is, so that the spawn error names it
    // (through the guard it would only be an exit code).
    if !AVAILABLE || !findable(program) {
        return (program.to_owned(), args.to_vec());
    }
    let mut a = vec!["guard".to_owned(), "--".to_owned(), program.to_owned()];
    a.extend(args.iter().cloned());
    (exe.to_owned(), a)
}

/// Whether `program` names an existing file, directly or on `PATH`.
fn findable(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
