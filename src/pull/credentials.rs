//! A registry's pull credentials: read from the source Secret its Service names, and written as the
//! `.dockerconfigjson` the kubelet reads.
//!
//! The kubelet (pkg/credentialprovider) reads only `username`, `password`, `email` and `auth` of each `auths` entry,
//! and matches an entry's `host:port` exactly against the image's registry. So a token travels as a password, and
//! every address the registry is published under gets an entry of its own.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use serde::Serialize;

use crate::hosting::LocalRegistryHostingV1;

/// The longest user name, password or token taken: three addresses' entries of it still fit in a Secret (1 MiB).
pub const MAX_LEN: usize = 64 * 1024;

/// The user name sent with a token alone. Registries that take an access token as a basic-auth password either
/// ignore the user name or expect a fixed one; this is Google Artifact Registry's (see docs/pull-secrets.md for
/// which registries expect which, and the `username` key that overrides it).
pub const TOKEN_USERNAME: &str = "oauth2accesstoken";

/// The keys a source Secret may hold.
pub mod keys {
    pub const USERNAME: &str = "username";
    pub const PASSWORD: &str = "password";
    pub const TOKEN: &str = "token";
}

/// A user name and the password or token that goes with it.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub secret: String,
}

// Never print the secret, not even in a debug log.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).field("secret", &"<redacted>").finish()
    }
}

impl Credentials {
    /// From a source Secret's data: `username` and `password`, or `token` (with an optional `username`; without
    /// one, [`TOKEN_USERNAME`]). A trailing line break, which `echo` and editors add to files, is not part of a value.
    pub fn from_source(data: &BTreeMap<String, ByteString>) -> Result<Self, String> {
        let value = |key: &str| -> Result<Option<String>, String> {
            let Some(bytes) = data.get(key) else { return Ok(None) };
            let text = String::from_utf8(bytes.0.clone()).map_err(|_| format!("its key {key:?} is not UTF-8 text"))?;
            let text = without_line_break(&text).to_string();
            if text.is_empty() {
                return Err(format!("its key {key:?} is empty"));
            }
            Ok(Some(text))
        };
        let (username, password, token) = (value(keys::USERNAME)?, value(keys::PASSWORD)?, value(keys::TOKEN)?);
        let (username, secret) = match (username, password, token) {
            (_, Some(_), Some(_)) => return Err("it holds both \"password\" and \"token\"; keep one".into()),
            (Some(username), Some(password), None) => (Some(username), password),
            (None, Some(_), None) => return Err("it has a \"password\" but no \"username\"".into()),
            (username, None, Some(token)) => (username, token),
            (_, None, None) => {
                return Err("it holds neither \"username\" and \"password\" nor \"token\"".into());
            }
        };
        Self::new(username, secret)
    }

    /// A user name and its password, or a token alone (sent with [`TOKEN_USERNAME`]). Basic authentication
    /// (RFC 7617) allows no control character in either, and no colon in the user name.
    pub fn new(username: Option<String>, secret: String) -> Result<Self, String> {
        let username = username.unwrap_or_else(|| TOKEN_USERNAME.to_string());
        if username.trim().is_empty() {
            return Err("the \"username\" is empty".into());
        }
        // Basic authentication splits user and password at the first colon.
        if username.contains(':') {
            return Err("the \"username\" contains a colon, which basic authentication cannot carry".into());
        }
        if username.len() > MAX_LEN || secret.len() > MAX_LEN {
            return Err(format!("a value is longer than {MAX_LEN} bytes, more than any registry credential"));
        }
        if let Some(bad) = username.chars().find(|c| c.is_control()) {
            return Err(format!("the \"username\" contains the control character {bad:?} (RFC 7617 forbids them)"));
        }
        if secret.trim().is_empty() {
            return Err("the password or token is empty or only white space".into());
        }
        if let Some(bad) = secret.chars().find(|c| c.is_control()) {
            return Err(format!(
                "the password or token contains the control character {bad:?} (RFC 7617 forbids them)"
            ));
        }
        Ok(Self { username, secret })
    }

    /// `auth`: base64 of `user:secret`, which the kubelet prefers over the separate fields.
    fn auth(&self) -> String {
        STANDARD.encode(format!("{}:{}", self.username, self.secret))
    }
}

/// A value without the line break that `echo` and editors end files with.
pub fn without_line_break(text: &str) -> &str {
    text.trim_end_matches(['\n', '\r'])
}

/// Every address the published document names, each once: the runtime pulls from `hostFromContainerRuntime` (or
/// `host` when it is absent, as Tilt falls back), tools on the machine push to `host`, and in-cluster builders push
/// to `hostFromClusterNetwork` with the same Secret mounted as their Docker config.
pub fn addresses(document: &LocalRegistryHostingV1) -> Vec<String> {
    let mut addresses: Vec<String> = Vec::new();
    for (_, address) in document.fields().filter(|(field, _)| field.is_address()) {
        if let Some(address) = address
            && !addresses.iter().any(|a| a == address)
        {
            addresses.push(address.to_string());
        }
    }
    addresses
}

#[derive(Serialize)]
struct DockerConfig<'a> {
    auths: BTreeMap<&'a str, Entry<'a>>,
}

#[derive(Serialize)]
struct Entry<'a> {
    username: &'a str,
    password: &'a str,
    auth: String,
}

/// The `.dockerconfigjson` document: one `auths` entry per address, keyed by the bare `host:port` the kubelet
/// matches images against.
pub fn docker_config(addresses: &[String], credentials: &Credentials) -> String {
    let auths = addresses
        .iter()
        .map(|address| {
            let entry =
                Entry { username: &credentials.username, password: &credentials.secret, auth: credentials.auth() };
            (address.as_str(), entry)
        })
        .collect();
    // Serialising maps of strings cannot fail.
    serde_json::to_string(&DockerConfig { auths }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()
    }

    #[test]
    fn a_source_holds_a_user_and_password_or_a_token() {
        let pair = Credentials::from_source(&data(&[("username", "ci"), ("password", "s3:cret\n")])).unwrap();
        assert_eq!((pair.username.as_str(), pair.secret.as_str()), ("ci", "s3:cret"));
        let token = Credentials::from_source(&data(&[("token", "abc")])).unwrap();
        assert_eq!((token.username.as_str(), token.secret.as_str()), (TOKEN_USERNAME, "abc"));
        let named = Credentials::from_source(&data(&[("token", "abc"), ("username", "gitlab-ci-token")])).unwrap();
        assert_eq!(named.username, "gitlab-ci-token");
        assert_eq!(
            format!("{token:?}"),
            format!("Credentials {{ username: {TOKEN_USERNAME:?}, secret: \"<redacted>\" }}"),
            "Debug never prints the secret"
        );

        for (pairs, expected) in [
            (vec![], "neither"),
            (vec![("password", "p")], "no \"username\""),
            (vec![("password", "p"), ("token", "t"), ("username", "u")], "both"),
            (vec![("token", "\n")], "empty"),
            (vec![("token", "t"), ("username", "a:b")], "colon"),
            (vec![("token", "t"), ("username", "ci\nadmin")], "control character"),
            (vec![("password", "pass\u{1b}[2J"), ("username", "ci")], "control character"),
            (vec![("token", "   ")], "white space"),
        ] {
            let error = Credentials::from_source(&data(&pairs)).unwrap_err();
            assert!(error.contains(expected), "{pairs:?}: {error}");
        }
        let binary = BTreeMap::from([("token".to_string(), ByteString(vec![0xff, 0xfe]))]);
        assert!(Credentials::from_source(&binary).unwrap_err().contains("UTF-8"));
        let huge = "t".repeat(MAX_LEN + 1);
        assert!(Credentials::from_source(&data(&[("token", &huge)])).unwrap_err().contains("longer than"));
        assert!(Credentials::new(Some(String::new()), "t".into()).unwrap_err().contains("empty"));
        assert!(Credentials::new(None, "t".repeat(64 * 1024)).is_ok(), "the README promises 64 KiB");
        assert!(Credentials::new(None, "t".repeat(64 * 1024 + 1)).is_err());
    }

    #[test]
    fn every_published_address_gets_one_entry_with_the_kubelets_fields() {
        let document = LocalRegistryHostingV1 {
            host: Some("localhost:30500".into()),
            host_from_container_runtime: Some("localhost:30500".into()),
            host_from_cluster_network: Some("registry.registry.svc.cluster.local:5000".into()),
            help: Some("https://example.com".into()),
        };
        let addresses = addresses(&document);
        assert_eq!(addresses, ["localhost:30500", "registry.registry.svc.cluster.local:5000"]);
        let credentials = Credentials { username: TOKEN_USERNAME.into(), secret: "tok:en".into() };
        let config: serde_json::Value = serde_json::from_str(&docker_config(&addresses, &credentials)).unwrap();
        let auths = config["auths"].as_object().unwrap();
        assert_eq!(auths.len(), 2);
        let entry = &auths["localhost:30500"];
        assert_eq!(entry["username"], TOKEN_USERNAME);
        assert_eq!(entry["password"], "tok:en");
        let decoded = STANDARD.decode(entry["auth"].as_str().unwrap()).unwrap();
        assert_eq!(decoded, b"oauth2accesstoken:tok:en");
    }
}
