//! Certificates for a throw-away control plane: one CA, a serving certificate for the API server, an admin client
//! certificate, and the service-account signing key.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

use crate::Error;

/// Paths of the PEM files written by [`write`].
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
}

/// The first address of the service range, which the `kubernetes` Service gets: pods reach the API server there.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

pub fn write(dir: &Path) -> Result<Pki, Error> {
    std::fs::create_dir_all(dir)?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "testbed-ca");
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(
        ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"].map(String::from).to_vec(),
    )?;
    // rustls verifies an IP address only against IP SANs, so the loopback address must be one.
    serving.subject_alt_names.extend([
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        SanType::IpAddress(IpAddr::V4(KUBERNETES_SERVICE_IP)),
    ]);
    serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin.distinguished_name.push(DnType::CommonName, "admin");
    admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let service_account_key = KeyPair::generate()?;

    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        service_account_key: dir.join("service-account.key"),
        service_account_public_key: dir.join("service-account.pub"),
    };
    std::fs::write(&pki.ca_cert, ca_cert.pem())?;
    std::fs::write(&pki.serving_cert, serving_cert.pem())?;
    std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;
    std::fs::write(&pki.admin_cert, admin_cert.pem())?;
    std::fs::write(&pki.admin_key, admin_key.serialize_pem())?;
    std::fs::write(&pki.service_account_key, service_account_key.serialize_pem())?;
    std::fs::write(&pki.service_account_public_key, service_account_key.public_key_pem())?;
    Ok(pki)
}
