//! Authentication: bearer tokens (or HTTP basic auth carrying a token) with two roles.
//!
//! - A **read** token may call every `GET` endpoint, the dashboard's data and `/metrics`.
//! - An **admin** token may also enqueue, retry, cancel and delete.
//!
//! The role needed follows from the method: `GET` and `HEAD` need read, everything else
//! admin, so a new mutating route cannot be left readable by mistake.
//!
//! Tokens are compared in constant time, every configured token every time, so neither
//! timing nor which token matched leaks. They never reach a log: [`Secret`] prints as
//! `***` and [`AuthConfig`]'s `Debug` shows only how many tokens there are.
//!
//! Running without authentication is an explicit choice ([`AuthConfig::open`]), and
//! [`crate::serve`] refuses it on any address but loopback.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use serde::Serialize;

use crate::WebState;
use crate::error::{ApiError, Error, Result};

/// The shortest token accepted: 16 characters, so a token cannot be guessed online.
pub const MIN_TOKEN_LEN: usize = 16;

/// The environment variable holding admin tokens (comma-separated).
pub const ENV_ADMIN_TOKENS: &str = "HOPPER_HTTP_ADMIN_TOKENS";
/// The environment variable holding read-only tokens (comma-separated).
pub const ENV_READ_TOKENS: &str = "HOPPER_HTTP_READ_TOKENS";

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read jobs, queues, stats and metrics.
    Read,
    /// Everything, including enqueue, retry, cancel and delete.
    Admin,
}

/// A token, kept out of logs: its `Debug` and `Display` print `***`.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Self {
        Secret(token.into())
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Who may use the API and the dashboard.
#[derive(Clone)]
pub struct AuthConfig {
    tokens: Vec<(Secret, Role)>,
    open: bool,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let admin = self.tokens.iter().filter(|t| t.1 == Role::Admin).count();
        f.debug_struct("AuthConfig")
            .field("open", &self.open)
            .field("admin_tokens", &admin)
            .field("read_tokens", &(self.tokens.len() - admin))
            .finish()
    }
}

impl AuthConfig {
    /// Token authentication with these admin and read-only tokens. Each token must be at
    /// least [`MIN_TOKEN_LEN`] characters of printable ASCII without spaces or commas, and
    /// at least one token must be given.
    pub fn tokens<A, R>(admin: A, read: R) -> Result<Self>
    where
        A: IntoIterator,
        A::Item: Into<String>,
        R: IntoIterator,
        R::Item: Into<String>,
    {
        let mut tokens = Vec::new();
        for (role, token) in admin
            .into_iter()
            .map(|t| (Role::Admin, t.into()))
            .chain(read.into_iter().map(|t| (Role::Read, t.into())))
        {
            check_token(role, &token)?;
            tokens.push((Secret(token), role));
        }
        if tokens.is_empty() {
            return Err(Error::Config(format!(
                "no API token configured: set {ENV_ADMIN_TOKENS} (and optionally \
                 {ENV_READ_TOKENS}), or run open on loopback only"
            )));
        }
        Ok(AuthConfig {
            tokens,
            open: false,
        })
    }

    /// No authentication: every caller is an admin. Only sensible on loopback;
    /// [`crate::serve`] refuses it on other addresses.
    pub fn open() -> Self {
        AuthConfig {
            tokens: Vec::new(),
            open: true,
        }
    }

    /// Tokens from the environment: [`ENV_ADMIN_TOKENS`] and [`ENV_READ_TOKENS`], each a
    /// comma-separated list.
    pub fn from_env() -> Result<Self> {
        let list = |name: &str| -> Vec<String> {
            std::env::var(name)
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect()
        };
        AuthConfig::tokens(list(ENV_ADMIN_TOKENS), list(ENV_READ_TOKENS))
    }

    /// True when there is no authentication.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The role the request's credentials grant, or why there is none.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Role, ApiError> {
        if self.open {
            return Ok(Role::Admin);
        }
        let presented = presented_token(headers)?;
        // Check every token, without stopping at a match, so the time taken says nothing
        // about which one matched or how close a guess came.
        let mut granted: Option<Role> = None;
        for (secret, role) in &self.tokens {
            if constant_time_eq(presented.as_bytes(), secret.bytes()) {
                granted = granted.max(Some(*role));
            }
        }
        granted.ok_or_else(|| ApiError::unauthorized("the token is not valid"))
    }
}

impl Role {
    /// The name used in a token file (`admin TOKEN`, `read TOKEN`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "read" => Ok(Role::Read),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "unknown role {other:?}; the HTTP roles are admin and read (read-only)"
            )),
        }
    }
}

/// Checks a token as [`AuthConfig::tokens`] does: at least [`MIN_TOKEN_LEN`] characters
/// of printable ASCII without spaces or commas. The error names the role, never the token.
pub fn check_token(role: Role, token: &str) -> Result<()> {
    let what = match role {
        Role::Admin => "an admin token",
        Role::Read => "a read-only token",
    };
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(Error::Config(format!(
            "{what} is shorter than {MIN_TOKEN_LEN} characters"
        )));
    }
    if !token.chars().all(|c| c.is_ascii_graphic() && c != ',') {
        return Err(Error::Config(format!(
            "{what} has a character other than printable ASCII (spaces and commas are not allowed)"
        )));
    }
    Ok(())
}

/// The token from `Authorization: Bearer <token>` or `Authorization: Basic <user:token>`
/// (any user name; when the password is empty, the user name is taken as the token, so
/// `curl -u TOKEN:` works too).
fn presented_token(headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::unauthorized(
            "authentication required: send Authorization: Bearer <token>",
        ));
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not valid ASCII"))?;
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        if rest.is_empty() {
            return Err(ApiError::unauthorized(
                "the token is missing: send Authorization: Bearer <token>",
            ));
        }
        return Ok(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| ApiError::unauthorized("the Basic credentials are not valid base64"))?;
        let (user, password) = decoded.split_once(':').unwrap_or((&decoded, ""));
        let token = if password.is_empty() { user } else { password };
        return Ok(token.to_owned());
    }
    Err(ApiError::unauthorized(
        "unsupported Authorization scheme: use Bearer <token> or Basic",
    ))
}

/// Compares a presented token with a secret in time that depends only on the secret's
/// length (and not on where they differ).
fn constant_time_eq(presented: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(presented.len() != secret.len());
    for (i, s) in secret.iter().enumerate() {
        diff |= s ^ presented.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// The middleware: authenticates, checks the role the method needs, and passes the
/// granted [`Role`] on in the request's extensions.
pub(crate) async fn require_role(
    State(state): State<WebState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let role = match state.auth().authenticate(request.headers()) {
        Ok(role) => role,
        Err(e) => {
            state.log_refusal(&request, &e);
            return Err(e);
        }
    };
    let needed = if matches!(*request.method(), Method::GET | Method::HEAD) {
        Role::Read
    } else {
        Role::Admin
    };
    if role < needed {
        let e =
            ApiError::forbidden("this token is read-only; an admin token is needed to change jobs");
        state.log_refusal(&request, &e);
        return Err(e);
    }
    request.extensions_mut().insert(role);
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(value).expect("ascii"),
        );
        h
    }

    #[test]
    fn equal_only_when_identical() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdeg", b"abcdef"));
        assert!(!constant_time_eq(b"abcde", b"abcdef"));
        assert!(!constant_time_eq(b"abcdefg", b"abcdef"));
        assert!(!constant_time_eq(b"", b"abcdef"));
    }

    #[test]
    fn roles_from_bearer_and_basic() -> Result<()> {
        let auth = AuthConfig::tokens(["admin-token-0123456789"], ["read-token-0123456789"])?;
        let role = |h: &HeaderMap| auth.authenticate(h).ok();
        assert_eq!(
            role(&headers("Bearer admin-token-0123456789")),
            Some(Role::Admin)
        );
        assert_eq!(
            role(&headers("bearer read-token-0123456789")),
            Some(Role::Read)
        );
        let basic = base64::engine::general_purpose::STANDARD.encode("me:read-token-0123456789");
        assert_eq!(role(&headers(&format!("Basic {basic}"))), Some(Role::Read));
        let basic = base64::engine::general_purpose::STANDARD.encode("admin-token-0123456789:");
        assert_eq!(role(&headers(&format!("Basic {basic}"))), Some(Role::Admin));
        assert_eq!(role(&headers("Bearer admin-token-012345678")), None);
        assert_eq!(role(&HeaderMap::new()), None);
        Ok(())
    }

    #[test]
    fn a_bearer_without_a_token_is_said_to_lack_it() -> Result<()> {
        let auth = AuthConfig::tokens(["admin-token-0123456789"], Vec::<String>::new())?;
        for value in ["Bearer", "bearer ", "Bearer \t "] {
            let refused = auth.authenticate(&headers(value)).err();
            assert_eq!(
                refused.as_ref().map(ApiError::message),
                Some("the token is missing: send Authorization: Bearer <token>"),
                "{value:?}"
            );
        }
        let other = auth.authenticate(&headers("Digest x")).err();
        assert!(
            other
                .as_ref()
                .is_some_and(|e| e.message().starts_with("unsupported Authorization scheme")),
            "{other:?}"
        );
        Ok(())
    }

    #[test]
    fn weak_or_missing_tokens_are_refused() {
        assert!(AuthConfig::tokens(["short"], Vec::<String>::new()).is_err());
        assert!(AuthConfig::tokens(["has a space in it, 0123"], Vec::<String>::new()).is_err());
        assert!(AuthConfig::tokens(Vec::<String>::new(), Vec::<String>::new()).is_err());
    }

    #[test]
    fn secrets_never_print() -> Result<()> {
        let auth = AuthConfig::tokens(["admin-token-0123456789"], ["read-token-0123456789"])?;
        let shown = format!("{auth:?} {:?}", Secret::new("admin-token-0123456789"));
        assert!(!shown.contains("0123456789"), "{shown}");
        Ok(())
    }
}
