//! Taking libpq's TLS parameters out of a connection string.
//!
//! tokio-postgres reads `sslmode` as `disable | prefer | require` only and refuses
//! `sslrootcert`, `sslcert` and `sslkey` as unknown options. hopper reads these four itself,
//! in both forms libpq accepts (a `postgres://` URL and a `key=value` string), and hands
//! the rest of the string, unchanged, to tokio-postgres.

use std::borrow::Cow;

/// The TLS parameters of a connection string, as libpq names them (the last occurrence
/// of a key wins, as in libpq).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct TlsParams {
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    pub sslcert: Option<String>,
    pub sslkey: Option<String>,
}

impl TlsParams {
    /// Keeps `value` if `key` is one of the TLS keys; says whether it was.
    fn take(&mut self, key: &str, value: String) -> bool {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            _ => return false,
        };
        *slot = Some(value);
        true
    }
}

/// Splits `conninfo` into the string tokio-postgres reads and the TLS parameters.
pub(crate) fn split(conninfo: &str) -> Result<(String, TlsParams), String> {
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        split_url(conninfo)
    } else {
        split_key_values(conninfo)
    }
}

/// `postgres://user:password@hosts/db?key=value&…`: the query string is scanned; the
/// credentials, hosts and database are left to tokio-postgres.
fn split_url(url: &str) -> Result<(String, TlsParams), String> {
    // tokio-postgres takes the credentials up to the first `@`; the query starts after.
    let after_credentials = url.find('@').map_or(0, |at| at + 1);
    // The hosts end at the database's `/` or the query's `?`; a host holds no `@`, so one
    // there is the rest of a password (or user name) that was not percent-encoded, which
    // tokio-postgres would take for a host name ("failed to lookup address information").
    let hosts = &url[after_credentials..];
    let hosts = &hosts[..hosts.find(['/', '?']).unwrap_or(hosts.len())];
    if after_credentials > 0 && hosts.contains('@') {
        return Err(
            "the user name or password holds a raw `@`: percent-encode it as %40 \
                    (postgres://user:p%40ss@host/db)"
                .to_owned(),
        );
    }
    let Some(question) = url[after_credentials..].find('?') else {
        return Ok((url.to_owned(), TlsParams::default()));
    };
    let (base, query) = url.split_at(after_credentials + question);
    let mut params = TlsParams::default();
    let mut kept = Vec::new();
    for pair in query[1..].split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !params.take(&decode(key)?, decode(value)?.into_owned()) {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, params))
}

fn decode(s: &str) -> Result<Cow<'_, str>, String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map_err(|e| format!("a URL parameter is not valid UTF-8 once decoded: {e}"))
}

/// `host=a,b port=5432 sslmode=verify-full …`: every pair is read (values may be quoted
/// with `'`, with `\` escaping a character), the TLS ones kept, the others written back
/// quoted for tokio-postgres.
fn split_key_values(conninfo: &str) -> Result<(String, TlsParams), String> {
    let mut params = TlsParams::default();
    let mut kept = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!(
                "connection string: expected `=` after {key:?} (a URL starts with postgres://)"
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => {
                        return Err(format!(
                            "connection string: unterminated quote after {key}="
                        ));
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        if !params.take(&key, value.clone()) {
            kept.push(format!(
                "{key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    Ok((kept.join(" "), params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: &str, root: &str) -> TlsParams {
        TlsParams {
            sslmode: Some(mode.to_owned()),
            sslrootcert: Some(root.to_owned()),
            ..TlsParams::default()
        }
    }

    #[test]
    fn url_parameters_are_taken_and_the_rest_kept() {
        let (rest, tls) = split(
            "postgres://u:p%40ss@h1:5432,h2:5433/db?sslmode=verify-full&target_session_attrs=read-write&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .expect("parses");
        assert_eq!(
            rest,
            "postgres://u:p%40ss@h1:5432,h2:5433/db?target_session_attrs=read-write"
        );
        assert_eq!(tls, params("verify-full", "/tmp/ca.pem"));
        let (rest, tls) = split("postgresql://h/db?sslcert=c.pem&sslkey=k.pem").expect("parses");
        assert_eq!(rest, "postgresql://h/db");
        assert_eq!(tls.sslcert.as_deref(), Some("c.pem"));
        assert_eq!(tls.sslkey.as_deref(), Some("k.pem"));
        let (rest, tls) = split("postgres://h/db").expect("parses");
        assert_eq!(
            (rest.as_str(), tls),
            ("postgres://h/db", TlsParams::default())
        );
    }

    #[test]
    fn a_question_mark_in_the_password_does_not_start_the_query() {
        let (rest, tls) = split("postgres://u:a?b@h/db?sslmode=require").expect("parses");
        assert_eq!(rest, "postgres://u:a?b@h/db");
        assert_eq!(tls.sslmode.as_deref(), Some("require"));
    }

    #[test]
    fn a_raw_at_sign_in_the_password_is_refused_naming_the_fix() {
        for url in [
            "postgres://u:p@ss@h/db",
            "postgres://u:p@ss@h",
            "postgresql://u:p@ss@h1,h2:5433?sslmode=require",
        ] {
            let refused = split(url).expect_err(url);
            assert!(refused.contains("percent-encode it as %40"), "{refused}");
            assert!(
                !refused.contains("p@ss"),
                "the password is not echoed: {refused}"
            );
        }
        assert!(split("postgres://u:p%40ss@h/db").is_ok());
        assert!(
            split("postgres://h/db@archive").is_ok(),
            "an @ past the hosts is the database's"
        );
    }

    #[test]
    fn key_values_are_taken_and_the_rest_quoted() {
        let (rest, tls) = split(
            "host=a,b  port = 5432 sslmode=verify-ca sslrootcert='/tmp/my ca.pem' password='it\\'s'",
        )
        .expect("parses");
        assert_eq!(rest, "host='a,b' port='5432' password='it\\'s'");
        assert_eq!(tls, params("verify-ca", "/tmp/my ca.pem"));
        let config: tokio_postgres::Config = rest.parse().expect("tokio-postgres reads it");
        assert_eq!(config.get_password(), Some(&b"it's"[..]));
    }

    #[test]
    fn malformed_key_values_are_refused() {
        assert!(split("host").is_err());
        assert!(split("host='a").is_err());
    }
}
