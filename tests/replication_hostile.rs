//! The lease replication routes against anyone on the provisioning network: a batch
//! without a member's proof, with a proof for another body or another route, a replay,
//! a malformed or oversized body: each refused with its reason before anything reaches
//! the DHCP engine, and a proven, fresh batch gets through (here to a member whose DHCP
//! is off, which says so).

use std::process::Command;
use std::sync::Arc;

use shardboot::config::Config;
use shardboot::handles::Handles;
use shardboot::http::{self, HttpState};
use shardboot::mac::MacAddr;
use shardboot::owner::peer_auth::MemberSecret;
use shardboot::owner::Resolver;
use shardboot::replication::wire::{encode_batch, Batch, Epoch, MAX_BODY};
use shardboot::replication::{BATCH_PATH, SNAPSHOT_PATH};
use shardboot::store::{Lease, LeaseEffect, LeaseState, SharedChange};

const SECRET: &[u8] = b"replication-test-secret-0123456789abcdef\n";

mod common;

struct Member {
    http: common::HttpOnLoopback,
    dir: tempfile::TempDir,
}

fn start() -> Member {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let text = format!(
        "[owner]\nself = \"a\"\nmember_secret_file = \"{}\"\n\
         [[member]]\nname = \"a\"\nhttp_url = \"http://127.0.0.1:9\"\n\
         [[member]]\nname = \"b\"\nhttp_url = \"http://127.0.0.1:9\"\n",
        secret.display()
    );
    let config = Config::from_toml_with_overrides(&text, &[]).unwrap();
    let store = shardboot::store::open(&dir.path().join("state")).unwrap();
    let committer = shardboot::store::Committer::start(store.clone(), Default::default()).unwrap();
    let resolver = Resolver::new(&config)
        .unwrap()
        .with_member_secret(Arc::new(MemberSecret::from_lines(SECRET).unwrap()));
    let state = Arc::new(HttpState {
        config: Arc::new(config.clone()),
        store,
        committer,
        policies: Arc::new(shardboot::dhcp::host_policy::HostPolicies::in_memory()),
        auth: http::auth::TokenAuth::new(None),
        dhcp: None,
        files: shardboot::tftp::FileRoot::new(shardboot::config::TftpSettings::default()),
        settings: config.http.clone(),
        resolver: Arc::new(resolver),
        handles: Handles::default(),
        chain_check: Default::default(),
        replication: None,
        replays: Default::default(),
        shared: None,
        dhcp6: None,
    });
    Member {
        http: common::HttpOnLoopback::start(state),
        dir,
    }
}

fn batch(seq: u64) -> Vec<u8> {
    encode_batch(&Batch {
        epoch: Epoch {
            started: 1_700_000_000,
            nonce: 7,
        },
        seq,
        catch_up: false,
        changes: vec![SharedChange::V4(LeaseEffect::Put(Lease {
            ip: "198.51.100.7".parse().unwrap(),
            mac: MacAddr([2, 0, 0, 0, 0, 7]),
            state: LeaseState::Bound,
            starts: 1_700_000_000,
            expires: 1_700_003_600,
            hostname: Some("node-7".into()),
            client_id: None,
            machine_id: None,
            arch: None,
        }))],
    })
}

/// POSTs `body` to `path` with the given member and proof headers; (status, body).
fn post(
    m: &Member,
    path: &str,
    member: Option<&str>,
    proof: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let file = m.dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "-", "-w", "\n%{http_code}", "--data-binary"])
        .arg(format!("@{}", file.display()));
    if let Some(name) = member {
        cmd.args(["-H", &format!("x-shardboot-member: {name}")]);
    }
    if let Some(p) = proof {
        cmd.args(["-H", &format!("x-shardboot-proof: {p}")]);
    }
    let out = cmd
        .arg(format!("http://{}{path}", m.http.addr))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.trim_end().to_string())
}

#[test]
fn only_a_proven_fresh_batch_gets_through() {
    let m = start();
    let secret = MemberSecret::from_lines(SECRET).unwrap();
    let other = MemberSecret::from_lines(b"not-the-member-secret-0123456789abcdef\n").unwrap();
    let body = batch(5);
    let proof = secret.prove_message("b", BATCH_PATH, &body);

    assert_eq!(
        post(&m, BATCH_PATH, None, None, &body),
        (403, "no member named".into())
    );
    assert_eq!(
        post(&m, BATCH_PATH, Some("b"), None, &body),
        (403, "no valid proof".into())
    );
    let forged = other.prove_message("b", BATCH_PATH, &body);
    assert_eq!(
        post(&m, BATCH_PATH, Some("b"), Some(&forged), &body),
        (403, "no valid proof".into())
    );
    // A proof binds the sender's name, the body and the route.
    assert_eq!(
        post(&m, BATCH_PATH, Some("c"), Some(&proof), &body),
        (403, "no valid proof".into())
    );
    assert_eq!(
        post(&m, BATCH_PATH, Some("b"), Some(&proof), &batch(6)),
        (403, "no valid proof".into())
    );
    assert_eq!(
        post(&m, SNAPSHOT_PATH, Some("b"), Some(&proof), &body),
        (403, "no valid proof".into())
    );
    // Proven but not a batch.
    let junk = b"SBR1 and then nothing a batch has".to_vec();
    let junk_proof = secret.prove_message("b", BATCH_PATH, &junk);
    assert_eq!(
        post(&m, BATCH_PATH, Some("b"), Some(&junk_proof), &junk),
        (400, "malformed batch".into())
    );
    // Proven and fresh: through to DHCP (off here), once.
    assert_eq!(
        post(&m, BATCH_PATH, Some("b"), Some(&proof), &body),
        (503, "DHCP is off here".into())
    );
    assert_eq!(
        post(&m, BATCH_PATH, Some("b"), Some(&proof), &body),
        (409, "replayed or out of order".into())
    );
    // One that was overtaken by a later one gets through once, too.
    let earlier = batch(4);
    let earlier_proof = secret.prove_message("b", BATCH_PATH, &earlier);
    for want in [503, 409] {
        assert_eq!(
            post(&m, BATCH_PATH, Some("b"), Some(&earlier_proof), &earlier).0,
            want
        );
    }
    // Larger than any batch: refused before it is read whole.
    let huge = vec![0u8; MAX_BODY + 1];
    assert_eq!(post(&m, BATCH_PATH, Some("b"), Some(&proof), &huge).0, 413);
}
