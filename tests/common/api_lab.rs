//! A lab for the operator API: shardboot serving 192.0.2.0/24 (.100–.199) with the API on
//! 192.0.2.1:8080 behind a bearer token (TFTP off), a broadcast DHCP client on the other
//! side, and curl inside the server namespace.
#![allow(dead_code)]

use super::segment::BroadcastClient;
use super::{config, Lab, Netns, Server};

/// Where the API listens inside the lab.
pub(crate) const API: &str = "http://192.0.2.1:8080";

/// Starts the lab; `dhcp_keys` are extra `[dhcp]` lines (hostsdir, …). The token file
/// is `<dir>/tokens`.
pub(crate) fn start(
    token: &str,
    dhcp_keys: &str,
) -> (Lab, tempfile::TempDir, Server, BroadcastClient) {
    start_with(token, dhcp_keys, "")
}

/// Like [`start`], with extra `[http]` lines.
pub(crate) fn start_with(
    token: &str,
    dhcp_keys: &str,
    http_keys: &str,
) -> (Lab, tempfile::TempDir, Server, BroadcastClient) {
    start_seeded(token, dhcp_keys, http_keys, |_| {})
}

/// Like [`start_with`], with `seed` run on the state directory (the store's parent,
/// created) before the server starts: tests write records there with the library's
/// store, as no client of the lab could (DHCPv6 leases).
pub(crate) fn start_seeded(
    token: &str,
    dhcp_keys: &str,
    http_keys: &str,
    seed: impl FnOnce(&std::path::Path),
) -> (Lab, tempfile::TempDir, Server, BroadcastClient) {
    let lab = Lab::new(&["192.0.2.1/24"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    seed(&state);
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{token}\n")).unwrap();
    let cfg = config(
        &lab.server_if,
        "192.0.2.0/24",
        "192.0.2.100 - 192.0.2.199",
        &format!(
            "{dhcp_keys}\n[tftp]\nenabled = false\n[http]\nlisten = \"192.0.2.1:8080\"\n\
             insecure_operator_api = true\ntoken_file = \"{}\"\n{http_keys}",
            tokens.display()
        ),
    );
    let server = Server::start(&lab.server, dir.path(), &cfg);
    let client_if = lab.client_if.clone();
    let client = lab
        .client
        .run(move || BroadcastClient::new(&client_if))
        .join()
        .unwrap();
    (lab, dir, server, client)
}

/// curl inside `ns` with `token` (none: no header) and a JSON `body`; (status, body).
pub(crate) fn curl(
    ns: &Netns,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let mut c = ns.command("curl");
    c.args(["-s", "-m", "5", "--noproxy", "*", "-X", method])
        .args(["-o", "-", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    if let Some(b) = body {
        c.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    let out = c.arg(url).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// curl against the lab's API from inside the server namespace.
pub(crate) struct Api<'a> {
    pub lab: &'a Lab,
    /// The token [`Api::json`] sends.
    pub token: &'a str,
}

impl Api<'_> {
    /// curl inside the server namespace with `token` (none: no header); (status, body).
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, String) {
        curl(
            &self.lab.server,
            method,
            &format!("{API}{path}"),
            token,
            body,
        )
    }

    /// An authorised call that must answer 200; its JSON.
    pub(crate) fn json(&self, method: &str, path: &str, body: Option<&str>) -> serde_json::Value {
        let (code, text) = self.call(method, path, Some(self.token), body);
        assert_eq!(code, 200, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }
}
