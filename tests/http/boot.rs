//! The HTTP boot routes through a real socket, driven by curl: owner resolution by
//! inventory (member name or conductor host name) and by RFC 3074 hash, the chained URL
//! for local and remote owners, fallbacks, and hostile input that must never reach a
//! script.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;

use shardboot::config::Config;
use shardboot::handles::Handles;
use shardboot::http::{self, HttpState};
use shardboot::mac::MacAddr;
use shardboot::owner::{responsible_member, Resolver};
use shardboot::tftp::{self, FileRoot, TftpMetrics};

use crate::common;

use common::qemu::{per_node_path, ConductorStub};

struct TestServer {
    addr: SocketAddr,
    http: common::HttpOnLoopback,
    handles: Handles,
    /// The root the HTTP file route serves, with its cache, for a TFTP server to share.
    files: Arc<FileRoot>,
    /// Stand-ins for conductor a, member b and conductor b (`None` when b is down).
    world: World,
    _dir: tempfile::TempDir,
}

/// The HTTP servers around member `a`: its conductor, member `b`'s boot route and `b`'s
/// conductor. The conductors hold per-node configs only for MACs whose last octet is
/// below 0x20 (a machine with a higher one is not theirs: 404); member `b` answers
/// every path, or is down.
struct World {
    conductor_a: ConductorStub,
    member_b: Option<ConductorStub>,
    member_b_url: String,
    conductor_b: ConductorStub,
}

/// The per-node config paths the conductors hold.
fn configs() -> Vec<String> {
    (0..0x20u8)
        .flat_map(|n| {
            [
                per_node_path(&format!("52:54:00:12:34:{n:02x}")),
                per_node_path(&format!("52:54:00:00:00:{n:02x}")),
            ]
        })
        .chain(["/inspector.ipxe".to_string()])
        .collect()
}

impl World {
    fn start(member_b_up: bool) -> Self {
        let configs = configs();
        let conductor_a =
            ConductorStub::start_knowing(None, "127.0.0.1:0".parse().unwrap(), Some(&configs));
        let conductor_b =
            ConductorStub::start_knowing(None, "127.0.0.2:0".parse().unwrap(), Some(&configs));
        let (member_b, member_b_url) = if member_b_up {
            let m = ConductorStub::start_knowing(None, "127.0.0.2:0".parse().unwrap(), None);
            let url = format!("http://{}", m.addr);
            (Some(m), url)
        } else {
            // A port bound and closed again: nothing listens there.
            let port = std::net::TcpListener::bind("127.0.0.2:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            (None, format!("http://127.0.0.2:{port}"))
        };
        Self {
            conductor_a,
            member_b,
            member_b_url,
            conductor_b,
        }
    }

    fn members(&self) -> String {
        format!(
            r#"
[[member]]
name = "a"
http_url = "http://127.0.0.1:18080"
conductor = "127.0.0.1"
conductor_url = "http://{}"

[[member]]
name = "b"
http_url = "{}"
conductor = "127.0.0.2:8090"
conductor_url = "http://{}"
"#,
            self.conductor_a.addr, self.member_b_url, self.conductor_b.addr
        )
    }

    fn conductor_a_url(&self, mac: &str) -> String {
        format!("http://{}{}", self.conductor_a.addr, per_node_path(mac))
    }

    fn conductor_b_url(&self, mac: &str) -> String {
        format!("http://{}{}", self.conductor_b.addr, per_node_path(mac))
    }

    /// Member `b`'s boot route as this member chains it: marked as a hop.
    fn member_b_route(&self, mac: &str) -> String {
        format!(
            "{}/v1/boot/{}/boot.ipxe?hop=1",
            self.member_b_url,
            mac.replace(':', "-")
        )
    }
}

const INVENTORY: &str = r#"
"52:54:00:00:00:0a" = "a"
"52-54-00-00-00-0b" = "127.0.0.2:8090"
"52:54:00:00:00:0c" = "not-a-member"
"52:54:00:00:00:2a" = "a"
"#;

fn start(owner: &str) -> TestServer {
    start_with(
        owner,
        shardboot::config::TftpSettings::default().max_file_size,
        true,
    )
}

/// Like [`start`], with `tftp.max_file_size` set and member `b` up or down.
fn start_with(owner: &str, max_file_size: u64, member_b_up: bool) -> TestServer {
    let world = World::start(member_b_up);
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inventory.toml");
    std::fs::write(&inv, INVENTORY).unwrap();
    let text = format!(
        "[dhcp]\nenabled = false\n[owner]\nself = \"a\"\ninsecure_members = true\ninventory = \"{}\"\n{owner}\n{}",
        inv.display(),
        world.members()
    );
    let config = Config::from_toml_with_overrides(&text, &[]).unwrap();
    let handles = Handles::default();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(root.join("snponly.efi"), &payload).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd")).unwrap();
    let tftp = shardboot::config::TftpSettings {
        root,
        max_file_size,
        ..Default::default()
    };
    let files = FileRoot::new(tftp);
    let http = serve(&config, dir.path(), files.clone(), handles.clone());
    TestServer {
        addr: http.addr,
        http,
        handles,
        files,
        world,
        _dir: dir,
    }
}

/// Serves `config`'s boot routes on loopback, with its store under `dir`.
fn serve(
    config: &Config,
    dir: &std::path::Path,
    files: Arc<FileRoot>,
    handles: Handles,
) -> common::HttpOnLoopback {
    let store = shardboot::store::open(&dir.join("state")).unwrap();
    let committer = shardboot::store::Committer::start(store.clone(), Default::default()).unwrap();
    let state = Arc::new(HttpState {
        config: Arc::new(config.clone()),
        store,
        committer,
        policies: Arc::new(shardboot::dhcp::host_policy::HostPolicies::in_memory()),
        auth: http::auth::TokenAuth::new(None),
        dhcp: None,
        files,
        settings: config.http.clone(),
        resolver: Arc::new(Resolver::new(config).unwrap()),
        handles,
        chain_check: Default::default(),
        shared: None,
        dhcp6: None,
    });
    common::HttpOnLoopback::start(state)
}

/// GET with curl; returns (status, body).
fn get(s: &TestServer, path: &str) -> (u16, String) {
    get_from(s.addr, path)
}

/// GET from the server at `addr` with curl; returns (status, body).
fn get_from(addr: SocketAddr, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--path-as-is", "-o", "-", "-w", "\n%{http_code}"])
        .arg(format!("http://{addr}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

/// The URL a script chains first (its first `chain` line).
fn chained(body: &str) -> Option<&str> {
    body.lines()
        .find_map(|l| l.strip_prefix("chain --timeout 10000 "))
        .and_then(|l| l.split_whitespace().next())
}

#[test]
fn first_stage_walks_every_nic_then_the_fallback_once() {
    let s = start("");
    let (code, body) = get(&s, "/boot.ipxe");
    assert_eq!(code, 200);
    assert!(body.starts_with("#!ipxe\n"), "{body}");
    assert!(
        body.contains(
            "chain --timeout 10000 /v1/boot/${net${shardboot-nic}/mac:hexhyp}/boot.ipxe && exit 0 || goto next_nic"
        ),
        "{body}"
    );
    assert!(
        body.contains("/v1/boot/${mac:hexhyp}/boot.ipxe"),
        "old ROMs: {body}"
    );
    assert_eq!(body.matches("fallback.ipxe").count(), 1, "{body}");
    assert_eq!(get(&s, "/healthz"), (200, "ok\n".to_string()));
}

#[test]
fn inventory_owner_decides_the_chain_and_unknown_nics_are_fast_misses() {
    let mut s = start("resolvers = [\"inventory\"]");
    // Owned by this member: its conductor's per-node config, checked first.
    let (code, body) = get(&s, "/v1/boot/52:54:00:00:00:0a/boot.ipxe");
    assert_eq!(code, 200);
    let want = s.world.conductor_a_url("52:54:00:00:00:0a");
    assert_eq!(chained(&body), Some(want.as_str()), "{body}");
    assert!(s
        .world
        .conductor_a
        .checked()
        .contains(&per_node_path("52:54:00:00:00:0a")));
    // Owned by the member beside conductor 127.0.0.2:8090, any MAC spelling: that
    // member's route, under the name asked for.
    for form in ["52:54:00:00:00:0b", "52-54-00-00-00-0B", "52540000000b"] {
        let (code, body) = get(&s, &format!("/v1/boot/{form}/boot.ipxe"));
        assert_eq!(code, 200);
        let want = s.world.member_b_route("52:54:00:00:00:0b");
        assert_eq!(chained(&body), Some(want.as_str()), "{form}: {body}");
        // The member retries its own conductor: this script does not retry it again.
        assert!(body.contains("iseq 1 1 && goto give_up"), "{body}");
    }
    let (_, body) = get(&s, "/v1/boot/52:54:00:00:00:0b/config");
    assert!(body.contains("/v1/boot/52-54-00-00-00-0b/config"), "{body}");
    // Unknown, or owned by something that is not a member: 404, so the first stage asks
    // for the next NIC at once.
    for mac in ["52:54:00:00:00:0c", "52:54:00:00:00:0d"] {
        assert_eq!(
            get(&s, &format!("/v1/boot/{mac}/boot.ipxe")).0,
            404,
            "{mac}"
        );
    }
    // Owned here, but the conductor has no config for it: a miss too, not a retry.
    assert_eq!(get(&s, "/v1/boot/52:54:00:00:00:2a/boot.ipxe").0, 404);
    // After the loop: the fallback (exit), once.
    let (code, body) = get(&s, "/v1/boot/fallback.ipxe");
    assert_eq!(code, 200);
    assert!(
        body.contains("\nexit\n") && !body.contains("chain"),
        "{body}"
    );
    assert_eq!(s.handles.http.get("local"), 1);
    assert_eq!(s.handles.http.get("remote"), 4);
    assert_eq!(s.handles.http.get("not_found"), 2);
    assert_eq!(s.handles.http.get("miss"), 1);
    assert_eq!(s.handles.http.get("fallback"), 1);
}

#[test]
fn a_member_that_does_not_answer_is_passed_over_for_its_conductor() {
    let s = start_with("resolvers = [\"inventory\"]", 1 << 20, false);
    let (code, body) = get(&s, "/v1/boot/52:54:00:00:00:0b/boot.ipxe");
    assert_eq!(code, 200);
    let want = s.world.conductor_b_url("52:54:00:00:00:0b");
    assert_eq!(chained(&body), Some(want.as_str()), "{body}");
    // A transport failure: retried from here, back through this route.
    assert!(body.contains("iseq 1 5 && goto give_up"), "{body}");
    assert!(
        body.contains(
            "chain --timeout 10000 /v1/boot/52-54-00-00-00-0b/boot.ipxe?try=2 && exit 0 ||"
        ),
        "{body}"
    );
    // The retry counts on; at the last attempt the script gives up (and the first stage
    // goes on with the next NIC).
    let (_, body) = get(&s, "/v1/boot/52:54:00:00:00:0b/boot.ipxe?try=5");
    assert!(body.contains("iseq 5 5 && goto give_up"), "{body}");
}

#[test]
fn chain_to_conductor_and_404_fallback() {
    let s = start("resolvers = [\"inventory\"]\nchain_to = \"conductor\"\nfallback = \"404\"");
    let (_, body) = get(&s, "/v1/boot/52:54:00:00:00:0b/boot.ipxe");
    let want = s.world.conductor_b_url("52:54:00:00:00:0b");
    assert_eq!(chained(&body), Some(want.as_str()), "{body}");
    assert_eq!(get(&s, "/v1/boot/52:54:00:00:00:0d/boot.ipxe").0, 404);
    assert_eq!(get(&s, "/v1/boot/fallback.ipxe").0, 404);
}

/// curl with `args` against the server; returns (status, headers and body as received).
fn curl_raw(s: &TestServer, args: &[&str], path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-i", "--path-as-is", "-w", "\n%{http_code}"])
        .args(args)
        .arg(format!("http://{}{path}", s.addr))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (raw, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), raw.to_string())
}

#[test]
fn the_boot_route_answers_head_without_a_body_escaped_colons_and_no_other_method() {
    let s = start("resolvers = [\"inventory\"]");
    let path = "/v1/boot/52:54:00:00:00:0a/boot.ipxe";
    let (code, body) = get(&s, path);
    assert_eq!(code, 200);
    // HEAD, as another member checks this route before chaining it: the same status
    // and length, no body.
    let (code, head) = curl_raw(&s, &["-I"], path);
    assert_eq!(code, 200, "{head}");
    let length = format!("content-length: {}", body.len());
    assert!(head.to_ascii_lowercase().contains(&length), "{head}");
    assert!(!head.contains("#!ipxe"), "{head}");
    // iPXE may escape a MAC's colons: the same machine, the same script.
    let (code, escaped) = get(&s, "/v1/boot/52%3A54%3a00%3A00%3A00%3A0a/boot.ipxe");
    assert_eq!((code, escaped), (200, body));
    // Nothing else is served on the route.
    let (code, _) = curl_raw(&s, &["-X", "POST"], path);
    assert_eq!(code, 404);
    let (_, metrics) = get(&s, "/metrics");
    assert!(
        metrics.contains(
            "shardboot_http_requests_total{route=\"/v1/boot/{mac}/{name}\",status=\"200\"} 3"
        ),
        "{metrics}"
    );
}

#[test]
fn a_fallback_url_is_checked_like_a_conductor() {
    let mut inspection = ConductorStub::start_knowing(
        None,
        "127.0.0.1:0".parse().unwrap(),
        Some(&["/inspector.ipxe".to_string()]),
    );
    let addr = inspection.addr;
    let url = |file: &str| format!("http://{addr}/{file}");
    let fallback =
        |file: &str| format!("resolvers = [\"inventory\"]\nfallback = \"{}\"", url(file));
    let s = start(&fallback("inspector.ipxe"));
    let (code, body) = get(&s, "/v1/boot/fallback.ipxe");
    assert_eq!(code, 200);
    assert_eq!(
        chained(&body),
        Some(url("inspector.ipxe").as_str()),
        "{body}"
    );
    assert!(
        body.contains("/v1/boot/fallback.ipxe?try=2"),
        "a failure retries the fallback: {body}"
    );
    settle();
    assert_eq!(inspection.checked(), ["/inspector.ipxe"]);
    // A fallback its server has no file for: 404, and the first stage says so and ends.
    let s = start(&fallback("missing.ipxe"));
    assert_eq!(get(&s, "/v1/boot/fallback.ipxe").0, 404);
}

/// `n` GETs of `path` at once; their (status, body) pairs.
fn get_at_once(s: &TestServer, path: &str, n: usize) -> Vec<(u16, String)> {
    let addr = s.addr;
    std::thread::scope(|scope| {
        let asks: Vec<_> = (0..n)
            .map(|_| scope.spawn(move || get_from(addr, path)))
            .collect();
        asks.into_iter().map(|a| a.join().unwrap()).collect()
    })
}

/// The stand-ins record a request after answering it: give the last one time to land
/// before counting.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(200));
}

#[test]
fn concurrent_boots_share_one_check_per_url_and_cache_period() {
    let mut s = start("resolvers = [\"inventory\"]");
    let mac = "52:54:00:00:00:0a";
    let url = s.world.conductor_a_url(mac);
    let path = format!("/v1/boot/{mac}/boot.ipxe");
    let heads = |s: &mut TestServer| {
        settle();
        let checked = s.world.conductor_a.checked();
        checked.iter().filter(|p| **p == per_node_path(mac)).count()
    };
    // 50 at once (a machine's retries, a member's HEAD and the machine's GET, a burst):
    // one HEAD in flight, the others wait for its answer.
    let t0 = std::time::Instant::now();
    for (code, body) in get_at_once(&s, &path, 50) {
        assert_eq!(code, 200);
        assert_eq!(chained(&body), Some(url.as_str()), "{body}");
    }
    // The check was made before this: its answer is kept until a period after it.
    let answered = std::time::Instant::now();
    assert_eq!(heads(&mut s), 1, "one check for 50 concurrent requests");
    // Within the cache period: the answer is kept.
    for _ in 0..10 {
        assert_eq!(get(&s, &path).0, 200);
    }
    assert!(
        t0.elapsed() < http::chain_check::CACHE_TTL,
        "too slow to tell"
    );
    assert_eq!(heads(&mut s), 1, "no check within the cache period");
    // A miss is kept too, and is still a miss.
    for _ in 0..5 {
        assert_eq!(get(&s, "/v1/boot/52:54:00:00:00:2a/boot.ipxe").0, 404);
    }
    settle();
    let missed = per_node_path("52:54:00:00:00:2a");
    assert_eq!(
        s.world
            .conductor_a
            .checked()
            .iter()
            .filter(|p| **p == missed)
            .count(),
        1
    );
    // After it: checked again, once.
    let period = http::chain_check::CACHE_TTL + std::time::Duration::from_millis(100);
    std::thread::sleep(period.saturating_sub(answered.elapsed()));
    for (code, _) in get_at_once(&s, &path, 20) {
        assert_eq!(code, 200);
    }
    assert_eq!(heads(&mut s), 2, "one more check after the cache period");
}

#[test]
fn a_hop_is_answered_from_this_members_view_and_never_sent_on() {
    let mut s = start("resolvers = [\"inventory\"]");
    let mac = "52:54:00:00:00:0b";
    // Sent here by another member (whose view said this member owns it), while this
    // member's view says b does: b's conductor, never b's route.
    let (code, body) = get(&s, "/v1/boot/52-54-00-00-00-0b/boot.ipxe?hop=1");
    assert_eq!(code, 200);
    let want = s.world.conductor_b_url(mac);
    assert_eq!(chained(&body), Some(want.as_str()), "{body}");
    // Retried from here, still as a hop.
    assert!(
        body.contains(
            "chain --timeout 10000 /v1/boot/52-54-00-00-00-0b/boot.ipxe?hop=2 && exit 0 ||"
        ),
        "{body}"
    );
    let (_, body) = get(&s, "/v1/boot/52-54-00-00-00-0b/boot.ipxe?hop=2");
    assert_eq!(chained(&body), Some(want.as_str()), "{body}");
    settle();
    let member_b = s.world.member_b.as_mut().unwrap();
    assert_eq!(
        member_b.checked(),
        Vec::<String>::new(),
        "no HEAD to a member"
    );
    assert_eq!(member_b.paths(), Vec::<String>::new());
    assert_eq!(s.world.conductor_b.checked(), [per_node_path(mac)]);
    // Without the mark, b's route, marked, checked once.
    let (_, body) = get(&s, &format!("/v1/boot/{mac}/boot.ipxe"));
    let want = s.world.member_b_route(mac);
    assert_eq!(chained(&body), Some(want.as_str()), "{body}");
    settle();
    assert_eq!(
        s.world.member_b.as_mut().unwrap().checked(),
        ["/v1/boot/52-54-00-00-00-0b/boot.ipxe?hop=1"]
    );
}

#[test]
fn members_whose_views_disagree_do_not_bounce_a_machine_on() {
    // a says b owns the machine, b says c does: a checks and chains b's route (a hop),
    // b answers with c's conductor and never asks or chains c's route.
    let mut conductor_c = ConductorStub::start_knowing(None, "127.0.0.1:0".parse().unwrap(), None);
    let mut member_c = ConductorStub::start_knowing(None, "127.0.0.1:0".parse().unwrap(), None);
    let mac = "52:54:00:00:00:0e";
    let config = |me: &str, owner: &str, b_url: &str, dir: &std::path::Path| {
        let inv = dir.join("inventory.toml");
        std::fs::write(&inv, format!("\"{mac}\" = \"{owner}\"\n")).unwrap();
        let text = format!(
            r#"
[dhcp]
enabled = false
[owner]
self = "{me}"
insecure_members = true
resolvers = ["inventory"]
inventory = "{}"
[[member]]
name = "a"
http_url = "http://127.0.0.1:9"
[[member]]
name = "b"
http_url = "{b_url}"
[[member]]
name = "c"
http_url = "http://{}"
conductor_url = "http://{}"
"#,
            inv.display(),
            member_c.addr,
            conductor_c.addr
        );
        Config::from_toml_with_overrides(&text, &[]).unwrap()
    };
    let files = || FileRoot::new(shardboot::config::TftpSettings::default());
    let dir_b = tempfile::tempdir().unwrap();
    let b = serve(
        &config("b", "c", "http://127.0.0.1:10", dir_b.path()),
        dir_b.path(),
        files(),
        Handles::default(),
    );
    let b_url = format!("http://{}", b.addr);
    let dir_a = tempfile::tempdir().unwrap();
    let handles = Handles::default();
    let a = serve(
        &config("a", "b", &b_url, dir_a.path()),
        dir_a.path(),
        files(),
        handles.clone(),
    );
    let (code, body) = get_from(a.addr, "/v1/boot/52-54-00-00-00-0e/boot.ipxe");
    assert_eq!(code, 200);
    let hop = format!("{b_url}/v1/boot/52-54-00-00-00-0e/boot.ipxe?hop=1");
    assert_eq!(chained(&body), Some(hop.as_str()), "{body}");
    // The machine follows the chain to b, as iPXE would.
    let (code, body) = get_from(b.addr, "/v1/boot/52-54-00-00-00-0e/boot.ipxe?hop=1");
    assert_eq!(code, 200);
    let direct = format!("http://{}{}", conductor_c.addr, per_node_path(mac));
    assert_eq!(chained(&body), Some(direct.as_str()), "{body}");
    settle();
    assert_eq!(
        member_c.checked(),
        Vec::<String>::new(),
        "c's route never asked"
    );
    assert_eq!(member_c.paths(), Vec::<String>::new());
    // a's HEAD and the machine's GET at b share b's one check of c's conductor.
    assert_eq!(conductor_c.checked(), [per_node_path(mac)]);
    assert_eq!(handles.http.get("remote"), 1);
}

#[test]
fn hash_resolver_agrees_with_rfc3074_buckets() {
    let s = start("resolvers = [\"hash\"]");
    for n in 0..40u8 {
        let mac = MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, n]);
        let want = responsible_member(&mac, &["a", "b"]).unwrap();
        let (code, body) = get(&s, &format!("/v1/boot/{mac}/boot.ipxe"));
        let m = mac.to_string();
        match (want, n < 0x20) {
            ("a", true) => {
                assert_eq!(code, 200);
                assert_eq!(chained(&body), Some(s.world.conductor_a_url(&m).as_str()));
            }
            // The hash gave it to this member, whose conductor does not know it.
            ("a", false) => assert_eq!(code, 404, "{mac}: {body}"),
            _ => {
                assert_eq!(code, 200);
                assert_eq!(chained(&body), Some(s.world.member_b_route(&m).as_str()));
            }
        }
    }
}

#[test]
fn hostile_macs_get_400_and_are_never_echoed() {
    let s = start("");
    let attacks = [
        "$%7Bnet0/mac%7D",
        "${net0/mac}",
        "52:54:00:00:00:0a%0Achain%20http://evil",
        "52:54:00:00:00:0a%20||%20shell",
        "..%2F..%2Fetc%2Fpasswd",
        "52:54:00:00:00:0a;reboot",
        "%00",
        "52:54:00:00:00",
        "zz:zz:zz:zz:zz:zz",
        "52%3A54%3A00%3A00%3A00%3A0a%23",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "%3Cscript%3E",
    ];
    for a in attacks {
        let (code, body) = get(&s, &format!("/v1/boot/{a}/boot.ipxe"));
        assert!(code == 400 || code == 404, "{a}: {code} {body}");
        for needle in [
            "evil", "shell", "passwd", "reboot", "script", "net0", "AAAA",
        ] {
            assert!(!body.contains(needle), "{a}: body echoes input: {body}");
        }
    }
    let (_, metrics) = get(&s, "/metrics");
    assert!(
        metrics.contains("shardboot_http_boot_requests_total{outcome=\"bad_request\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("shardboot_dhcp_received_total"),
        "{metrics}"
    );
    assert!(s.handles.http.get("bad_request") >= 9);
}

#[test]
fn owner_cli_shows_the_decision_for_known_rfc3074_answers() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/config/two-members.toml"
    );
    let run = |mac: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_shardboot"))
            .args(["owner", mac, "--config", cfg])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    // RFC 3074 hash 156 → bucket 0 of [a, b]: local, chained to a's conductor.
    let (ok, out) = run("52:54:00:12:34:56");
    assert!(
        ok && out.contains("owner:  a") && out.contains("source: hash"),
        "{out}"
    );
    assert!(
        out.contains("http://192.0.2.1:8088/pxelinux.cfg/52-54-00-12-34-56"),
        "{out}"
    );
    // Hash 79 → bucket 1: member b's own boot route.
    let (ok, out) = run("ff-ff-ff-ff-ff-ff");
    assert!(ok && out.contains("owner:  b"), "{out}");
    assert!(
        out.contains("http://192.0.2.2:8080/v1/boot/ff-ff-ff-ff-ff-ff/boot.ipxe"),
        "{out}"
    );
    assert!(!run("${x}").0);
}

/// curl into a file; returns (status, bytes, headers).
fn fetch(s: &TestServer, path: &str, extra: &[&str]) -> (u16, Vec<u8>, String) {
    let dir = tempfile::tempdir().unwrap();
    let (body, hdrs) = (dir.path().join("body"), dir.path().join("headers"));
    let out = Command::new("curl")
        .args(["-s", "--path-as-is", "-o"])
        .arg(&body)
        .arg("-D")
        .arg(&hdrs)
        .args(["-w", "%{http_code}"])
        .args(extra)
        .arg(format!("http://{}{path}", s.addr))
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout).parse().unwrap();
    (
        code,
        std::fs::read(&body).unwrap_or_default(),
        std::fs::read_to_string(&hdrs).unwrap_or_default(),
    )
}

#[test]
fn ipxe_files_over_http_with_ranges_and_confinement() {
    let s = start("");
    let want: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let (code, body, hdrs) = fetch(&s, "/ipxe/snponly.efi", &[]);
    assert_eq!(code, 200);
    assert_eq!(body, want);
    assert!(
        hdrs.to_ascii_lowercase().contains("accept-ranges: bytes"),
        "{hdrs}"
    );
    // Metal3's name through the default alias map.
    assert_eq!(fetch(&s, "/ipxe/snponly-x86_64.efi", &[]).1, want);
    // A byte range, as firmware resuming a download asks.
    let (code, body, hdrs) = fetch(&s, "/ipxe/snponly.efi", &["-r", "1000-1999"]);
    assert_eq!(code, 206);
    assert_eq!(body, want[1000..2000]);
    assert!(hdrs.contains("bytes 1000-1999/300000"), "{hdrs}");
    assert_eq!(fetch(&s, "/ipxe/snponly.efi", &["-r", "400000-"]).0, 416);
    // HEAD: length, no body.
    let (code, _, hdrs) = fetch(&s, "/ipxe/snponly.efi", &["-I"]);
    assert_eq!(code, 200);
    assert!(
        hdrs.to_ascii_lowercase().contains("content-length: 300000"),
        "{hdrs}"
    );
    // Escapes are refused with a plain 404 that echoes nothing.
    for bad in [
        "/ipxe/../Cargo.toml",
        "/ipxe/%2e%2e/%2e%2e/etc/passwd",
        "/ipxe/passwd",
        "/ipxe/.hidden",
        "/ipxe/a%00b",
        "/ipxe//etc/passwd",
        "/ipxe/missing.efi",
    ] {
        let (code, body, _) = fetch(&s, bad, &[]);
        assert!(code == 404 || code == 400, "{bad}: {code}");
        let text = String::from_utf8_lossy(&body);
        assert!(
            !text.contains("root:") && !text.contains("passwd") && !text.contains("[package]"),
            "{bad}: {text}"
        );
    }
}

#[test]
fn tftp_and_the_http_file_route_share_one_cache() {
    let s = start("");
    let want: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 253) as u8).collect();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let tftp_addr = sock.local_addr().unwrap();
    let metrics = Arc::new(TftpMetrics::default());
    let stop = s.http.stop_token().child_token();
    let (files, m, t) = (s.files.clone(), metrics.clone(), stop.clone());
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let sock = tokio::net::UdpSocket::from_std(sock).unwrap();
            tftp::run(sock, files, m, t).await.unwrap();
        });
    });
    // HTTP reads the file from disk into the cache ...
    let (code, body, _) = fetch(&s, "/ipxe/snponly.efi", &[]);
    assert_eq!((code, body == want), (200, true));
    // ... and TFTP then serves it from there.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("snponly.efi");
    let ok = Command::new("curl")
        .args(["-s", "--max-time", "30", "-o"])
        .arg(&out)
        .arg(format!("tftp://{tftp_addr}/snponly.efi"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "curl tftp failed");
    assert!(std::fs::read(&out).unwrap() == want);
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(metrics.cache_misses.load(Relaxed), 0);
    assert_eq!(metrics.cache_hits.load(Relaxed), 1);
    assert_eq!(s.files.cache.bytes(), want.len() as u64);
    stop.cancel();
    server.join().unwrap();
}

#[test]
fn ipxe_files_over_max_file_size_are_refused_unread() {
    // snponly.efi is 300,000 octets; TFTP would refuse it with "file too large".
    let s = start_with("", 200_000, true);
    for range in [&[][..], &["-r", "0-9"][..]] {
        let (code, body, _) = fetch(&s, "/ipxe/snponly.efi", range);
        assert_eq!(code, 403, "{range:?}");
        assert_eq!(body, b"file too large\n");
    }
    // Refused before it is read: nothing came into the cache.
    assert_eq!(s.files.cache.bytes(), 0);
    let s = start_with("", 300_000, true);
    assert_eq!(fetch(&s, "/ipxe/snponly.efi", &[]).0, 200);
}
