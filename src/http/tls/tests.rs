use super::*;

const CERT_A: &[u8] = include_bytes!("fixtures/a.crt");
const KEY_A: &[u8] = include_bytes!("fixtures/a.key");
const CERT_B: &[u8] = include_bytes!("fixtures/b.crt");
const KEY_B: &[u8] = include_bytes!("fixtures/b.key");

/// A directory of its own per test, removed when dropped.
struct Files(PathBuf);

impl Files {
    fn new(test: &str, cert: &[u8], key: &[u8]) -> Self {
        let dir = std::env::temp_dir().join(format!("lrp-tls-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = Self(dir);
        files.write(cert, key);
        files
    }

    fn write(&self, cert: &[u8], key: &[u8]) {
        std::fs::write(self.0.join("tls.crt"), cert).unwrap();
        std::fs::write(self.0.join("tls.key"), key).unwrap();
    }

    fn paths(&self) -> CertificateFiles {
        CertificateFiles { cert: self.0.join("tls.crt"), key: self.0.join("tls.key") }
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn leaf(key: &CertifiedKey) -> Vec<u8> {
    key.cert[0].as_ref().to_vec()
}

fn der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem).unwrap().as_ref().to_vec()
}

#[test]
fn a_certificate_and_its_key_load() {
    let files = Files::new("load", CERT_A, KEY_A);
    let loaded = files.paths().load().unwrap();
    assert_eq!(leaf(&loaded), der(CERT_A));
}

#[test]
fn a_key_that_is_not_the_certificates_is_refused_with_both_paths() {
    let files = Files::new("mismatch", CERT_A, KEY_B);
    let error = files.paths().load().unwrap_err().to_string();
    assert!(error.contains("does not fit") && error.contains("tls.crt") && error.contains("tls.key"), "{error}");
}

#[test]
fn missing_or_empty_files_say_which_and_what() {
    let files = Files::new("empty", b"", KEY_A);
    let error = files.paths().load().unwrap_err().to_string();
    assert!(error.contains("tls.crt holds no PEM certificate"), "{error}");
    files.write(CERT_A, b"-----BEGIN CERTIFICATE-----\n");
    let error = files.paths().load().unwrap_err().to_string();
    assert!(error.contains("tls.key holds no PEM private key"), "{error}");
    let missing = CertificateFiles { cert: files.0.join("absent.crt"), key: files.0.join("tls.key") };
    let error = missing.load().unwrap_err().to_string();
    assert!(error.starts_with("reading ") && error.contains("absent.crt"), "{error}");
    assert!(ReloadingCertificate::new(missing).is_err(), "no serving without a certificate");
}

#[test]
fn a_renewed_pair_is_served_from_the_next_handshake_and_a_broken_one_keeps_the_last_good() {
    let files = Files::new("reload", CERT_A, KEY_A);
    let certificate = ReloadingCertificate::new(files.paths()).unwrap();
    assert_eq!(leaf(&certificate.current()), der(CERT_A));
    files.write(CERT_B, KEY_B);
    assert_eq!(leaf(&certificate.current()), der(CERT_B), "renewed");
    // Half-written: the new certificate with the old key (as between two writes without the kubelet's swap).
    files.write(b"not a certificate at all, and longer than the one before it was", KEY_B);
    assert_eq!(leaf(&certificate.current()), der(CERT_B), "the last good pair stays");
    files.write(CERT_A, KEY_A);
    assert_eq!(leaf(&certificate.current()), der(CERT_A), "and the next good one is taken");
}

#[test]
fn a_name_with_control_characters_is_escaped_in_the_error() {
    let files = Files::new("escape", CERT_A, KEY_A);
    let hostile = CertificateFiles { cert: files.0.join("evil\u{1b}[31m.crt"), key: files.0.join("tls.key") };
    let error = hostile.load().unwrap_err().to_string();
    assert!(!error.contains('\u{1b}'), "{error:?}");
}
