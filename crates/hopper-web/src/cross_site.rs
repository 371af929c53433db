//! Defences against a browser used as a proxy: DNS rebinding and cross-site requests.
//!
//! A page on another site can make its visitor's browser send requests to the API: with a
//! plain HTML form (a cross-site POST, no preflight), or, after pointing its own DNS name
//! at the API's address (DNS rebinding), with any request at all, the browser then taking
//! the API for the page's own origin. Tokens stop neither when the API runs open
//! (`--http-open`), so these checks run first, in every authentication mode.
//!
//! **Host.** Every request's `Host` must name the API: an [`AllowedHosts`] entry (the
//! bound address, `localhost` and the loopback addresses when bound to loopback, and
//! the names configured with `--http-host`). A rebinding page's requests carry the
//! page's own name, and are refused with 403 `host_not_allowed`. The port is not
//! compared: a reverse proxy may forward another one, and a rebinding attack is about the
//! name. A request with no `Host` at all (HTTP/1.0 tools, in-process calls) cannot come
//! from a browser, and passes.
//!
//! **Origin**, on every request that may change something (any method but GET, HEAD and
//! OPTIONS):
//!
//! - `Sec-Fetch-Site`, which current browsers send on every request, must be
//!   `same-origin` or `none` (typed or bookmarked);
//! - `Origin`, which browsers send on every cross-origin POST, PUT, PATCH and DELETE
//!   (forms included) and on same-origin ones too, must be the request's own
//!   scheme-less `Host` (same host and port) or a configured name; `null` (sandboxed
//!   frames, redirects) is refused;
//! - a request with neither header passes: curl, scripts and the clients send neither,
//!   and no browser sends a cross-site mutation without `Origin`.
//!
//! **Content type**, on the same requests: a body must be declared `application/json`
//! (refused with 415 otherwise). HTML forms can only send `text/plain`, form-encoded or
//! multipart bodies, and a cross-origin `fetch` of JSON needs a CORS preflight, which
//! this server never grants. A request without a body needs no content type.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::WebState;
use crate::error::{ApiError, Error, Result};

/// The host names a request's `Host` may carry. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHosts {
    /// Addresses and names (lowercase, no port) accepted in `Host`.
    names: Vec<String>,
    /// The names added with [`AllowedHosts::with_name`], also accepted as `Origin` hosts
    /// whatever their port (a proxy in front may serve another one).
    configured: Vec<String>,
    /// Any IP address is accepted (bound to `0.0.0.0` or `[::]`: an address cannot be
    /// rebound, only a name can).
    any_ip: bool,
    /// No check at all ([`AllowedHosts::any`]).
    any: bool,
}

impl Default for AllowedHosts {
    /// [`AllowedHosts::loopback`].
    fn default() -> Self {
        AllowedHosts::loopback()
    }
}

impl AllowedHosts {
    /// `localhost`, `127.0.0.1` and `[::1]`: names that cannot point elsewhere.
    pub fn loopback() -> Self {
        AllowedHosts {
            names: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            configured: Vec::new(),
            any_ip: false,
            any: false,
        }
    }

    /// The hosts that name a server bound to `addr`: the loopback names for a loopback
    /// address, any IP address for `0.0.0.0` / `[::]`, else that address. Add the DNS
    /// names clients use with [`AllowedHosts::with_name`].
    pub fn for_address(addr: SocketAddr) -> Self {
        AllowedHosts::loopback().with_address(addr)
    }

    /// Also accepts the hosts that name a server bound to `addr` (see
    /// [`AllowedHosts::for_address`]).
    pub fn with_address(mut self, addr: SocketAddr) -> Self {
        let ip = addr.ip();
        if ip.is_unspecified() {
            self.any_ip = true;
        } else if !ip.is_loopback() && !self.names.contains(&ip.to_string()) {
            self.names.push(ip.to_string());
        }
        self
    }

    /// No `Host` or `Origin` check: for an application that checks them itself (behind
    /// a proxy that does). Cross-site forms are still refused by the content-type check.
    pub fn any() -> Self {
        AllowedHosts {
            any: true,
            ..AllowedHosts::loopback()
        }
    }

    /// Also accepts `name` (a DNS name or an IP address, without scheme or port, such as
    /// `hopper.example.com`), in `Host` and as the host of `Origin`.
    pub fn with_name(mut self, name: &str) -> Result<Self> {
        let normal = normalize(name);
        let valid = !normal.is_empty()
            && normal.len() <= 253
            && (normal.parse::<IpAddr>().is_ok()
                || normal
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
        if !valid {
            return Err(Error::Config(format!(
                "{name:?} is not a host name: give a DNS name or an IP address, without \
                 scheme or port (e.g. hopper.example.com)"
            )));
        }
        self.names.push(normal.clone());
        self.configured.push(normal);
        Ok(self)
    }

    /// True when `host` (a `Host` value: a name or address, maybe with a port) is allowed.
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let name = normalize(strip_port(host));
        if self.any_ip && name.parse::<IpAddr>().is_ok() {
            return true;
        }
        self.names.contains(&name)
    }

    fn configured(&self, name: &str) -> bool {
        self.configured.contains(&normalize(name))
    }
}

/// Lowercase, without IPv6 brackets or a trailing dot.
fn normalize(name: &str) -> String {
    let name = name.trim();
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// `host` of `host:port` (and `[v6]` of `[v6]:port`).
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((host, _)) if !host.contains(':') => host,
        _ => authority,
    }
}

/// The middleware: refuses a foreign `Host`, then, on requests that may change
/// something, a foreign origin or a body that is not JSON.
pub(crate) async fn check(
    State(state): State<WebState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Err(e) = check_request(
        state.allowed_hosts(),
        request.method(),
        request.headers(),
        request.uri(),
    ) {
        state.log_refusal(&request, &e);
        return Err(e);
    }
    Ok(next.run(request).await)
}

fn check_request(
    hosts: &AllowedHosts,
    method: &Method,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<(), ApiError> {
    let host = match headers.get(header::HOST) {
        Some(value) => Some(value.to_str().map_err(|_| host_refused())?),
        None => uri.authority().map(|a| a.as_str()),
    };
    if let Some(host) = host
        && !hosts.allows(host)
    {
        return Err(host_refused());
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return Err(cross_origin());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = origin
            .to_str()
            .ok()
            .and_then(|o| o.parse::<Uri>().ok())
            .and_then(|o| o.authority().cloned())
            .is_some_and(|o| {
                host.is_some_and(|h| o.as_str().eq_ignore_ascii_case(h))
                    || hosts.configured(o.host())
                    || hosts.any
            });
        if !same {
            return Err(cross_origin());
        }
    }
    check_content_type(headers)
}

/// A body must be declared JSON; a request without one needs no content type.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|length| length.as_bytes() != b"0");
    let Some(content_type) = headers.get(header::CONTENT_TYPE) else {
        if has_body {
            return Err(not_json());
        }
        return Ok(());
    };
    let essence = content_type
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(not_json())
    }
}

fn host_refused() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "host_not_allowed",
        "the Host header does not name this server; add the name with --http-host \
         (HOPPER_HTTP_HOSTS)",
    )
}

fn cross_origin() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "cross_origin",
        "cross-origin requests may not change anything",
    )
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "send the body as JSON with Content-Type: application/json",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_addresses() -> Result<()> {
        let loopback = AllowedHosts::for_address("127.0.0.1:7011".parse().expect("addr"));
        for host in [
            "127.0.0.1:7011",
            "localhost:7011",
            "LOCALHOST",
            "[::1]:80",
            "::1",
            "localhost.",
        ] {
            assert!(loopback.allows(host), "{host}");
        }
        for host in [
            "attacker.example:7011",
            "127.0.0.2:7011",
            "localhost.attacker.example",
            "",
        ] {
            assert!(!loopback.allows(host), "{host}");
        }
        let named = AllowedHosts::for_address("10.0.0.5:80".parse().expect("addr"))
            .with_name("Hopper.Example.com")?;
        assert!(named.allows("10.0.0.5:80"));
        assert!(named.allows("hopper.example.com:443"));
        assert!(!named.allows("10.0.0.6"));
        let everywhere = AllowedHosts::for_address("0.0.0.0:80".parse().expect("addr"));
        assert!(everywhere.allows("192.168.1.9:80") && everywhere.allows("[fe80::1]:80"));
        assert!(!everywhere.allows("attacker.example"));
        assert!(AllowedHosts::any().allows("attacker.example"));
        for bad in ["", "http://x", "x:80", "a b", "x/y"] {
            assert!(AllowedHosts::loopback().with_name(bad).is_err(), "{bad}");
        }
        Ok(())
    }
}
