use std::path::PathBuf;

use super::*;

/// A directory of the test's own, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("hopper-pem-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Dir(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("a temporary file");
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A self-signed certificate for `name` and its key, in PEM.
fn identity(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("a key pair");
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .and_then(|params| params.self_signed(&key))
        .expect("a certificate");
    (cert.pem(), key.serialize_pem())
}

fn message(e: PemError) -> String {
    e.to_string()
}

#[test]
fn certificates_and_keys_are_read_in_order_skipping_other_blocks() {
    let dir = Dir::new("read");
    let (first, key) = identity("first.test");
    let (second, _) = identity("second.test");
    let chain = dir.file("chain.pem", &format!("{first}{second}"));
    let certs = certificates(&chain).expect("two certificates");
    assert_eq!(certs.len(), 2);
    let one = CertificateDer::from_pem_slice(first.as_bytes()).expect("a certificate");
    assert_eq!(certs[0], one);

    // A file of both (a key, then its certificate): each reader takes its own.
    let both = dir.file("both.pem", &format!("{key}{first}"));
    assert_eq!(certificates(&both).expect("the certificate"), vec![one]);
    let read = private_key(&both).expect("the key");
    let expected = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("a key");
    assert_eq!(read.secret_der(), expected.secret_der());
}

#[test]
fn each_unusable_file_is_refused_naming_it_and_why() {
    let dir = Dir::new("refused");
    let (cert, key) = identity("refused.test");
    let missing = dir.0.join("missing.pem");
    let garbage = dir.file("garbage.pem", "not a certificate\n");
    let cert_only = dir.file("cert.pem", &cert);
    let key_only = dir.file("key.pem", &key);
    let unterminated = dir.file(
        "cut.pem",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n",
    );
    let bad_base64 = dir.file(
        "bad64.pem",
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    );
    let cases: [(PemError, &PathBuf, &str); 8] = [
        (
            certificates(&missing).expect_err("missing"),
            &missing,
            ": no such file",
        ),
        (
            private_key(&missing).expect_err("missing"),
            &missing,
            ": no such file",
        ),
        (
            certificates(&dir.0).expect_err("a directory"),
            &dir.0,
            ": cannot be read: ",
        ),
        (
            certificates(&garbage).expect_err("garbage"),
            &garbage,
            ": no PEM certificate in it",
        ),
        (
            certificates(&key_only).expect_err("a key"),
            &key_only,
            ": no PEM certificate in it",
        ),
        (
            private_key(&cert_only).expect_err("a certificate"),
            &cert_only,
            ": no PEM private key in it",
        ),
        (
            certificates(&unterminated).expect_err("cut"),
            &unterminated,
            "no end line (-----END CERTIFICATE-----)",
        ),
        (
            certificates(&bad_base64).expect_err("not base64"),
            &bad_base64,
            "base64 does not decode",
        ),
    ];
    for (e, path, why) in cases {
        assert_eq!(e.path(), path.as_path());
        let text = message(e);
        assert!(text.starts_with(&path.display().to_string()), "{text}");
        assert!(text.contains(why), "{text}");
    }
}

#[test]
fn an_encrypted_key_is_named_as_such() {
    let dir = Dir::new("encrypted");
    let pkcs8 = dir.file(
        "pkcs8.pem",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    );
    let legacy = dir.file(
        "legacy.pem",
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,0123456789ABCDEF0123456789ABCDEF\n\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n",
    );
    for path in [pkcs8, legacy] {
        let e = private_key(&path).expect_err("encrypted");
        assert!(matches!(e, PemError::EncryptedKey { .. }), "{e:?}");
        assert!(message(e).contains("encrypted"));
    }
}

#[test]
fn a_file_too_large_for_a_certificate_is_refused_unread() {
    let dir = Dir::new("large");
    let path = dir.0.join("large.pem");
    let file = File::create(&path).expect("a file");
    // Sparse: no 16 MiB written.
    file.set_len(MAX_FILE_BYTES + 1).expect("a length");
    let e = certificates(&path).expect_err("too large");
    assert!(matches!(e, PemError::TooLarge { .. }), "{e:?}");
    assert!(message(e).contains("over 16 MiB"));
    file.set_len(MAX_FILE_BYTES).expect("a length");
    let e = certificates(&path).expect_err("no certificate");
    assert!(matches!(e, PemError::NoCertificate { .. }), "{e:?}");
}
