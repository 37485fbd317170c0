//! How each component is started: its binary and flags (those kwokctl's binary runtime and envtest use), and the
//! kubeconfig format they share.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::pki::Pki;
use crate::{NODE_IP, POD_CIDR, SERVICE_CIDR};

/// How to (re)start one component.
#[derive(Clone, Debug)]
pub(crate) struct Recipe {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
}

/// `control_plane`: the suffix of the API server's, controller-manager's and scheduler's binaries, `-1.25` for
/// another minor of the tested window (see [`crate::KubeVersion`]), empty for the main pin.
pub(crate) fn recipes(
    tools: &Path,
    dir: &Path,
    pki: &Pki,
    kubeconfig: &Path,
    api_ip: Ipv4Addr,
    ports: [u16; 6],
    control_plane: &str,
) -> BTreeMap<String, Recipe> {
    let [etcd_port, etcd_peer_port, api_port, kcm_port, scheduler_port, kwok_port] = ports;
    let path = |p: &Path| p.display().to_string();
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
    // The flags the controller-manager and the scheduler share: the admin kubeconfig for everything, no leader
    // election, a loopback secure port whose health and metrics paths need no authorization.
    let client_component = |port: u16| -> Vec<String> {
        vec![
            format!("--kubeconfig={}", path(kubeconfig)),
            format!("--authentication-kubeconfig={}", path(kubeconfig)),
            format!("--authorization-kubeconfig={}", path(kubeconfig)),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
        ]
    };
    let table: [(&str, Vec<String>); 5] = [
        (
            "etcd",
            vec![
                "--name=testbed".into(),
                format!("--data-dir={}", path(&dir.join("etcd"))),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=testbed={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        ),
        (
            "kube-apiserver",
            vec![
                format!("--etcd-servers={etcd_url}"),
                format!("--bind-address={api_ip}"),
                // Without it the API server looks for a default route, which sandboxes may not have.
                format!("--advertise-address={api_ip}"),
                format!("--secure-port={api_port}"),
                format!("--tls-cert-file={}", path(&pki.serving_cert)),
                format!("--tls-private-key-file={}", path(&pki.serving_key)),
                format!("--client-ca-file={}", path(&pki.ca_cert)),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", path(&pki.service_account_public_key)),
                format!("--service-account-signing-key-file={}", path(&pki.service_account_key)),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                "--authorization-mode=Node,RBAC".into(),
                "--allow-privileged=true".into(),
                // On loopback no pod could use the `kubernetes` Service's endpoint; a real node's pods can.
                format!("--endpoint-reconciler-type={}", if api_ip.is_loopback() { "none" } else { "lease" }),
                // kubelet logs, exec and port-forward: dial the node by address (its name resolves nowhere), as a
                // client the kubelet trusts.
                "--kubelet-preferred-address-types=InternalIP".into(),
                format!("--kubelet-client-certificate={}", path(&pki.kubelet_client_cert)),
                format!("--kubelet-client-key={}", path(&pki.kubelet_client_key)),
            ],
        ),
        (
            "kube-controller-manager",
            [
                client_component(kcm_port),
                vec![
                    format!("--root-ca-file={}", path(&pki.ca_cert)),
                    format!("--service-account-private-key-file={}", path(&pki.service_account_key)),
                    format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                ],
            ]
            .concat(),
        ),
        ("kube-scheduler", client_component(scheduler_port)),
        (
            "kwok",
            vec![
                format!("--kubeconfig={}", path(kubeconfig)),
                format!("--config={}", path(&dir.join("kwok.yaml"))),
                "--manage-all-nodes=false".into(),
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                format!("--cidr={POD_CIDR}"),
                format!("--node-ip={NODE_IP}"),
                "--node-lease-duration-seconds=40".into(),
                format!("--server-address=127.0.0.1:{kwok_port}"),
            ],
        ),
    ];
    let program = |name: &str| match name {
        "kube-apiserver" | "kube-controller-manager" | "kube-scheduler" => tools.join(format!("{name}{control_plane}")),
        _ => tools.join(name),
    };
    table.into_iter().map(|(name, args)| (name.to_string(), Recipe { program: program(name), args })).collect()
}

pub(crate) fn kubeconfig_yaml(server: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: admin
  user:
    client-certificate: {cert}
    client-key: {key}
contexts:
- name: testbed
  context:
    cluster: testbed
    user: admin
current-context: testbed
",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    )
}
