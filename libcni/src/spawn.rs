//! Starting a program, waiting out a moment of ETXTBSY.
//!
//! `execve` fails with ETXTBSY while any process holds the file open for
//! writing. Two harmless cases cause it: a package upgrade replacing the
//! binary, and, in a threaded process, a file this process wrote and closed
//! whose descriptor a fork on another thread still carries until that
//! child's own exec closes it (O_CLOEXEC acts only at exec). Both clear up
//! within milliseconds, so a spawn that meets it is tried again a few times
//! rather than failing the call.

use std::io;
use std::process::{Child, Command};
use std::thread;
use std::time::Duration;

/// Tries after the first: 50, 100, 200, 400 and 800 ms apart (1.55 s in all).
const RETRIES: u32 = 5;
const FIRST_DELAY: Duration = Duration::from_millis(50);

/// `cmd.spawn()`, tried again while it fails with ETXTBSY; any other error,
/// or ETXTBSY after the last try, is returned as it is.
pub fn spawn_waiting_for_busy_text(cmd: &mut Command) -> io::Result<Child> {
    let mut delay = FIRST_DELAY;
    let mut attempt = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < RETRIES => {
                log::debug!("{:?}: text file busy, retrying", cmd.get_program());
                thread::sleep(delay);
                delay *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    fn script(dir: &std::path::Path) -> (std::path::PathBuf, std::fs::File) {
        let path = dir.join("prog");
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&path)
            .unwrap();
        file.write_all(b"#!/bin/sh\nexit 3\n").unwrap();
        (path, file)
    }

    #[test]
    fn a_writer_that_closes_in_time_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let (path, file) = script(dir.path());
        // The writer closes 120 ms in: within the retries.
        let closer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(120));
            drop(file);
        });
        let status = spawn_waiting_for_busy_text(&mut Command::new(&path))
            .expect("spawned once the writer closed")
            .wait()
            .unwrap();
        closer.join().unwrap();
        assert_eq!(status.code(), Some(3));
    }

    #[test]
    fn a_writer_that_stays_is_etxtbsy_after_the_retries() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _file) = script(dir.path());
        let err = spawn_waiting_for_busy_text(&mut Command::new(&path)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ETXTBSY));
    }

    #[test]
    fn other_errors_are_not_retried() {
        let err = spawn_waiting_for_busy_text(&mut Command::new("/nonexistent/prog")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
