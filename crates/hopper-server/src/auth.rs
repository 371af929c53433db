//! Authentication: per-peer tokens, compared in constant time, and the token file that
//! `hopper serve` writes when started with none.
//!
//! The protocol authenticates with a token in the `hello`; each token has a role
//! ([`Access`]: client, worker or admin) that decides which requests its peer may make.

use std::io::Write;
use std::path::{Path, PathBuf};

use hopper_protocol::{Request, Role};

/// The shortest token accepted, as on the HTTP side: shorter ones can be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

/// What a token lets its peer do. Each level includes the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Submit jobs, read and cancel them (`submit`, `submit_batch`, `status`, `cancel`).
    Client,
    /// A client that may also say hello as a worker and run jobs: orders, outcomes,
    /// heartbeats with leases, `extend`.
    Worker,
    /// Everything, the admin requests included (`list_jobs`, `retry`, `delete`,
    /// `retry_failed`, `clear`, `queue_stats`, `list_queues`, `update_queue`, `list_cron`,
    /// `list_nodes`, `job_stats`).
    Admin,
}

impl Access {
    /// The name used in the token file and in error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Client => "client",
            Access::Worker => "worker",
            Access::Admin => "admin",
        }
    }

    /// The name with its article, as a sentence says it: "a worker", "an admin".
    fn with_article(self) -> &'static str {
        match self {
            Access::Client => "a client",
            Access::Worker => "a worker",
            Access::Admin => "an admin",
        }
    }

    /// Why a request that needs `needed` is refused to a peer whose token allows `self`.
    pub fn refusal(self, needed: Access) -> String {
        format!(
            "this token's role is {}; this request needs {} token",
            self.as_str(),
            needed.with_article()
        )
    }

    /// The access a request needs.
    pub fn needed_by(request: &Request) -> Access {
        match request {
            Request::Hello {
                role: Role::Worker, ..
            }
            | Request::Completed { .. }
            | Request::Failed { .. }
            | Request::Snoozed { .. }
            | Request::Released { .. }
            | Request::Extend { .. }
            | Request::Log { .. }
            | Request::Outcomes { .. } => Access::Worker,
            // Listing leases keeps them alive (and adopts them after a restart): running
            // jobs is a worker's business. An empty heartbeat only keeps the session.
            Request::Heartbeat { leases, .. } if !leases.is_empty() => Access::Worker,
            Request::Hello { .. }
            | Request::Submit { .. }
            | Request::SubmitBatch { .. }
            | Request::Status { .. }
            | Request::JobLogs { .. }
            | Request::Cancel { .. }
            | Request::Heartbeat { .. }
            | Request::Bye { .. } => Access::Client,
            _ => Access::Admin,
        }
    }
}

impl std::str::FromStr for Access {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "client" => Ok(Access::Client),
            "worker" => Ok(Access::Worker),
            "admin" => Ok(Access::Admin),
            other => Err(format!(
                "unknown role {other:?}; roles are client, worker and admin"
            )),
        }
    }
}

/// A token and what it allows.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The secret a peer puts in its `hello`.
    pub token: String,
    /// What its peer may do.
    pub access: Access,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}, <secret>)", self.access.as_str())
    }
}

/// Who may connect.
#[derive(Clone)]
pub enum Auth {
    /// A `hello` must carry one of these tokens; each allows everything (admin).
    Tokens(Vec<String>),
    /// A `hello` must carry one of these tokens; each allows what its role says.
    Credentials(Vec<Credential>),
    /// Anyone may connect and do everything (`--insecure-no-auth`).
    Insecure,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Tokens(t) => write!(f, "Tokens({} configured)", t.len()),
            Auth::Credentials(c) => write!(f, "Credentials({} configured)", c.len()),
            Auth::Insecure => f.write_str("Insecure"),
        }
    }
}

impl Auth {
    /// True when `token` is acceptable.
    pub fn accepts(&self, token: Option<&str>) -> bool {
        self.access(token).is_some()
    }

    /// What `token` allows, or `None` when it is not acceptable. Every configured token is
    /// compared, each in time independent of where the bytes differ, so timing does not
    /// reveal a prefix.
    pub fn access(&self, token: Option<&str>) -> Option<Access> {
        let given = token.unwrap_or("").as_bytes();
        let mut found = None;
        let mut check = |secret: &str, access: Access| {
            if constant_time_eq(secret.as_bytes(), given) {
                found = found.max(Some(access));
            }
        };
        match self {
            Auth::Insecure => return Some(Access::Admin),
            Auth::Tokens(tokens) => tokens.iter().for_each(|t| check(t, Access::Admin)),
            Auth::Credentials(list) => list.iter().for_each(|c| check(&c.token, c.access)),
        }
        found.filter(|_| !given.is_empty())
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
/// skipped, so one file can hold a token per peer with a comment naming each. A file that
/// the group or others may read or write is refused, as [`read_credentials`] refuses it.
pub fn read_tokens(path: &Path) -> std::io::Result<Vec<String>> {
    check_private(path)?;
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// One line of a token file: a token, and the role written before it if any.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenLine {
    /// The line's number in the file, from 1.
    pub number: usize,
    /// The word before the token (`client`, `read`, …), unchecked; `None` for a bare token.
    pub role: Option<String>,
    /// The token.
    pub token: String,
}

impl std::fmt::Debug for TokenLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenLine({}, {:?}, <secret>)", self.number, self.role)
    }
}

/// Reads a file of secret tokens, one per line, optionally after a role and a space
/// (`admin TOKEN`); blank lines and lines starting with `#` are skipped. What the roles
/// mean is the caller's: [`read_credentials`] for the ZeroMQ server, the HTTP token file
/// of `hopper serve --http` for its own.
///
/// Refused, with the line number (never the token): a line of more than two words, and a
/// file that the group or others may read or write (secrets there are not secret).
pub fn read_token_lines(path: &Path) -> std::io::Result<Vec<TokenLine>> {
    check_private(path)?;
    let text = std::fs::read_to_string(path)?;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let number = n + 1;
        let (role, token) = match line.split_whitespace().collect::<Vec<_>>()[..] {
            [token] => (None, token),
            [role, token] => (Some(role.to_owned()), token),
            _ => {
                return Err(invalid_line(
                    path,
                    number,
                    "expected a token, or a role and a token",
                ));
            }
        };
        lines.push(TokenLine {
            number,
            role,
            token: token.to_owned(),
        });
    }
    Ok(lines)
}

/// The error for line `number` of the token file at `path`: `why`, never the token.
pub fn invalid_line(path: &Path, number: usize, why: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{} line {number}: {why}", path.display()),
    )
}

/// Reads a token file of `hopper serve`: one token per line, optionally after its role
/// (`client`, `worker` or `admin`) and a space; a bare token is an admin token, so a file
/// of bare tokens means what it always meant. Blank lines and lines starting with `#` are
/// skipped.
///
/// Refused, with the line number (never the token): a token shorter than
/// [`MIN_TOKEN_LEN`] characters, an unknown role, a line of more than two words, and a
/// file that the group or others may read or write (secrets there are not secret).
pub fn read_credentials(path: &Path) -> std::io::Result<Vec<Credential>> {
    let mut credentials = Vec::new();
    for line in read_token_lines(path)? {
        let access = match &line.role {
            None => Access::Admin,
            Some(role) => role
                .parse()
                .map_err(|e| invalid_line(path, line.number, e))?,
        };
        if line.token.chars().count() < MIN_TOKEN_LEN {
            return Err(invalid_line(
                path,
                line.number,
                format!(
                    "the token is shorter than {MIN_TOKEN_LEN} characters; use a long random one (hopper serve generates 64)"
                ),
            ));
        }
        credentials.push(Credential {
            token: line.token,
            access,
        });
    }
    Ok(credentials)
}

/// Refuses a secrets file that its group or others may read or write.
fn check_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o066 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is readable or writable by others (mode {:o}); make it private: chmod 600 {}",
                    path.display(),
                    mode & 0o777,
                    path.display()
                ),
            ));
        }
    }
    Ok(())
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
    fn roles_come_from_the_token_file_and_bare_tokens_are_admin() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("hopper-roles-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("serve.token");
        let write = |text: &str, mode: u32| -> std::io::Result<()> {
            std::fs::write(&path, text)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            }
            Ok(())
        };
        let (c, w, a) = ("c".repeat(16), "w".repeat(20), "a".repeat(64));
        write(&format!("# peers\nclient {c}\n\nworker  {w}\n{a}\n"), 0o600)?;
        let auth = Auth::Credentials(read_credentials(&path)?);
        assert_eq!(auth.access(Some(&c)), Some(Access::Client));
        assert_eq!(auth.access(Some(&w)), Some(Access::Worker));
        assert_eq!(auth.access(Some(&a)), Some(Access::Admin));
        assert_eq!(auth.access(Some("c")), None);
        write("short-token\n", 0o600)?;
        let err = read_credentials(&path).expect_err("short");
        assert!(err.to_string().contains("line 1"), "{err}");
        assert!(!err.to_string().contains("short-token"), "{err}");
        write(&format!("boss {a}\n"), 0o600)?;
        assert!(read_credentials(&path).is_err());
        write(&format!("worker {a} extra\n"), 0o600)?;
        assert!(read_credentials(&path).is_err());
        #[cfg(unix)]
        for mode in [0o640, 0o604, 0o620] {
            write(&format!("{a}\n"), mode)?;
            let err = read_credentials(&path).expect_err("not private");
            assert!(err.to_string().contains("chmod 600"), "{err}");
            let err = read_tokens(&path).expect_err("not private");
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
        std::fs::remove_dir_all(dir)
    }

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
