//! `--metrics-auth`: /metrics only for callers Kubernetes authenticates and authorizes, as controller-runtime's
//! secure metrics serving does. The bearer token is checked with a TokenReview, then the caller must be allowed
//! `get` on the non-resource URL `/metrics` (a SubjectAccessReview): Prometheus's ServiceAccount bound to the
//! chart's `<release>-metrics-reader` ClusterRole, for instance. Answers are kept for a short while so every scrape
//! does not cost two API requests.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};

/// How long an answer about a token is reused.
const REMEMBER: Duration = Duration::from_secs(10);

#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Access {
    Allowed,
    /// No token, or one Kubernetes does not accept: 401.
    Unauthenticated(String),
    /// A valid token whose user may not read /metrics: 403.
    Forbidden(String),
}

pub struct MetricsAuth {
    client: Client,
    hasher: std::collections::hash_map::RandomState,
    answers: Mutex<HashMap<u64, (Access, Instant)>>,
}

impl MetricsAuth {
    pub fn new(client: Client) -> Self {
        Self { client, hasher: Default::default(), answers: Mutex::new(HashMap::new()) }
    }

    /// Decides for the request's `Authorization` header.
    pub async fn decide(&self, authorization: Option<&str>) -> Access {
        let Some(token) =
            authorization.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim).filter(|t| !t.is_empty())
        else {
            return Access::Unauthenticated("a bearer token is required".into());
        };
        // Only a keyed hash of the token is kept, never the token.
        let mut hasher = self.hasher.build_hasher();
        hasher.write(token.as_bytes());
        let key = hasher.finish();
        let now = Instant::now();
        if let Ok(answers) = self.answers.lock()
            && let Some((decision, at)) = answers.get(&key)
            && now.duration_since(*at) < REMEMBER
        {
            return decision.clone();
        }
        let decision = self.review(token).await;
        if let Ok(mut answers) = self.answers.lock() {
            answers.retain(|_, (_, at)| now.duration_since(*at) < REMEMBER);
            answers.insert(key, (decision.clone(), now));
        }
        decision
    }

    async fn review(&self, token: &str) -> Access {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_string(), ..TokenReviewSpec::default() },
            ..TokenReview::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await
        {
            Ok(reviewed) => reviewed,
            Err(error) => return Access::Unauthenticated(format!("the token could not be reviewed: {error}")),
        };
        let status = reviewed.status.unwrap_or_default();
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Access::Unauthenticated("the token is not valid".into());
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let username = user.username.unwrap_or_default();
        match Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &access).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => Access::Allowed,
            Ok(_) => Access::Forbidden(format!("{username} may not get /metrics")),
            Err(error) => Access::Forbidden(format!("access could not be reviewed: {error}")),
        }
    }
}
