//! The server's CURVE key pair: generated on first start beside the token file, readable by
//! its owner only, read back on every later start.
//!
//! The file holds both keys in Z85 (40 characters each), one `name = value` per line:
//!
//! ```text
//! # hopper serve CURVE key pair (generated). Keep it secret; give peers the public key.
//! public = rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7
//! secret = JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6
//! ```
//!
//! Peers are given the public key only (`server_key=` in a Rust or Python client's
//! settings); each peer makes an ephemeral key pair of its own per socket.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A CURVE key pair in Z85. `Debug` never shows the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerKeys {
    /// The public key, to give to clients and workers.
    pub public: String,
    /// The secret key.
    pub secret: String,
}

impl std::fmt::Debug for ServerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerKeys")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// Why a key or a key file was refused.
fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// Checks that `key` is written as a CURVE key: 40 Z85 characters.
pub fn check_key(what: &str, key: &str) -> std::io::Result<()> {
    if hopper_protocol::is_curve_key(key) {
        Ok(())
    } else {
        Err(invalid(format!(
            "the {what} is not a CURVE key (40 Z85 characters)"
        )))
    }
}

impl ServerKeys {
    /// A new random key pair.
    pub fn generate() -> std::io::Result<Self> {
        let pair = zmq::CurveKeyPair::new().map_err(std::io::Error::other)?;
        let z85 = |bytes: &[u8]| zmq::z85_encode(bytes).map_err(|e| invalid(e.to_string()));
        Ok(ServerKeys {
            public: z85(&pair.public_key)?,
            secret: z85(&pair.secret_key)?,
        })
    }

    /// Reads the key pair in `path`. Refuses a file that others may read, a missing key
    /// and a malformed one.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(invalid(format!(
                    "the key file {} may be read by others (mode {:o}); chmod 600 it",
                    path.display(),
                    mode & 0o777
                )));
            }
        }
        let text = std::fs::read_to_string(path)?;
        let field = |name: &str| {
            text.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim().to_owned())
                .ok_or_else(|| {
                    invalid(format!("the key file {} has no {name} key", path.display()))
                })
        };
        let keys = ServerKeys {
            public: field("public")?,
            secret: field("secret")?,
        };
        check_key("public key", &keys.public)?;
        check_key("secret key", &keys.secret)?;
        Ok(keys)
    }

    /// Generates a key pair and writes it to `path` (creating its directory), readable by
    /// this user only (mode 0600). Refuses to overwrite an existing file.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let keys = Self::generate()?;
        let mut file = crate::auth::create_private_file(path)?;
        writeln!(
            file,
            "# hopper serve CURVE key pair (generated). Keep it secret; give peers the public key."
        )?;
        writeln!(file, "public = {}", keys.public)?;
        writeln!(file, "secret = {}", keys.secret)?;
        Ok(keys)
    }

    /// Reads the key pair in `path`, or creates one there if there is no file. The flag
    /// says whether it was created.
    pub fn read_or_create(path: &Path) -> std::io::Result<(Self, bool)> {
        match Self::create(path) {
            Ok(keys) => Ok((keys, true)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Ok((Self::read(path)?, false))
            }
            Err(e) => Err(e),
        }
    }
}

/// Where `hopper serve` keeps its key pair when not told: `$HOPPER_KEY_FILE`, else
/// `serve.key` beside the token file ([`crate::default_token_path`]).
pub fn default_key_path() -> PathBuf {
    if let Some(p) = std::env::var_os("HOPPER_KEY_FILE") {
        return PathBuf::from(p);
    }
    key_path_beside(&crate::default_token_path())
}

/// `serve.key` in the directory of `token_file`.
pub fn key_path_beside(token_file: &Path) -> PathBuf {
    token_file
        .parent()
        .map(|d| d.join("serve.key"))
        .unwrap_or_else(|| PathBuf::from("serve.key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_private_read_back_and_never_overwritten() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("hopper-keys-{}", uuid::Uuid::now_v7()));
        let path = dir.join("k").join("serve.key");
        let (keys, created) = ServerKeys::read_or_create(&path)?;
        assert!(created);
        assert_eq!((keys.public.len(), keys.secret.len()), (40, 40));
        let (again, created) = ServerKeys::read_or_create(&path)?;
        assert!(!created);
        assert_eq!(again, keys);
        assert!(!format!("{keys:?}").contains(&keys.secret));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
            let refused = ServerKeys::read(&path).expect_err("a readable key file is refused");
            assert!(refused.to_string().contains("chmod 600"), "{refused}");
        }
        std::fs::remove_dir_all(dir)
    }

    #[test]
    fn keys_must_be_forty_z85_characters() {
        assert!(check_key("server key", "short").is_err());
        assert!(check_key("server key", &"\t".repeat(40)).is_err());
        let keys = ServerKeys::generate().expect("generates");
        assert!(check_key("server key", &keys.public).is_ok());
    }
}
