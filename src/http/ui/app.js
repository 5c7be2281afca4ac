// shardboot /ui: a read-only view of the operator API: the boot board of every member
// (refreshed every three seconds, one page of machines at a time, each machine with
// the members that saw it), the members with each one's pool fill over the last hour
// as a small line chart (inline SVG, no library), the pools, the leases and one
// machine's timeline from every member. The token comes from the form or
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

  // A time in a stage as a person reads it: 45s, 5m02s, 2h03m, 3d04h.
  function duration(ms) {
    const s = Math.floor(ms / 1000);
    const two = (n) => String(n).padStart(2, "0");
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor((s % 3600) / 60)) + "m";
    return Math.floor(s / 86400) + "d" + two(Math.floor((s % 86400) / 3600)) + "h";
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
        row(body, [at, e.member, e.source, e.what, e.outcome, e.why, e.ip, e.detail]);
      }
      $("machine-status").textContent = v.events.length + " events for " + v.mac +
        " from " + (v.answered || []).join(", ");
      $("machine-unasked").textContent = (v.unasked || [])
        .map((u) => "member " + u.member + " not asked: " + u.why).join("; ");
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

  // Addresses in use of all the pool holds, in percent.
  function percent(s) {
    const total = s.in_use + s.free;
    return total ? Math.round((100 * s.in_use) / total) : 0;
  }

  // A member's pool fill over the last hour as a small line chart: time across (the
  // member's own newest sample at the right edge, so members' clocks do not matter),
  // 0-100 % up. Built with DOM calls; nothing from the answer becomes markup.
  const SVG = "http://www.w3.org/2000/svg";
  const HOUR_MS = 3600000;
  function fillChart(samples) {
    const w = 180;
    const h = 36;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "fill-chart");
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("role", "img");
    const title = document.createElementNS(SVG, "title");
    svg.appendChild(title);
    for (const p of [0, 50, 100]) {
      const grid = document.createElementNS(SVG, "line");
      const y = h - 2 - (p * (h - 4)) / 100;
      grid.setAttribute("x1", 0);
      grid.setAttribute("x2", w);
      grid.setAttribute("y1", y);
      grid.setAttribute("y2", y);
      svg.appendChild(grid);
    }
    if (!samples.length) {
      title.textContent = "no pool fill samples";
      return svg;
    }
    const end = samples[samples.length - 1].at_ms;
    const points = samples
      .filter((s) => s.at_ms >= end - HOUR_MS)
      .map((s) => {
        const x = w - ((end - s.at_ms) * w) / HOUR_MS;
        const y = h - 2 - (percent(s) * (h - 4)) / 100;
        return x.toFixed(1) + "," + y.toFixed(1);
      });
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points.join(" "));
    svg.appendChild(line);
    const [x, y] = points[points.length - 1].split(",");
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("cx", x);
    dot.setAttribute("cy", y);
    dot.setAttribute("r", 2.5);
    svg.appendChild(dot);
    title.textContent = percent(samples[samples.length - 1]) + "% full now; " + points.length +
      " samples over the last hour";
    return svg;
  }

  // The boot board (/v1/board): one page at a time, the page's rows kept and
  // refilled in place, so a refresh at thousands of machines touches only the page.
  const STAGES = ["silent", "offered", "bound", "boot_file", "first_stage", "chained", "fallback"];
  const COLORS = ["#999", "#fc6", "#9c6", "#6bd", "#69e", "#393", "#c63"];
  const PAGE = 100;
  let boardOffset = 0;
  let boardTimer = null;
  const boardRows = [];

  function boardRow(i) {
    while (boardRows.length <= i) {
      const tr = document.createElement("tr");
      const link = document.createElement("a");
      link.href = "#";
      link.addEventListener("click", (ev) => {
        ev.preventDefault();
        const mac = link.textContent;
        $("machine").value = mac;
        sessionStorage.setItem("shardboot-machine", mac);
        loadMachine(currentToken(), mac);
        $("machine-form").scrollIntoView();
      });
      const first = document.createElement("td");
      first.appendChild(link);
      tr.appendChild(first);
      for (let c = 1; c < 8; c++) {
        tr.appendChild(document.createElement("td"));
      }
      boardRows.push(tr);
    }
    return boardRows[i];
  }

  function boardQuery() {
    let q = "/v1/board?limit=" + PAGE + "&offset=" + boardOffset;
    const search = $("board-search").value.trim();
    if (search) q += "&q=" + encodeURIComponent(search);
    const stage = $("board-stage").value;
    if (stage) q += "&stage=" + encodeURIComponent(stage);
    if ($("board-stuck").checked) q += "&stuck=1";
    return q;
  }

  function showBoard(v) {
    $("who").textContent = v.member;
    $("board-time").textContent = "at " + new Date(v.now_ms).toISOString().replace(/\.\d+Z$/, "Z");
    $("board-summary").textContent = v.seen + " machines seen in the last " + duration(v.window_ms) +
      ", " + v.stuck + " stuck (over " + duration(v.stuck_after_ms) + " in one stage)";
    // The stages as one bar, and a legend with the counts.
    const bar = $("stage-bar");
    const legend = $("stage-legend");
    bar.replaceChildren();
    legend.replaceChildren();
    STAGES.forEach((name, i) => {
      const c = v.stages[name] || { machines: 0, stuck: 0 };
      const part = document.createElement("span");
      part.style.width = (v.seen ? (100 * c.machines) / v.seen : 0) + "%";
      part.style.background = COLORS[i];
      part.title = name + ": " + c.machines;
      bar.appendChild(part);
      const key = document.createElement("span");
      key.style.background = COLORS[i];
      legend.appendChild(key);
      legend.appendChild(document.createTextNode(name + " " + c.machines + (c.stuck ? " (" + c.stuck + " stuck)" : "")));
    });
    const members = $("members");
    members.replaceChildren();
    const unasked = {};
    for (const u of v.unasked || []) unasked[u.member] = u.why;
    for (const m of v.members) {
      const fill = m.pool_fill || [];
      const last = fill.length ? fill[fill.length - 1] : null;
      row(members, [
        m.name + (m.self ? " (this member)" : ""),
        m.alive ? "alive" : "DEAD",
        m.answered ? "merged" : "not asked: " + (unasked[m.name] || (v.local ? "local view" : "unknown")),
        last ? percent(last) + "%" : "",
        "",
      ]);
      if (!m.alive) members.lastChild.className = "dead";
      members.lastChild.lastChild.appendChild(fillChart(fill));
    }
    const body = $("board");
    v.machines.forEach((m, i) => {
      const tr = boardRow(i);
      const cells = tr.children;
      cells[0].firstChild.textContent = m.mac;
      const values = [m.stage, duration(m.in_stage_ms), m.stuck ? "stuck" : "", m.known ? "yes" : "no", m.ip,
        (m.members || []).join(", "), m.why];
      values.forEach((val, c) => {
        const text = val === null || val === undefined ? "" : String(val);
        if (cells[c + 1].textContent !== text) cells[c + 1].textContent = text;
      });
      tr.className = m.stuck ? "stuck" : "";
      if (tr.parentNode !== body) body.appendChild(tr);
    });
    // Rows past this page's end leave; the others stay where they are.
    for (let i = v.machines.length; i < boardRows.length; i++) {
      if (boardRows[i].parentNode) boardRows[i].remove();
    }
    const first = v.machines.length ? v.offset + 1 : 0;
    $("board-status").textContent = "shown " + first + "-" + (v.offset + v.machines.length) +
      " of " + v.matching + " matching";
    $("board-prev").disabled = v.offset === 0;
    $("board-next").disabled = v.offset + v.machines.length >= v.matching;
  }

  async function loadBoard() {
    const token = currentToken();
    if (!token) return;
    try {
      showBoard(await api(boardQuery(), token));
    } catch (e) {
      $("board-status").textContent = e.message;
    }
  }

  function scheduleBoard() {
    if (boardTimer) clearTimeout(boardTimer);
    boardTimer = null;
    if ($("board-auto").checked) {
      boardTimer = setTimeout(async () => {
        await loadBoard();
        scheduleBoard();
      }, 3000);
    }
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
        row(pools, [s.subnet, s.in_use, s.free_in_share, ""]);
        const fill = document.createElement("span");
        fill.className = "fill";
        const used = document.createElement("span");
        const total = s.in_use + s.free_in_share;
        used.style.width = (total ? (100 * s.in_use) / total : 0) + "%";
        fill.appendChild(used);
        fill.title = Math.round(total ? (100 * s.in_use) / total : 0) + "% full";
        pools.lastChild.lastChild.appendChild(fill);
      }
      await loadBoard();
      scheduleBoard();
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
  const again = () => {
    boardOffset = 0;
    loadBoard();
  };
  $("board-search").addEventListener("input", again);
  $("board-stage").addEventListener("change", again);
  $("board-stuck").addEventListener("change", again);
  $("board-controls").addEventListener("submit", (ev) => {
    ev.preventDefault();
    again();
  });
  $("board-prev").addEventListener("click", () => {
    boardOffset = Math.max(0, boardOffset - PAGE);
    loadBoard();
  });
  $("board-next").addEventListener("click", () => {
    boardOffset += PAGE;
    loadBoard();
  });
  $("board-auto").addEventListener("change", scheduleBoard);
  $("form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("shardboot-token", $("token").value);
    $("token").value = "";
    load();
  });
  load();
})();
