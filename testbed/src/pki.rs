//! Certificates for a throw-away control plane: one CA, a serving certificate for the API server, client
//! certificates (admin; the real node's kubelet and kube-proxy, each with its own Kubernetes identity; the API
//! server's own when it calls a kubelet), and the service-account signing key.

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
    /// `system:kube-proxy`, bound to `system:node-proxier` by the API server's default RBAC.
    pub proxy_cert: PathBuf,
    pub proxy_key: PathBuf,
    /// The API server's identity towards kubelets (logs, exec).
    pub kubelet_client_cert: PathBuf,
    pub kubelet_client_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
}

impl Pki {
    /// The kubelet's client certificate and key for the node in `slot`: `system:node:<its name>` in group
    /// `system:nodes`, what the Node authorizer lets a kubelet do, and no more.
    pub(crate) fn node_credentials(&self, slot: crate::node::Slot) -> (PathBuf, PathBuf) {
        let dir = self.ca_cert.parent().unwrap_or(std::path::Path::new("."));
        let name = slot.dir_name();
        (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")))
    }
}

/// The first address of the service range, which the `kubernetes` Service gets: pods reach the API server there.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);

/// A serving certificate for a test's own TLS server, and the private CA it chains to, all PEM.
#[derive(Clone, Debug)]
pub struct PrivateTls {
    pub ca: String,
    pub certificate: String,
    pub key: String,
}

/// A fresh CA of its own and a serving certificate it signed for `names`: DNS names, or IP addresses (which TLS
/// clients match only against IP SANs).
pub fn private_tls(names: &[&str]) -> Result<PrivateTls, Error> {
    let ca_key = KeyPair::generate()?;
    let ca_params = ca_params("testbed-private-ca")?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    serving_tls(ca_cert.pem(), &Issuer::new(ca_params, ca_key), names)
}

/// The CA the real nodes' system roots hold (`/etc/ssl/certs` in their own `/etc`), as an admin's own CA is on a
/// company's nodes: written as `<name>.crt` and `<name>.key` in `dir`.
pub(crate) fn write_node_roots(dir: &Path) -> Result<(), Error> {
    let key = KeyPair::generate()?;
    let certificate = ca_params(NODE_ROOTS)?.self_signed(&key)?;
    std::fs::write(dir.join(format!("{NODE_ROOTS}.crt")), certificate.pem())?;
    std::fs::write(dir.join(format!("{NODE_ROOTS}.key")), key.serialize_pem())?;
    Ok(())
}

/// A serving certificate for `names` that the real nodes trust with no CA configured anywhere (see
/// [`write_node_roots`]); `dir` holds the CA. The same subject and key sign as the written CA, so what it signs
/// chains to it.
pub(crate) fn node_trusted_tls(dir: &Path, names: &[&str]) -> Result<PrivateTls, Error> {
    let ca = std::fs::read_to_string(dir.join(format!("{NODE_ROOTS}.crt")))?;
    let key = KeyPair::from_pem(&std::fs::read_to_string(dir.join(format!("{NODE_ROOTS}.key")))?)?;
    serving_tls(ca, &Issuer::new(ca_params(NODE_ROOTS)?, key), names)
}

/// The file name, and the CA's common name, of the real nodes' own root CA.
pub(crate) const NODE_ROOTS: &str = "testbed-node-roots";

fn ca_params(common_name: &str) -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    Ok(params)
}

fn serving_tls(ca: String, issuer: &Issuer<'_, KeyPair>, names: &[&str]) -> Result<PrivateTls, Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    for name in names {
        params.subject_alt_names.push(match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName((*name).try_into()?),
        });
    }
    params.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("server"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let certificate = params.signed_by(&key, issuer)?;
    Ok(PrivateTls { ca, certificate: certificate.pem(), key: key.serialize_pem() })
}

/// Writes every certificate; the API server's serving certificate also names `api_ip`, where it listens.
pub fn write(dir: &Path, api_ip: Ipv4Addr) -> Result<Pki, Error> {
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
    if !api_ip.is_loopback() {
        serving.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(api_ip)));
    }
    serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    let client = |common_name: &str, organization: Option<&str>| -> Result<(String, String), Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, common_name);
        if let Some(organization) = organization {
            params.distinguished_name.push(DnType::OrganizationName, organization);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        Ok((params.signed_by(&key, &ca)?.pem(), key.serialize_pem()))
    };
    let node_user = |slot: crate::node::Slot| format!("system:node:{}", slot.node_name());
    let clients = [
        ("admin", client("admin", Some("system:masters"))?),
        ("node", client(&node_user(crate::node::Slot::First), Some("system:nodes"))?),
        ("node-2", client(&node_user(crate::node::Slot::Second), Some("system:nodes"))?),
        ("kube-proxy", client("system:kube-proxy", None)?),
        ("apiserver-kubelet-client", client("kube-apiserver-kubelet-client", Some("system:masters"))?),
    ];

    let service_account_key = KeyPair::generate()?;

    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        proxy_cert: dir.join("kube-proxy.crt"),
        proxy_key: dir.join("kube-proxy.key"),
        kubelet_client_cert: dir.join("apiserver-kubelet-client.crt"),
        kubelet_client_key: dir.join("apiserver-kubelet-client.key"),
        service_account_key: dir.join("service-account.key"),
        service_account_public_key: dir.join("service-account.pub"),
    };
    std::fs::write(&pki.ca_cert, ca_cert.pem())?;
    std::fs::write(&pki.serving_cert, serving_cert.pem())?;
    std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;
    for (name, (cert, key)) in clients {
        std::fs::write(dir.join(format!("{name}.crt")), cert)?;
        std::fs::write(dir.join(format!("{name}.key")), key)?;
    }
    std::fs::write(&pki.service_account_key, service_account_key.serialize_pem())?;
    std::fs::write(&pki.service_account_public_key, service_account_key.public_key_pem())?;
    write_node_roots(dir)?;
    Ok(pki)
}
