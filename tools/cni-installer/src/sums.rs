//! The checksum list: a `SHA256SUMS` file as `sha256sum` writes it, one
//! `<64 hex digits>  <name>` line per file (`*<name>` in binary mode).

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::InstallerError;

/// A SHA-256 digest.
pub type Sha256Sum = [u8; 32];

/// One line of the list: a plain file name (no folder) and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    pub name: String,
    pub sha256: Sha256Sum,
}

/// Reads and parses the list at `path`.
pub fn read_list(path: &Path) -> Result<Vec<ListedFile>, InstallerError> {
    let text = std::fs::read_to_string(path).map_err(|source| InstallerError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_list(&text).map_err(|reason| InstallerError::BadList {
        path: path.to_path_buf(),
        reason,
    })
}

/// Parses the list. Names must be plain file names: the list says what
/// goes into one folder, and a `../` or `/` in it would write elsewhere.
pub fn parse_list(text: &str) -> Result<Vec<ListedFile>, String> {
    let mut files: Vec<ListedFile> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let (digest, rest) = line
            .split_once(' ')
            .ok_or_else(|| format!("line {number}: expected `<sha256>  <name>`, got {line:?}"))?;
        let sha256 = parse_hex(digest)
            .ok_or_else(|| format!("line {number}: {digest:?} is not 64 hex digits"))?;
        // sha256sum separates with a space and a mode character: a second
        // space (text mode) or `*` (binary mode).
        let name = rest
            .strip_prefix(' ')
            .or_else(|| rest.strip_prefix('*'))
            .ok_or_else(|| format!("line {number}: expected two spaces or ` *` after the sum"))?;
        if !is_plain_name(name) {
            return Err(format!(
                "line {number}: {name:?} is not a plain file name (no folders, no `..`, no escapes)"
            ));
        }
        if files.iter().any(|f| f.name == name) {
            return Err(format!("line {number}: {name:?} is listed twice"));
        }
        files.push(ListedFile {
            name: name.to_string(),
            sha256,
        });
    }
    if files.is_empty() {
        return Err("the list names no file".to_string());
    }
    Ok(files)
}

fn is_plain_name(name: &str) -> bool {
    // sha256sum starts a line with `\` when it escaped the name; such
    // names (a newline or backslash in them) have no place among plugins.
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0', '\n'])
}

fn parse_hex(digits: &str) -> Option<Sha256Sum> {
    if digits.len() != 64 {
        return None;
    }
    let mut sum = [0u8; 32];
    for (byte, pair) in sum.iter_mut().zip(digits.as_bytes().chunks(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(text, 16).ok()?;
    }
    Some(sum)
}

/// The digest as `sha256sum` prints it.
pub fn to_hex(sum: &Sha256Sum) -> String {
    sum.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of the file at `path`; `None` when there is no such file.
pub fn file_sum(path: &Path) -> Result<Option<Sha256Sum>, InstallerError> {
    let read_error = |source| InstallerError::Read {
        path: PathBuf::from(path),
        source,
    };
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).map_err(read_error)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(Some(hasher.finalize().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_text_and_binary_mode_lines() {
        let list = parse_list(&format!("{SUM}  bridge\n\n{SUM} *host-local\n")).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].name, "bridge");
        assert_eq!(list[1].name, "host-local");
        assert_eq!(to_hex(&list[0].sha256), SUM);
    }

    #[test]
    fn refuses_names_that_leave_the_folder() {
        for name in ["../bridge", "/usr/bin/bridge", "a/b", "..", "\\bridge"] {
            let err = parse_list(&format!("{SUM}  {name}\n")).unwrap_err();
            assert!(err.contains("not a plain file name"), "{name}: {err}");
        }
    }

    #[test]
    fn refuses_malformed_lines() {
        assert!(parse_list("bridge\n").unwrap_err().contains("line 1"));
        assert!(parse_list("abcd  bridge\n")
            .unwrap_err()
            .contains("not 64 hex digits"));
        let upper_z = format!("{}z  bridge\n", &SUM[..63]);
        assert!(parse_list(&upper_z)
            .unwrap_err()
            .contains("not 64 hex digits"));
        assert!(parse_list(&format!("{SUM} bridge\n"))
            .unwrap_err()
            .contains("two spaces"));
        assert!(parse_list(&format!("{SUM}  a\n{SUM}  a\n"))
            .unwrap_err()
            .contains("listed twice"));
        assert!(parse_list("\n").unwrap_err().contains("no file"));
    }
}
