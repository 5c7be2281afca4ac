//! The boot routes' decisions, pure: from a MAC and its owner resolution to the iPXE
//! script (or status) to send.

use crate::config::{ChainTo, Fallback, HttpSettings, Member};
use crate::ipxe::{self, UnsafeValue};
use crate::mac::MacAddr;
use crate::owner::Resolution;

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
    /// 404: unknown machine and `fallback = "404"`.
    NotFound,
}

/// Inputs besides the MAC and resolution.
#[derive(Debug)]
pub struct BootContext<'a> {
    /// Timeouts and retries for scripts.
    pub http: &'a HttpSettings,
    /// This member, if members are configured.
    pub me: Option<Member>,
    /// The owning member, if known.
    pub owner: Option<Member>,
    /// Unknown machines.
    pub fallback: &'a Fallback,
    /// Machines owned elsewhere.
    pub chain_to: ChainTo,
    /// Whether the owning member answers its health probes. A dead member's machines
    /// are sent to its conductor directly when its URL is known.
    pub owner_alive: bool,
}

impl<'a> BootContext<'a> {
    /// The context for a resolution made by `resolver`.
    pub fn new(
        http: &'a HttpSettings,
        resolver: &'a crate::owner::Resolver,
        res: &Resolution,
    ) -> Self {
        let owner = res.member.as_deref().and_then(|n| resolver.member(n));
        let owner_alive = owner
            .as_ref()
            .is_some_and(|o| resolver.live().is_alive(&o.name));
        Self {
            http,
            me: resolver.self_name().and_then(|n| resolver.member(n)),
            owner,
            fallback: &resolver.settings().fallback,
            chain_to: resolver.settings().chain_to,
            owner_alive,
        }
    }
}

fn per_node_url(conductor_url: &str, mac: &MacAddr) -> String {
    format!("{conductor_url}/pxelinux.cfg/{}", mac.hyphenated())
}

/// Decides the script for `mac` (ARCHITECTURE.md, "HTTP boot routing").
pub fn answer(
    mac: &MacAddr,
    res: &Resolution,
    ctx: &BootContext<'_>,
) -> Result<BootAnswer, UnsafeValue> {
    let timeout = ctx.http.chain_timeout_ms.to_string();
    let retries = ctx.http.chain_retries.to_string();
    let mac_s = mac.to_string();
    let chain = |kind: &'static str, owner: &str, url: &str| -> Result<BootAnswer, UnsafeValue> {
        let body = ipxe::render(
            ipxe::CHAIN,
            &[
                ("mac", &mac_s),
                ("owner", owner),
                ("reason", res.source),
                ("url", url),
                ("timeout_ms", &timeout),
                ("retries", &retries),
            ],
        )?;
        Ok(BootAnswer::Script { kind, body })
    };
    let local = matches!((&ctx.me, &ctx.owner), (Some(me), Some(o)) if me.name == o.name);
    match &ctx.owner {
        Some(owner) if local => {
            if let Some(c) = &owner.conductor_url {
                return chain("local", &owner.name, &per_node_url(c, mac));
            }
        }
        Some(owner) => {
            let direct = ctx.chain_to == ChainTo::Conductor || !ctx.owner_alive;
            let url = match (direct, &owner.conductor_url) {
                (true, Some(c)) => per_node_url(c, mac),
                // Hyphens, not colons: iPXE's URI parser takes "52:" for a scheme.
                _ => format!("{}/v1/boot/{}/boot.ipxe", owner.http_url, mac.hyphenated()),
            };
            return chain("remote", &owner.name, &url);
        }
        None => {}
    }
    let body = match ctx.fallback {
        Fallback::NotFound => return Ok(BootAnswer::NotFound),
        Fallback::Exit => ipxe::render(ipxe::EXIT, &[("mac", &mac_s)])?,
        Fallback::Sanboot => ipxe::render(ipxe::SANBOOT, &[("mac", &mac_s)])?,
        Fallback::Chain(url) => return chain("fallback", "fallback", url),
    };
    Ok(BootAnswer::Script {
        kind: "fallback",
        body,
    })
}

/// The first-stage script.
pub fn first_stage(http: &HttpSettings) -> Result<String, UnsafeValue> {
    ipxe::render(
        ipxe::BOOT,
        &[
            ("timeout_ms", &http.chain_timeout_ms.to_string()),
            ("retries", &http.chain_retries.to_string()),
        ],
    )
}
