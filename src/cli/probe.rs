//! Does a registry answer at an address? `GET /v2/` over HTTPS, then over plain HTTP, each step bounded, and the
//! answer says exactly which step failed: the name, the connection, TLS, or the HTTP status.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::hosting::address::{self, Host};

const STEP: Duration = Duration::from_secs(3);

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub address: String,
    /// A registry answered: `/v2/` gave 200, or 401 (it wants credentials).
    pub ok: bool,
    /// One line: what answered, or which step failed and how.
    pub summary: String,
}

pub async fn probe(value: &str) -> Probe {
    let answer = |ok: bool, summary: String| Probe { address: value.to_string(), ok, summary };
    let host = match address::check(value) {
        Ok(host) => host,
        Err(reason) => return answer(false, format!("not an address: {reason}")),
    };
    let name = match &host {
        Host::Name(name) => name.clone(),
        Host::V4(ip) => ip.to_string(),
        Host::V6(ip) => ip.to_string(),
    };
    // Image references without a port mean HTTPS on 443.
    let port: u16 =
        value.rsplit_once(':').filter(|_| !value.ends_with(']')).and_then(|(_, p)| p.parse().ok()).unwrap_or(443);
    let addresses = match tokio::time::timeout(STEP, tokio::net::lookup_host((name.as_str(), port))).await {
        Ok(Ok(addresses)) => addresses.collect::<Vec<_>>(),
        Ok(Err(error)) => return answer(false, format!("DNS: cannot resolve {name}: {error}")),
        Err(_) => return answer(false, format!("DNS: no answer for {name} within {STEP:?}")),
    };
    let Some(first) = addresses.first().copied() else {
        return answer(false, format!("DNS: {name} has no address"));
    };
    let connect = || async move {
        match tokio::time::timeout(STEP, TcpStream::connect(first)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => Err(format!("cannot connect to {first}: {error}")),
            Err(_) => Err(format!("cannot connect to {first}: no answer within {STEP:?}")),
        }
    };
    let tcp = match connect().await {
        Ok(tcp) => tcp,
        Err(why) => return answer(false, why),
    };
    let https = match tls(tcp, &host).await {
        Ok(stream) => match get_v2(stream, value).await {
            Ok(status) => return answer(registry_status(status), describe("HTTPS", status)),
            Err(why) => format!("HTTPS: {why}"),
        },
        Err(why) => format!("HTTPS: {why}"),
    };
    let http = match connect().await {
        Ok(tcp) => match get_v2(tcp, value).await {
            Ok(status) => return answer(registry_status(status), format!("{}; {https}", describe("HTTP", status))),
            Err(why) => format!("HTTP: {why}"),
        },
        Err(why) => why,
    };
    answer(false, format!("{https}; {http}"))
}

fn registry_status(status: u16) -> bool {
    matches!(status, 200 | 401)
}

fn describe(scheme: &str, status: u16) -> String {
    match status {
        200 => format!("a registry answers over {scheme} (GET /v2/: 200)"),
        401 => format!("a registry answers over {scheme} and asks for credentials (GET /v2/: 401)"),
        other => format!("{scheme} GET /v2/ gave {other}: not a registry's API"),
    }
}

async fn tls(tcp: TcpStream, host: &Host) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(certificate);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name = match host {
        Host::Name(name) => rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| e.to_string())?,
        Host::V4(ip) => rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::V4(*ip).into()),
        Host::V6(ip) => rustls::pki_types::ServerName::IpAddress(std::net::IpAddr::V6(*ip).into()),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    match tokio::time::timeout(STEP, connector.connect(server_name, tcp)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(format!("TLS failed: {error}")),
        Err(_) => Err(format!("TLS: no handshake within {STEP:?}")),
    }
}

/// The status code of `GET /v2/`.
async fn get_v2(mut stream: impl AsyncRead + AsyncWrite + Unpin, host: &str) -> Result<u16, String> {
    let request = format!(
        "GET /v2/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: local-registry-publisher\r\n\r\n"
    );
    let exchange = async {
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("sending the request: {e}"))?;
        let mut head = vec![0; 64];
        let read = stream.read(&mut head).await.map_err(|e| format!("reading the answer: {e}"))?;
        let line = String::from_utf8_lossy(&head[..read]).to_string();
        line.strip_prefix("HTTP/1.")
            .and_then(|rest| rest.get(2..5))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("not an HTTP answer: {:?}", line.lines().next().unwrap_or_default()))
    };
    tokio::time::timeout(STEP, exchange).await.unwrap_or_else(|_| Err(format!("no answer within {STEP:?}")))
}
