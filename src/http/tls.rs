//! HTTPS on the controller's port (`--tls-cert-file`, `--tls-private-key-file`), so a scraper's bearer token never
//! crosses the pod network in clear. The files are a mounted Secret (cert-manager's, or the chart's own), which the
//! kubelet replaces in place when the certificate is renewed: each handshake checks whether they changed and loads
//! them again, keeping the last good pair while a new one does not load.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use crate::escape::safe;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: String },
    #[error("the key in {key} does not fit the certificate in {cert}: {reason}")]
    Mismatch { cert: String, key: String, reason: rustls::Error },
    #[error("setting up TLS: {0}")]
    Config(rustls::Error),
}

/// The certificate chain and its key, as files.
#[derive(Clone, Debug)]
pub struct CertificateFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertificateFiles {
    /// Reads both files and checks that the key is the certificate's.
    pub fn load(&self) -> Result<CertifiedKey, Error> {
        let cert_pem = read(&self.cert)?;
        let key_pem = read(&self.key)?;
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&cert_pem).filter_map(Result::ok).collect();
        if chain.is_empty() {
            return Err(Error::NoCertificate { path: shown(&self.cert) });
        }
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| Error::NoKey { path: shown(&self.key) })?;
        let provider = rustls::crypto::ring::default_provider();
        CertifiedKey::from_der(chain, key, &provider).map_err(|reason| Error::Mismatch {
            cert: shown(&self.cert),
            key: shown(&self.key),
            reason,
        })
    }

    /// What tells that either file was replaced: size and modification time of both, through symlinks (a mounted
    /// Secret's files are links that the kubelet swaps).
    fn stamp(&self) -> Option<Stamp> {
        let of = |path: &Path| std::fs::metadata(path).ok().map(|m| (m.len(), m.modified().ok()));
        Some((of(&self.cert)?, of(&self.key)?))
    }
}

type Stamp = ((u64, Option<SystemTime>), (u64, Option<SystemTime>));

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read { path: shown(path), source })
}

fn shown(path: &Path) -> String {
    safe(&path.display().to_string()).into_owned()
}

/// The serving certificate, loaded again when its files change.
#[derive(Debug)]
pub struct ReloadingCertificate {
    files: CertificateFiles,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    /// The files' stamp when last read, good or not, so a broken pair is read (and told) once, not per handshake.
    read: Option<Stamp>,
}

impl ReloadingCertificate {
    /// Fails when the files do not hold a certificate and its key: the process must not start serving without one.
    pub fn new(files: CertificateFiles) -> Result<Self, Error> {
        let read = files.stamp();
        let key = Arc::new(files.load()?);
        Ok(Self { files, current: Mutex::new(Current { key, read }) })
    }

    /// The pair to serve now: the files' if they changed and load, else the last good one.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stamp = self.files.stamp();
        if stamp.is_some() && stamp != current.read {
            current.read = stamp;
            match self.files.load() {
                Ok(key) => {
                    info!("serving the renewed certificate from its files");
                    current.key = Arc::new(key);
                }
                Err(error) => warn!("keeping the last serving certificate: {error}"),
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The server side of TLS 1.2 and 1.3 with the files' certificate; fails when they do not load.
pub fn acceptor(files: CertificateFiles) -> Result<TlsAcceptor, Error> {
    let certificate = Arc::new(ReloadingCertificate::new(files)?);
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(Error::Config)?
        .with_no_client_auth()
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests;
