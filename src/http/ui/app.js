// shardboot /ui: a read-only view of the operator API. The token comes from the form or
// the page fragment (#token=..., which browsers never send to the server) and is kept
// in sessionStorage only. Everything shown is set with textContent: host names and
// DUIDs come from DHCP clients and must never become markup.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const MAX_ROWS = 10000;

  // The fragment's machine (#token=...&machine=<mac>), read before the token is taken
  // out of the address bar.
  const fragmentMachine = (() => {
    const m = /(?:^#|&)machine=([^&]*)/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  })();

  function currentToken() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      // Out of the address bar first, whatever the fragment holds.
      history.replaceState(null, "", location.pathname);
      let t = m[1];
      try {
        t = decodeURIComponent(t);
      } catch (e) {
        // Not percent-encoded: use it as it is.
      }
      sessionStorage.setItem("shardboot-token", t);
      return t;
    }
    return sessionStorage.getItem("shardboot-token");
  }

  async function api(path, token) {
    const r = await fetch(path, { headers: { Authorization: "Bearer " + token } });
    if (!r.ok) {
      throw new Error(path.split("?")[0] + ": HTTP " + r.status);
    }
    return r.json();
  }

  function row(body, values) {
    const tr = document.createElement("tr");
    for (const v of values) {
      const td = document.createElement("td");
      td.textContent = v === null || v === undefined ? "" : String(v);
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }

  function expiry(secs) {
    return new Date(secs * 1000).toISOString().replace(".000Z", "Z");
  }

  // One machine's timeline (/v1/machines/{mac}/events): what it asked, what it got.
  async function loadMachine(token, mac) {
    const body = $("events");
    body.replaceChildren();
    if (!mac) {
      return;
    }
    try {
      const v = await api("/v1/machines/" + encodeURIComponent(mac) + "/events", token);
      for (const e of v.events) {
        const at = new Date(e.at_ms).toISOString().replace("Z", "");
        row(body, [at, e.source, e.what, e.outcome, e.why, e.ip, e.detail]);
      }
      $("machine-status").textContent = v.events.length + " events for " + v.mac;
    } catch (err) {
      $("machine-status").textContent = err.message;
    }
  }

  // The DHCPv6 leases (/v1/leases6): one row per IA, the DUID in hex as the API gives it.
  async function loadLeases6(token) {
    const body = $("leases6");
    body.replaceChildren();
    let cursor = null;
    let shown = 0;
    do {
      const q = "/v1/leases6?limit=1000" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
      const page = await api(q, token);
      for (const l of page.leases) {
        row(body, [l.ip, l.duid, l.iaid, l.mac, l.state, expiry(l.expires), l.hostname]);
        shown += 1;
      }
      cursor = page.next_cursor;
    } while (cursor && shown < MAX_ROWS);
    $("status6").textContent = shown + " DHCPv6 leases" + (cursor ? " (first " + MAX_ROWS + " shown)" : "");
  }

  async function load() {
    const token = currentToken();
    if (!token) {
      $("status").textContent = "Enter an operator token.";
      return;
    }
    try {
      const stats = await api("/v1/stats", token);
      const pools = $("pools");
      pools.replaceChildren();
      for (const s of stats.subnets) {
        row(pools, [s.subnet, s.in_use, s.free_in_share]);
      }
      const leases = $("leases");
      leases.replaceChildren();
      let cursor = null;
      let shown = 0;
      do {
        const q = "/v1/leases?limit=1000" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
        const page = await api(q, token);
        for (const l of page.leases) {
          row(leases, [l.ip, l.mac, l.state, expiry(l.expires), l.hostname]);
          shown += 1;
        }
        cursor = page.next_cursor;
      } while (cursor && shown < MAX_ROWS);
      $("status").textContent = shown + " leases" + (cursor ? " (first " + MAX_ROWS + " shown)" : "");
      await loadLeases6(token);
      await loadMachine(token, sessionStorage.getItem("shardboot-machine"));
    } catch (e) {
      $("status").textContent = e.message;
    }
  }

  $("machine-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("shardboot-machine", $("machine").value.trim());
    load();
  });
  if (fragmentMachine) {
    sessionStorage.setItem("shardboot-machine", fragmentMachine);
  }
  $("form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("shardboot-token", $("token").value);
    $("token").value = "";
    load();
  });
  load();
})();
