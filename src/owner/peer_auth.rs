//! Members prove their health answers to each other with a shared secret.
//!
//! A member's `/healthz` answer carries claims other members act on: its member-list
//! fingerprint (a mismatch stops a member from starting) and the end of its membership
//! transition (which holds back fresh allocation). Anyone on the provisioning network
//! who can answer for a member's address could otherwise forge them. So the prober sends
//! a fresh random challenge, and the member answers with an HMAC-SHA256 over the
//! challenge and every claim, keyed by a secret all members share. A replayed or
//! altered answer does not verify; an answer that does not verify counts as a failed
//! probe and its claims are ignored.
//!
//! Why a shared secret and not mutual TLS: the member URLs are the boot listeners,
//! plain HTTP because firmware speaks nothing else; one secret (a Kubernetes Secret
//! mounted into every pod) needs no certificate per member and no clock agreement. The
//! secret file may hold several lines: the first signs, every line verifies, so a new secret can be rolled
//! out member by member before the old one is removed.
//!
//! With a shared lease store and no secret file, the secret is the one the store keeps
//! (`shared::member_secret`): members already trust that database with every binding.

use std::path::{Path, PathBuf};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Shortest secret accepted: 32 octets, the HMAC-SHA256 block's worth of strength.
pub const MIN_SECRET_LEN: usize = 32;
/// Largest secret file read.
const MAX_FILE_LEN: u64 = 64 * 1024;
/// Octets of randomness in a challenge (sent as 32 hex digits).
const CHALLENGE_LEN: usize = 16;
/// Separate the uses of the key from each other.
const HEALTH_CONTEXT: &[u8] = b"shardboot/healthz/v1";
const PROBE_CONTEXT: &[u8] = b"shardboot/healthz-probe/v1";
const EVENTS_REQUEST_CONTEXT: &[u8] = b"shardboot/events-request/v1";
const EVENTS_ANSWER_CONTEXT: &[u8] = b"shardboot/events-answer/v1";
const BOARD_REQUEST_CONTEXT: &[u8] = b"shardboot/board-request/v1";
const BOARD_ANSWER_CONTEXT: &[u8] = b"shardboot/board-answer/v1";

/// The header a prober sends: the challenge, 32 lowercase hex digits.
pub const CHALLENGE_HEADER: &str = "x-shardboot-challenge";
/// The header a prober sends with a secret: the HMAC over its challenge, so a member
/// tells its claims only to members.
pub const PROBER_PROOF_HEADER: &str = "x-shardboot-prober-proof";
/// The header the answer carries: the answering member's name.
pub const MEMBER_HEADER: &str = "x-shardboot-member";
/// The header the answer carries: the HMAC over the challenge and the claims, in hex.
pub const PROOF_HEADER: &str = "x-shardboot-proof";

/// Why the member secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file cannot be read.
    #[error("owner.member_secret_file {path}: {source}")]
    Unreadable {
        /// The configured path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Larger than any secret file.
    #[error("owner.member_secret_file {path}: larger than {MAX_FILE_LEN} octets; is this the right file?")]
    TooLarge {
        /// The configured path.
        path: PathBuf,
    },
    /// No line long enough to be a secret.
    #[error("owner.member_secret_file {path}: no secret of at least {MIN_SECRET_LEN} characters (one secret per line; `openssl rand -hex 32` makes one)")]
    NoSecret {
        /// The configured path.
        path: PathBuf,
    },
    /// The secret in the shared lease store is not one this build made (too short).
    #[error("the member secret in the shared lease store (table shardboot_member_secret) is shorter than {MIN_SECRET_LEN} characters; delete its row and restart the members, or set owner.member_secret_file")]
    StoredTooShort,
}

/// The keys of the member secret: the first signs, all verify.
pub struct MemberSecret {
    keys: Vec<hmac::Key>,
}

impl std::fmt::Debug for MemberSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        f.debug_struct("MemberSecret")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl MemberSecret {
    /// Reads the secret file: one secret per line, blank lines and `#` comments
    /// skipped. A line shorter than [`MIN_SECRET_LEN`] is an error rather than a weak
    /// key.
    pub fn load(path: &Path) -> Result<Self, SecretError> {
        let unreadable = |source| SecretError::Unreadable {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(unreadable)?.len();
        if len > MAX_FILE_LEN {
            return Err(SecretError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read(path).map_err(unreadable)?;
        Self::from_lines(&text).ok_or_else(|| SecretError::NoSecret {
            path: path.to_path_buf(),
        })
    }

    /// The secret from the text of a secret file; None when a line is too short or
    /// there is none.
    pub fn from_lines(text: &[u8]) -> Option<Self> {
        let lines: Vec<&[u8]> = text
            .split(|b| *b == b'\n')
            .map(<[u8]>::trim_ascii)
            .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
            .collect();
        if lines.is_empty() || lines.iter().any(|l| l.len() < MIN_SECRET_LEN) {
            return None;
        }
        Some(Self {
            keys: lines
                .iter()
                .map(|l| hmac::Key::new(hmac::HMAC_SHA256, l))
                .collect(),
        })
    }

    /// The proof for `claim`, in lowercase hex.
    pub fn prove(&self, claim: &HealthClaim<'_>) -> String {
        self.sign(&claim.message())
    }

    /// Whether `proof` (hex) is the proof of `claim` under any of the keys.
    pub fn verify(&self, claim: &HealthClaim<'_>, proof: &str) -> bool {
        self.check(&claim.message(), proof)
    }

    /// The prober's proof of its challenge.
    pub fn prove_probe(&self, challenge: &str) -> String {
        self.sign(&message(&[PROBE_CONTEXT, challenge.as_bytes()]))
    }

    /// Whether `proof` is a member's proof of `challenge`. A replay of a captured probe
    /// verifies, and earns the replayer only the answer it already saw.
    pub fn verify_probe(&self, challenge: &str, proof: &str) -> bool {
        self.check(&message(&[PROBE_CONTEXT, challenge.as_bytes()]), proof)
    }

    /// A member's proof that it asks for `mac`'s timeline events with `challenge`.
    /// A replay of a captured request earns only the answer already seen.
    pub fn prove_events_request(&self, challenge: &str, mac: &str) -> String {
        self.sign(&message(&[
            EVENTS_REQUEST_CONTEXT,
            challenge.as_bytes(),
            mac.as_bytes(),
        ]))
    }

    /// Whether `proof` is a member's request for `mac`'s events with `challenge`.
    pub fn verify_events_request(&self, challenge: &str, mac: &str, proof: &str) -> bool {
        let m = message(&[EVENTS_REQUEST_CONTEXT, challenge.as_bytes(), mac.as_bytes()]);
        self.check(&m, proof)
    }

    /// The answering member's proof of its events answer: the challenge, its name and
    /// the whole body, so no event can be added, dropped or changed on the way.
    pub fn prove_events_answer(&self, challenge: &str, member: &str, body: &[u8]) -> String {
        self.sign(&answer_message(
            EVENTS_ANSWER_CONTEXT,
            challenge,
            member,
            body,
        ))
    }

    /// Whether `proof` is `member`'s proof of `body` for `challenge`.
    pub fn verify_events_answer(
        &self,
        challenge: &str,
        member: &str,
        body: &[u8],
        proof: &str,
    ) -> bool {
        self.check(
            &answer_message(EVENTS_ANSWER_CONTEXT, challenge, member, body),
            proof,
        )
    }

    /// A member's proof that it asks for the board (its machines, pools and pool
    /// fill) with `challenge`.
    pub fn prove_board_request(&self, challenge: &str) -> String {
        self.sign(&message(&[BOARD_REQUEST_CONTEXT, challenge.as_bytes()]))
    }

    /// Whether `proof` is a member's request for the board with `challenge`.
    pub fn verify_board_request(&self, challenge: &str, proof: &str) -> bool {
        self.check(
            &message(&[BOARD_REQUEST_CONTEXT, challenge.as_bytes()]),
            proof,
        )
    }

    /// The answering member's proof of its board: the challenge, its name and the
    /// whole body.
    pub fn prove_board_answer(&self, challenge: &str, member: &str, body: &[u8]) -> String {
        self.sign(&answer_message(
            BOARD_ANSWER_CONTEXT,
            challenge,
            member,
            body,
        ))
    }

    /// Whether `proof` is `member`'s proof of its board `body` for `challenge`.
    pub fn verify_board_answer(
        &self,
        challenge: &str,
        member: &str,
        body: &[u8],
        proof: &str,
    ) -> bool {
        self.check(
            &answer_message(BOARD_ANSWER_CONTEXT, challenge, member, body),
            proof,
        )
    }

    fn sign(&self, message: &[u8]) -> String {
        hex(hmac::sign(&self.keys[0], message).as_ref())
    }

    fn check(&self, message: &[u8], proof: &str) -> bool {
        let Some(tag) = unhex(proof) else {
            return false;
        };
        // `hmac::verify` compares in constant time; every key is tried.
        self.keys
            .iter()
            .fold(false, |ok, k| ok | hmac::verify(k, message, &tag).is_ok())
    }
}

/// What `check-config` prints and `serve` logs about the member secret: a file others
/// can read, or several members trusting each other without one.
pub fn warnings(owner: &crate::config::OwnerSettings, members: usize) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(path) = &owner.member_secret_file {
        out.extend(crate::secret_file::mode_warning(
            "owner.member_secret_file",
            path,
            "the member secret and forge any member's health answers",
        ));
    }
    if owner.insecure_members && owner.member_secret_file.is_none() && members > 1 {
        out.push(
            "owner.insecure_members: health answers from members are not authenticated; \
             anyone who can answer for a member's address can mark it alive, stop a member \
             from starting or hold back its allocation"
                .to_string(),
        );
    }
    out
}

/// What a member's health answer claims, bound to the prober's challenge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthClaim<'a> {
    /// The prober's challenge, as sent.
    pub challenge: &'a str,
    /// The answering member's name.
    pub member: &'a str,
    /// Its member-list fingerprint.
    pub fingerprint: &'a str,
    /// The end of its membership transition (Unix seconds; 0: none).
    pub transition_until: u64,
}

impl HealthClaim<'_> {
    fn message(&self) -> Vec<u8> {
        let until = self.transition_until.to_string();
        message(&[
            HEALTH_CONTEXT,
            self.challenge.as_bytes(),
            self.member.as_bytes(),
            self.fingerprint.as_bytes(),
            until.as_bytes(),
        ])
    }
}

/// Every field length-prefixed, the context first, so no two different field lists
/// share a message.
/// What an answer's proof covers: its kind (`context`), the asker's challenge, the
/// answering member's name and the whole body.
fn answer_message(context: &[u8], challenge: &str, member: &str, body: &[u8]) -> Vec<u8> {
    message(&[context, challenge.as_bytes(), member.as_bytes(), body])
}

fn message(fields: &[&[u8]]) -> Vec<u8> {
    let mut m = Vec::with_capacity(128);
    for field in fields {
        m.extend_from_slice(&(field.len() as u32).to_be_bytes());
        m.extend_from_slice(field);
    }
    m
}

/// A fresh challenge: 16 octets from the OS generator, as 32 hex digits. None only if
/// the OS generator fails, and then the probe is not sent.
pub fn new_challenge() -> Option<String> {
    let mut b = [0u8; CHALLENGE_LEN];
    SystemRandom::new().fill(&mut b).ok()?;
    Some(hex(&b))
}

/// A challenge header value as a prober sends it; anything else (other lengths, other
/// characters) is not answered with claims, so request data of any other shape never
/// reaches a response header.
pub fn parse_challenge(value: &[u8]) -> Option<&str> {
    let ok = value.len() == 2 * CHALLENGE_LEN
        && value
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    ok.then(|| std::str::from_utf8(value).ok()).flatten()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"0123456789abcdef0123456789abcdef";
    const B: &[u8] = b"fedcba9876543210fedcba9876543210";

    fn claim<'a>(challenge: &'a str, until: u64) -> HealthClaim<'a> {
        HealthClaim {
            challenge,
            member: "b",
            fingerprint: "00ff",
            transition_until: until,
        }
    }

    #[test]
    fn a_proof_verifies_only_for_the_same_challenge_and_claims() {
        let s = MemberSecret::from_lines(A).unwrap();
        let c = new_challenge().unwrap();
        let proof = s.prove(&claim(&c, 0));
        assert!(s.verify(&claim(&c, 0), &proof));
        // A replay to another challenge, or any altered claim, fails.
        let other = new_challenge().unwrap();
        assert_ne!(c, other);
        assert!(!s.verify(&claim(&other, 0), &proof));
        assert!(!s.verify(&claim(&c, u64::MAX), &proof));
        let renamed = HealthClaim {
            member: "a",
            ..claim(&c, 0)
        };
        assert!(!s.verify(&renamed, &proof));
        assert!(!s.verify(&claim(&c, 0), "zz"));
        assert!(!s.verify(&claim(&c, 0), ""));
        // Another secret proves nothing.
        let t = MemberSecret::from_lines(B).unwrap();
        assert!(!t.verify(&claim(&c, 0), &proof));
    }

    #[test]
    fn a_probe_proof_is_bound_to_its_challenge_and_is_no_claim_proof() {
        let s = MemberSecret::from_lines(A).unwrap();
        let c = new_challenge().unwrap();
        let p = s.prove_probe(&c);
        assert!(s.verify_probe(&c, &p));
        assert!(!s.verify_probe(&new_challenge().unwrap(), &p));
        assert!(!MemberSecret::from_lines(B).unwrap().verify_probe(&c, &p));
        // Domain separation: a probe proof never passes as an answer's proof.
        assert!(!s.verify(&claim(&c, 0), &p));
    }

    #[test]
    fn an_events_answer_is_bound_to_its_challenge_member_and_body() {
        let s = MemberSecret::from_lines(A).unwrap();
        let c = new_challenge().unwrap();
        let req = s.prove_events_request(&c, "52:54:00:00:00:01");
        assert!(s.verify_events_request(&c, "52:54:00:00:00:01", &req));
        assert!(!s.verify_events_request(&c, "52:54:00:00:00:02", &req));
        assert!(!s.verify_probe(&c, &req), "no probe proof");
        let p = s.prove_events_answer(&c, "b", b"{\"events\":[]}");
        assert!(s.verify_events_answer(&c, "b", b"{\"events\":[]}", &p));
        assert!(!s.verify_events_answer(&c, "a", b"{\"events\":[]}", &p));
        assert!(!s.verify_events_answer(&c, "b", b"{\"events\":[1]}", &p));
        let other = new_challenge().unwrap();
        assert!(!s.verify_events_answer(&other, "b", b"{\"events\":[]}", &p));
        assert!(!MemberSecret::from_lines(B).unwrap().verify_events_answer(
            &c,
            "b",
            b"{\"events\":[]}",
            &p
        ));
    }

    #[test]
    fn a_board_request_or_answer_is_no_events_proof_and_binds_its_body() {
        let s = MemberSecret::from_lines(A).unwrap();
        let c = new_challenge().unwrap();
        let req = s.prove_board_request(&c);
        assert!(s.verify_board_request(&c, &req));
        assert!(!s.verify_board_request(&new_challenge().unwrap(), &req));
        assert!(!s.verify_probe(&c, &req) && !s.verify_events_request(&c, "", &req));
        let body = b"{\"rows\":[]}";
        let p = s.prove_board_answer(&c, "b", body);
        assert!(s.verify_board_answer(&c, "b", body, &p));
        assert!(!s.verify_board_answer(&c, "a", body, &p));
        assert!(!s.verify_board_answer(&c, "b", b"{\"rows\":[1]}", &p));
        assert!(!s.verify_events_answer(&c, "b", body, &p), "contexts apart");
    }

    #[test]
    fn every_line_verifies_and_the_first_signs_so_a_secret_can_be_rotated() {
        let old = MemberSecret::from_lines(A).unwrap();
        let both = MemberSecret::from_lines(&[B, b"\n", A].concat()).unwrap();
        let c = new_challenge().unwrap();
        assert!(both.verify(&claim(&c, 1), &old.prove(&claim(&c, 1))));
        let new_only = MemberSecret::from_lines(B).unwrap();
        assert!(new_only.verify(&claim(&c, 1), &both.prove(&claim(&c, 1))));
    }

    #[test]
    fn short_or_missing_secrets_are_refused() {
        assert!(MemberSecret::from_lines(b"").is_none());
        assert!(MemberSecret::from_lines(b"# only a comment\n\n").is_none());
        assert!(MemberSecret::from_lines(b"short\n").is_none());
        assert!(MemberSecret::from_lines(&[A, b"\nshort"].concat()).is_none());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s");
        std::fs::write(&f, "tiny\n").unwrap();
        let e = MemberSecret::load(&f).unwrap_err().to_string();
        assert!(
            e.starts_with("owner.member_secret_file ") && e.contains("at least 32"),
            "{e}"
        );
        let e = MemberSecret::load(&dir.path().join("none")).unwrap_err();
        assert!(matches!(e, SecretError::Unreadable { .. }));
    }

    #[test]
    fn only_challenges_of_the_probers_shape_are_answered() {
        let c = new_challenge().unwrap();
        assert_eq!(parse_challenge(c.as_bytes()), Some(c.as_str()));
        for bad in [
            &b""[..],
            b"00",
            b"0123456789ABCDEF0123456789abcdef",
            b"0123456789abcdef0123456789abcdeg",
            b"0123456789abcdef0123456789abcdef00",
            b"0123456789abcdef\r\n23456789abcdef",
        ] {
            assert_eq!(parse_challenge(bad), None, "{bad:?}");
        }
    }
}
