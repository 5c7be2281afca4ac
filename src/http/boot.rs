//! The boot routes' decisions, pure: from a MAC and its owner resolution to the URL to
//! chain, and from that URL's check (`http::chain_check`) to the iPXE script or status
//! to send (docs/design.md, "HTTP boot routing").
//!
//! A machine's first stage walks every NIC; for each it asks `/v1/boot/<mac>/<name>`.
//! A NIC no resolver knows, or whose conductor answers 404 for it, is a *miss*: HTTP
//! 404, and the first stage moves to the next NIC at once. Only a URL that did not
//! answer is retried, 5 seconds apart, each retry coming back here so that a miss that
//! began meanwhile still ends the NIC's turn. The fallback applies once, after the loop
//! (`/v1/boot/fallback.ipxe`).
//!
//! A request another member sent on (its URL carries `?hop=N`, see [`HOP`]) is a *hop*:
//! it is answered from this member's own view and never sent on to a member again, so
//! members whose owner views disagree cannot bounce a machine (and their checks) from
//! one to the next.

use crate::config::{ChainTo, Fallback, HttpSettings, Member};
use crate::ipxe::{self, UnsafeValue};
use crate::mac::MacAddr;
use crate::owner::Resolution;

/// The name the first stage asks for under `/v1/boot/<mac>/`.
pub const FIRST_STAGE_NAME: &str = "boot.ipxe";

/// The query key that marks a hop from another member; its value is the attempt, like
/// `try`'s. In the URL rather than a header because iPXE, which follows the chain,
/// sends no header of ours. Anyone may send it: it only takes choices away (no member
/// is chained), so it grants nothing.
pub const HOP: &str = "hop";

/// What a boot request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootAnswer {
    /// An iPXE script.
    Script {
        /// How it was decided, for metrics: `local`, `remote`, `fallback`.
        kind: &'static str,
        /// The script.
        body: String,
    },
    /// 404: a miss, so the first stage asks for the next NIC.
    NotFound {
        /// For metrics: `not_found` (no resolver knows the MAC, or `fallback = "404"`)
        /// or `miss` (the URL it would chain answered 404).
        kind: &'static str,
    },
}

/// What checking a URL before chaining it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// It answered, not with 404: chain it.
    Answers,
    /// It answered 404 (or 410): a miss.
    Missing,
    /// No answer (refused, timed out, 5xx): chain it anyway, and let the script retry.
    Unreachable,
    /// Not checked (too many checks in flight, or a reply that says nothing either way).
    Unchecked,
}

/// A URL to chain, before it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// For metrics: `local`, `remote`, `fallback`.
    pub kind: &'static str,
    /// The owner's name, for the script's comment.
    pub owner: String,
    /// Which resolver answered, for the script's comment.
    pub reason: &'static str,
    /// What to chain.
    pub url: String,
    /// When `url` is another member's boot route: its conductor's per-node config,
    /// chained instead when the member does not answer.
    pub direct: Option<String>,
    /// Whether this script retries a failed chain. A member's boot route retries its
    /// own conductor, so a script chaining it does not retry as well.
    pub retries_here: bool,
    /// Whether the request was a hop: its retries are hops too.
    pub hop: bool,
}

/// Inputs besides the MAC and resolution.
#[derive(Debug)]
pub struct BootContext<'a> {
    /// Timeouts and retries for scripts.
    pub http: &'a HttpSettings,
    /// This member's name, if members are configured.
    pub me: Option<&'a str>,
    /// The owning member, if known (in the member list the request was answered with).
    pub owner: Option<&'a Member>,
    /// Unknown machines.
    pub fallback: &'a Fallback,
    /// Machines owned elsewhere.
    pub chain_to: ChainTo,
    /// Whether the owning member answers its health probes. A dead member's machines
    /// are sent to its conductor directly when its URL is known.
    pub owner_alive: bool,
    /// Whether another member sent the request on (a hop): no member is chained again.
    pub hop: bool,
}

impl<'a> BootContext<'a> {
    /// The context for a resolution made by `resolver`, with `view` the member list in
    /// force (taken once for the request).
    pub fn new(
        http: &'a HttpSettings,
        resolver: &'a crate::owner::Resolver,
        view: &'a crate::owner::roster::RosterView,
        res: &Resolution,
        hop: bool,
    ) -> Self {
        let me = resolver.self_name();
        let owner = res.member.as_deref().and_then(|n| view.member(n));
        let owner_alive = owner.is_some_and(|o| resolver.live().is_alive(&o.name));
        Self {
            http,
            me,
            owner,
            fallback: &resolver.settings().fallback,
            chain_to: resolver.settings().chain_to,
            owner_alive,
            hop,
        }
    }
}

/// Whether `name` may follow `/v1/boot/<mac>/`: 1 to 64 letters, digits, `.`, `_` or
/// `-`, not starting with a dot. It is passed on to the owning member's route, so it
/// must be as safe in a URL and a script as a MAC is.
pub fn is_boot_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn per_node_url(conductor_url: &str, mac: &MacAddr) -> String {
    const PATH: &str = "/pxelinux.cfg/";
    let mut url = String::with_capacity(conductor_url.len() + PATH.len() + 17);
    url.push_str(conductor_url);
    url.push_str(PATH);
    mac.push_hyphenated(&mut url);
    url
}

/// Where `mac`'s `name` is chained from; `None` when no resolver knows it (a miss).
/// Every name leads to the conductor's one per-node config; the name is kept when the
/// request is sent on to another member, marked as a hop. A hop whose owner is another
/// member still (the two members' views disagree) goes to that owner's conductor, or is
/// a miss when its URL is not known.
pub fn route(mac: &MacAddr, name: &str, res: &Resolution, ctx: &BootContext<'_>) -> Option<Chain> {
    let owner = ctx.owner?;
    let local = ctx.me == Some(owner.name.as_str());
    let chain = |kind, url: String, direct, retries_here| Chain {
        kind,
        owner: owner.name.clone(),
        reason: res.source,
        url,
        direct,
        retries_here,
        hop: ctx.hop,
    };
    let per_node = owner.conductor_url.as_deref().map(|c| per_node_url(c, mac));
    if local {
        // No conductor URL: this member knows the owner but not where its configs are.
        return per_node.map(|url| chain("local", url, None, true));
    }
    if ctx.hop {
        return per_node.map(|url| chain("remote", url, None, true));
    }
    let direct = ctx.chain_to == ChainTo::Conductor || !ctx.owner_alive;
    Some(match (direct, per_node) {
        (true, Some(url)) => chain("remote", url, None, true),
        // Hyphens, not colons: iPXE's URI parser takes "52:" for a scheme.
        (_, per_node) => chain(
            "remote",
            format!(
                "{}/v1/boot/{}/{name}?{HOP}=1",
                owner.http_url,
                mac.hyphenated()
            ),
            per_node,
            false,
        ),
    })
}

/// What `/v1/boot/fallback.ipxe` decides: a script, a URL to check and chain, or 404.
#[derive(Debug)]
pub enum FallbackStep {
    /// A fixed script (`exit`, `sanboot`).
    Script(String),
    /// `fallback = "<url>"`.
    Chain(Chain),
    /// `fallback = "404"`.
    NotFound,
}

/// The fallback, for a machine none of whose NICs had a configuration.
pub fn fallback(fallback: &Fallback) -> Result<FallbackStep, UnsafeValue> {
    Ok(match fallback {
        Fallback::NotFound => FallbackStep::NotFound,
        Fallback::Exit => FallbackStep::Script(ipxe::render(ipxe::EXIT, &[])?),
        Fallback::Sanboot => FallbackStep::Script(ipxe::render(ipxe::SANBOOT, &[])?),
        Fallback::Chain(url) => FallbackStep::Chain(Chain {
            kind: "fallback",
            owner: "fallback".into(),
            reason: "no-nic-known",
            url: url.clone(),
            direct: None,
            retries_here: true,
            hop: false,
        }),
    })
}

/// The answer for `chain` once checked. `attempt` counts from 1 (the `try` or `hop` of
/// the request); `again` is this route's own path, to which a failed chain returns.
pub fn answer_chain(
    chain: &Chain,
    check: Check,
    attempt: u32,
    again: &str,
    label: &str,
    http: &HttpSettings,
) -> Result<BootAnswer, UnsafeValue> {
    let (url, retries_here) = match (check, &chain.direct) {
        (Check::Missing, _) => return Ok(BootAnswer::NotFound { kind: "miss" }),
        // The owning member did not answer: go to its conductor, retrying from here.
        (Check::Unreachable, Some(direct)) => (direct.as_str(), true),
        _ => (chain.url.as_str(), chain.retries_here),
    };
    let key = if chain.hop { HOP } else { "try" };
    let attempts = if retries_here {
        http.chain_retries.max(attempt)
    } else {
        attempt
    };
    let mut next = String::with_capacity(again.len() + key.len() + 12);
    for part in [again, "?", key, "="] {
        next.push_str(part);
    }
    next.push_str(itoa::Buffer::new().format(attempt + 1));
    // Numbers written on the stack: this runs for every boot request.
    let (mut timeout_ms, mut this, mut last) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    let body = ipxe::chain_template().render(&[
        ("mac", label),
        ("owner", &chain.owner),
        ("reason", chain.reason),
        ("url", url),
        ("timeout_ms", timeout_ms.format(http.chain_timeout_ms)),
        ("attempt", this.format(attempt)),
        ("attempts", last.format(attempts)),
        ("again", &next),
    ])?;
    Ok(BootAnswer::Script {
        kind: chain.kind,
        body,
    })
}

/// What a boot request's query string says (request data: parsed, never echoed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootQuery {
    /// The attempt (`try=<n>` or `hop=<n>`), 1 when absent or not a number from 1 to
    /// the configured retries.
    pub attempt: u32,
    /// Whether another member sent the request on (a `hop` key, whatever its value: a
    /// hop only takes choices away, so when in doubt it is one).
    pub hop: bool,
}

/// Reads a boot request's query string.
pub fn boot_query(query: Option<&str>, retries: u32) -> BootQuery {
    let pairs = || {
        query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
    };
    let hop = pairs().any(|(k, _)| k == HOP);
    let key = if hop { HOP } else { "try" };
    let attempt = pairs()
        .find_map(|(k, v)| (k == key).then_some(v))
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| (1..=retries.max(1)).contains(n))
        .unwrap_or(1);
    BootQuery { attempt, hop }
}

/// The first-stage script.
pub fn first_stage(http: &HttpSettings) -> Result<String, UnsafeValue> {
    ipxe::render(
        ipxe::BOOT,
        &[("timeout_ms", &http.chain_timeout_ms.to_string())],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, conductor_url: Option<&str>) -> Member {
        Member {
            name: name.into(),
            http_url: format!("http://{name}.example:8080"),
            conductor: None,
            conductor_url: conductor_url.map(String::from),
        }
    }

    fn http() -> HttpSettings {
        crate::config::Config::from_toml_with_overrides("", &[])
            .unwrap()
            .http
    }

    const MAC: &str = "52:54:00:12:34:56";

    fn ctx<'a>(http: &'a HttpSettings, owner: Option<&'a Member>, alive: bool) -> BootContext<'a> {
        BootContext {
            http,
            me: Some("a"),
            owner,
            fallback: &Fallback::Exit,
            chain_to: ChainTo::Member,
            owner_alive: alive,
            hop: false,
        }
    }

    fn res() -> Resolution {
        Resolution {
            member: None,
            source: "hash",
        }
    }

    #[test]
    fn a_machine_nobody_knows_is_a_miss_not_the_fallback() {
        let http = http();
        let mac: MacAddr = MAC.parse().unwrap();
        assert_eq!(
            route(&mac, "boot.ipxe", &res(), &ctx(&http, None, false)),
            None
        );
    }

    #[test]
    fn a_conductor_404_is_a_miss_and_a_silent_one_is_retried() {
        let http = http();
        let mac: MacAddr = MAC.parse().unwrap();
        let owner = member("a", Some("http://a.example:8088"));
        let c = ctx(&http, Some(&owner), true);
        let chain = route(&mac, "boot.ipxe", &res(), &c).unwrap();
        assert_eq!(
            chain.url,
            "http://a.example:8088/pxelinux.cfg/52-54-00-12-34-56"
        );
        let again = "/v1/boot/52-54-00-12-34-56/boot.ipxe";
        assert_eq!(
            answer_chain(&chain, Check::Missing, 1, again, MAC, &http),
            Ok(BootAnswer::NotFound { kind: "miss" })
        );
        for check in [Check::Answers, Check::Unreachable, Check::Unchecked] {
            let Ok(BootAnswer::Script { kind, body }) =
                answer_chain(&chain, check, 2, again, MAC, &http)
            else {
                panic!("{check:?}: no script");
            };
            assert_eq!(kind, "local");
            assert!(body.contains(&format!("chain --timeout 10000 {} && exit 0 ||", chain.url)));
            assert!(body.contains("iseq 2 5 && goto give_up ||"), "{body}");
            assert!(
                body.contains(&format!("chain --timeout 10000 {again}?try=3 && exit 0 ||")),
                "{body}"
            );
        }
    }

    #[test]
    fn another_members_route_is_not_retried_twice_and_its_conductor_is_used_when_it_is_silent() {
        let http = http();
        let mac: MacAddr = MAC.parse().unwrap();
        let owner = member("b", Some("http://b.example:8088"));
        let c = ctx(&http, Some(&owner), true);
        let chain = route(&mac, "config", &res(), &c).unwrap();
        assert_eq!(
            chain.url,
            "http://b.example:8080/v1/boot/52-54-00-12-34-56/config?hop=1"
        );
        assert!(!chain.retries_here);
        let again = "/v1/boot/52-54-00-12-34-56/config";
        let Ok(BootAnswer::Script { body, .. }) =
            answer_chain(&chain, Check::Answers, 1, again, MAC, &http)
        else {
            panic!()
        };
        assert!(body.contains("iseq 1 1 && goto give_up ||"), "{body}");
        let Ok(BootAnswer::Script { body, .. }) =
            answer_chain(&chain, Check::Unreachable, 1, again, MAC, &http)
        else {
            panic!()
        };
        assert!(body.contains("chain --timeout 10000 http://b.example:8088/pxelinux.cfg/52-54-00-12-34-56 && exit 0 ||"), "{body}");
        assert!(body.contains("iseq 1 5 && goto give_up ||"), "{body}");
        // A dead owner: its conductor directly, from the start.
        let owner = member("b", Some("http://b.example:8088"));
        let c = ctx(&http, Some(&owner), false);
        let chain = route(&mac, "boot.ipxe", &res(), &c).unwrap();
        assert_eq!(
            chain.url,
            "http://b.example:8088/pxelinux.cfg/52-54-00-12-34-56"
        );
        assert!(chain.retries_here);
    }

    #[test]
    fn boot_names_and_attempts_from_request_data() {
        for good in ["boot.ipxe", "config", "inspector.ipxe", "a_b-c.1"] {
            assert!(is_boot_name(good), "{good}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a b",
            "a%2Fb",
            "${x}",
            long.as_str(),
        ] {
            assert!(!is_boot_name(bad), "{bad:?}");
        }
        let attempt_of = |q, retries| boot_query(q, retries).attempt;
        assert_eq!(attempt_of(None, 5), 1);
        assert_eq!(attempt_of(Some("try=3"), 5), 3);
        assert_eq!(attempt_of(Some("x=1&try=5"), 5), 5);
        for bad in [
            "try=0",
            "try=6",
            "try=-1",
            "try=",
            "try=1e3",
            "try=99999999999",
        ] {
            assert_eq!(attempt_of(Some(bad), 5), 1, "{bad}");
        }
    }

    #[test]
    fn a_hop_is_marked_by_its_key_and_counts_its_own_attempts() {
        let q = |s| boot_query(Some(s), 5);
        let want = |attempt, hop| BootQuery { attempt, hop };
        assert_eq!(boot_query(None, 5), want(1, false));
        assert_eq!(q("try=2"), want(2, false));
        assert_eq!(q("hop=1"), want(1, true));
        assert_eq!(q("hop=3"), want(3, true));
        assert_eq!(q("try=4&hop=2"), want(2, true));
        // Any value, or none, still marks a hop: it only takes choices away.
        for odd in ["hop", "hop=", "hop=x", "hop=99", "x=1&hop"] {
            assert_eq!(q(odd), want(1, true), "{odd}");
        }
        // Not a hop: a key that merely starts or ends like it.
        for not in ["hops=1", "xhop=1", "try=1"] {
            assert!(!q(not).hop, "{not}");
        }
    }

    #[test]
    fn a_hop_never_chains_another_member_and_its_retries_stay_hops() {
        let http = http();
        let mac: MacAddr = MAC.parse().unwrap();
        let owner = member("b", Some("http://b.example:8088"));
        let mut c = ctx(&http, Some(&owner), true);
        c.hop = true;
        // This member's view says b owns it (the sender thought it was this one): b's
        // conductor, checked and retried from here, never b's route.
        let chain = route(&mac, "boot.ipxe", &res(), &c).unwrap();
        assert_eq!(
            chain.url,
            "http://b.example:8088/pxelinux.cfg/52-54-00-12-34-56"
        );
        assert_eq!((chain.direct.as_deref(), chain.retries_here), (None, true));
        let again = "/v1/boot/52-54-00-12-34-56/boot.ipxe";
        let Ok(BootAnswer::Script { body, .. }) =
            answer_chain(&chain, Check::Unreachable, 2, again, MAC, &http)
        else {
            panic!()
        };
        assert!(
            body.contains(&format!("chain --timeout 10000 {again}?hop=3 && exit 0 ||")),
            "{body}"
        );
        // An owner whose conductor is not known: a miss, not a member's route.
        let unknown_conductor = member("b", None);
        c.owner = Some(&unknown_conductor);
        assert_eq!(route(&mac, "boot.ipxe", &res(), &c), None);
        // Owned here: this member's conductor, as without a hop.
        let here = member("a", Some("http://a.example:8088"));
        c.owner = Some(&here);
        let chain = route(&mac, "boot.ipxe", &res(), &c).unwrap();
        assert_eq!(
            chain.url,
            "http://a.example:8088/pxelinux.cfg/52-54-00-12-34-56"
        );
    }

    #[test]
    fn the_first_stage_walks_every_nic_and_applies_the_fallback_once_after_the_loop() {
        let s = first_stage(&http()).unwrap();
        assert!(
            s.contains("isset ${net${shardboot-nic}/mac} || goto after_loop"),
            "{s}"
        );
        assert!(s.contains(
            "chain --timeout 10000 /v1/boot/${net${shardboot-nic}/mac:hexhyp}/boot.ipxe && exit 0 || goto next_nic"
        ));
        assert!(s.contains("inc shardboot-nic || goto old_rom"));
        assert!(s.contains("/v1/boot/${mac:hexhyp}/boot.ipxe"));
        assert_eq!(s.matches("/v1/boot/fallback.ipxe").count(), 1);
        assert!(!s.contains("net3"), "no fixed NIC count: {s}");
        assert!(!s.contains("{{"), "{s}");
    }
}
