//! `--metrics-auth`: /metrics only for callers Kubernetes authenticates and authorizes, as controller-runtime's
//! secure metrics serving does. The bearer token is checked with a TokenReview, then the caller must be allowed
//! `get` on the non-resource URL `/metrics` (a SubjectAccessReview): Prometheus's ServiceAccount bound to the
//! chart's `<release>-metrics-reader` ClusterRole, for instance. Answers are kept for [`REMEMBER`] so every scrape
//! does not cost two API requests: a right revoked meanwhile stays granted that long.
//!
//! An unauthenticated client must not be able to load the API server: a token never seen allowed is reviewed at
//! most [`REVIEWS_PER_SECOND`] times a second (bursts of [`REVIEW_BURST`]); beyond that the answer is 429 until
//! the budget refills. Tokens already allowed are reviewed again when their answer expires, whatever the budget.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};

/// How long an answer about a token is reused (a revoked right stays granted this long).
pub const REMEMBER: Duration = Duration::from_secs(10);
/// Reviews of tokens never seen allowed, per second on average...
pub const REVIEWS_PER_SECOND: f64 = 5.0;
/// ...and at once.
pub const REVIEW_BURST: f64 = 10.0;

#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Access {
    Allowed,
    /// No token, or one Kubernetes does not accept: 401.
    Unauthenticated(String),
    /// A valid token whose user may not read /metrics: 403.
    Forbidden(String),
    /// Too many unknown tokens to review now: 429.
    Throttled,
}

/// What is remembered of one token, by a keyed hash (the token itself is never kept).
#[derive(Default)]
struct Memory {
    answers: HashMap<u64, (Access, Instant)>,
    /// Tokens allowed before, whose expired answer may be renewed whatever the budget.
    allowed_before: HashMap<u64, Instant>,
    budget: f64,
    refilled: Option<Instant>,
}

pub struct MetricsAuth {
    client: Client,
    hasher: std::collections::hash_map::RandomState,
    memory: Mutex<Memory>,
}

impl MetricsAuth {
    pub fn new(client: Client) -> Self {
        let memory = Memory { budget: REVIEW_BURST, ..Memory::default() };
        Self { client, hasher: Default::default(), memory: Mutex::new(memory) }
    }

    /// Decides for the request's `Authorization` header.
    pub async fn decide(&self, authorization: Option<&str>) -> Access {
        let token = match bearer_token(authorization) {
            Ok(token) => token,
            Err(why) => return Access::Unauthenticated(why.into()),
        };
        let mut hasher = self.hasher.build_hasher();
        hasher.write(token.as_bytes());
        let key = hasher.finish();
        let now = Instant::now();
        {
            let mut memory = self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            memory.answers.retain(|_, (_, at)| now.duration_since(*at) < REMEMBER);
            memory.allowed_before.retain(|_, at| now.duration_since(*at) < 10 * REMEMBER);
            if let Some((decision, _)) = memory.answers.get(&key) {
                return decision.clone();
            }
            if !memory.allowed_before.contains_key(&key) && !memory.spend(now) {
                return Access::Throttled;
            }
        }
        let decision = self.review(token).await;
        let mut memory = self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if decision == Access::Allowed {
            memory.allowed_before.insert(key, now);
        }
        memory.answers.insert(key, (decision.clone(), now));
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

impl Memory {
    /// Takes one review from the budget, refilled at [`REVIEWS_PER_SECOND`] up to [`REVIEW_BURST`].
    fn spend(&mut self, now: Instant) -> bool {
        if let Some(then) = self.refilled {
            let earned = now.duration_since(then).as_secs_f64() * REVIEWS_PER_SECOND;
            self.budget = (self.budget + earned).min(REVIEW_BURST);
        }
        self.refilled = Some(now);
        if self.budget < 1.0 {
            return false;
        }
        self.budget -= 1.0;
        true
    }
}

/// The token of an `Authorization: Bearer <token>` header (RFC 6750: the scheme in any case, one token of
/// `b64token` characters, nothing after it).
fn bearer_token(authorization: Option<&str>) -> Result<&str, &'static str> {
    let mut words = authorization.ok_or("a bearer token is required")?.split_ascii_whitespace();
    let scheme = words.next().ok_or("a bearer token is required")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("a bearer token is required");
    }
    let token = words.next().ok_or("the Authorization header holds no token after Bearer")?;
    if words.next().is_some() {
        return Err("the Authorization header must be `Bearer <token>` and nothing more");
    }
    let body = token.trim_end_matches('=');
    let b64token = !body.is_empty() && body.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
    if !b64token {
        return Err("the bearer token holds characters no token has");
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_one_scheme_in_any_case_and_one_token() {
        assert_eq!(bearer_token(Some("Bearer abc.DEF-_~+/=")), Ok("abc.DEF-_~+/="));
        assert_eq!(bearer_token(Some("bearer abc")), Ok("abc"), "schemes are case-insensitive");
        assert_eq!(bearer_token(Some("BEARER   abc  ")), Ok("abc"));
        for (header, why) in [
            (None, "required"),
            (Some(""), "required"),
            (Some("Basic dXNlcjpwdw=="), "required"),
            (Some("Bearer"), "no token"),
            (Some("Bearer abc junk"), "nothing more"),
            (Some("Bearer a\u{7}b"), "characters"),
            (Some("Bearer ===="), "characters"),
        ] {
            let error = bearer_token(header).expect_err(&format!("{header:?}"));
            assert!(error.contains(why), "{header:?}: {error}");
        }
    }

    #[test]
    fn unknown_tokens_are_reviewed_at_a_bounded_rate() {
        let start = Instant::now();
        let mut memory = Memory { budget: REVIEW_BURST, ..Memory::default() };
        let burst = (0..300).filter(|_| memory.spend(start)).count();
        assert_eq!(burst as f64, REVIEW_BURST, "300 new tokens at once cost a burst of reviews");
        let later = start + Duration::from_secs(2);
        let refilled = (0..300).filter(|_| memory.spend(later)).count();
        assert_eq!(refilled as f64, 2.0 * REVIEWS_PER_SECOND, "then the rate");
        let much_later = start + Duration::from_secs(3600);
        assert_eq!(
            (0..300).filter(|_| memory.spend(much_later)).count() as f64,
            REVIEW_BURST,
            "never more than a burst"
        );
    }
}
