//! Authentication: per-peer tokens, compared in constant time, and the token file that
//! `hopper serve` writes when started with none.
//!
//! zmq.rs has no CURVE, so the protocol authenticates with a shared-secret token in the
//! `hello`. Tokens travel in clear text: run the server on loopback, a private network or
//! through WireGuard/stunnel (see `docs/protocol.md`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Who may connect.
#[derive(Clone)]
pub enum Auth {
    /// A `hello` must carry one of these tokens.
    Tokens(Vec<String>),
    /// Anyone may connect (`--insecure-no-auth`).
    Insecure,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Tokens(t) => write!(f, "Tokens({} configured)", t.len()),
            Auth::Insecure => f.write_str("Insecure"),
        }
    }
}

impl Auth {
    /// True when `token` is acceptable. Every configured token is compared, each in time
    /// independent of where the bytes differ, so timing does not reveal a prefix.
    pub fn accepts(&self, token: Option<&str>) -> bool {
        match self {
            Auth::Insecure => true,
            Auth::Tokens(tokens) => {
                let given = token.unwrap_or("").as_bytes();
                let mut ok = false;
                for t in tokens {
                    ok |= constant_time_eq(t.as_bytes(), given);
                }
                ok && !given.is_empty()
            }
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..len {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Reads tokens from `path`: one per line; blank lines and lines starting with `#` are
/// skipped, so one file can hold a token per peer with a comment naming each.
pub fn read_tokens(path: &Path) -> std::io::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// A new random token: 32 bytes as 64 hex characters.
pub fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a new token to `path` (creating its directory), readable by this user only
/// (mode 0600), and returns it. Refuses to overwrite an existing file.
pub fn write_new_token(path: &Path) -> std::io::Result<String> {
    let token = generate_token();
    let mut file = create_private_file(path)?;
    writeln!(
        file,
        "# hopper serve token (generated); give it to clients and workers as their token"
    )?;
    writeln!(file, "{token}")?;
    Ok(token)
}

/// Creates `path` (and its directory) for writing, readable by this user only (mode 0600).
/// Refuses to overwrite an existing file (`AlreadyExists`).
pub(crate) fn create_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Where `hopper serve` keeps its generated token when not told: `$HOPPER_TOKEN_FILE`, else
/// `$XDG_CONFIG_HOME/hopper/serve.token`, else `~/.config/hopper/serve.token`.
pub fn default_token_path() -> PathBuf {
    if let Some(p) = std::env::var_os("HOPPER_TOKEN_FILE") {
        return PathBuf::from(p);
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    config.join("hopper").join("serve.token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        let auth = Auth::Tokens(vec!["secret-one".into(), "secret-two".into()]);
        assert!(auth.accepts(Some("secret-two")));
        assert!(!auth.accepts(Some("secret-tw")));
        assert!(!auth.accepts(Some("secret-twoo")));
        assert!(!auth.accepts(None));
        assert!(!Auth::Tokens(vec![String::new()]).accepts(Some("")));
        assert!(Auth::Insecure.accepts(None));
    }

    #[test]
    fn generated_token_file_is_private_and_read_back() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("hopper-auth-{}", uuid::Uuid::now_v7()));
        let path = dir.join("t").join("serve.token");
        let token = write_new_token(&path)?;
        assert_eq!(token.len(), 64);
        assert_eq!(read_tokens(&path)?, vec![token]);
        assert!(write_new_token(&path).is_err(), "must not overwrite");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        std::fs::remove_dir_all(dir)
    }
}
