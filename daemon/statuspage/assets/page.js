// fenced's status page: asks status.json (api.Page) every refreshSeconds
// and redraws. Every element is built from text (textContent), never from
// markup, except the timeline's SVG, which the daemon drew with its text
// escaped. What could not be refreshed is marked as not updated, with since
// when: the page never shows old data as current.
"use strict";

(function () {
  let refreshMs = 2000;
  let lastOK = 0; // the browser's clock when an answer last came
  let lastDoc = null;
  let failure = "";

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function ms(t) {
    // HH:MM:SS.mmm, local time.
    const d = new Date(t);
    if (isNaN(d) || d.getFullYear() < 1971) return "-";
    const p = (n, w) => String(n).padStart(w, "0");
    return p(d.getHours(), 2) + ":" + p(d.getMinutes(), 2) + ":" + p(d.getSeconds(), 2) + "." + p(d.getMilliseconds(), 3);
  }

  function ago(t, now) {
    const d = new Date(t);
    if (!t || isNaN(d) || d.getFullYear() < 1971) return "never";
    const s = (now - d.getTime()) / 1000;
    if (s < 1) return "now";
    return s.toFixed(1) + " s ago";
  }

  function row(tbody, cells) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      if (c instanceof Node) {
        const td = document.createElement("td");
        td.appendChild(c);
        tr.appendChild(td);
      } else {
        tr.appendChild(el("td", c === "" || c === undefined || c === null ? "-" : c));
      }
    }
    tbody.appendChild(tr);
    return tr;
  }

  function fill(id, items, cells, empty) {
    const tbody = $(id).tBodies[0];
    tbody.replaceChildren();
    if (!items || items.length === 0) {
      const tr = row(tbody, [empty]);
      tr.firstChild.colSpan = $(id).tHead.rows[0].cells.length;
      tr.firstChild.className = "empty";
      return;
    }
    for (const it of items) row(tbody, cells(it));
  }

  function staleText(text, stale) {
    const s = el("span", text);
    if (stale && text) {
      s.className = "stale";
      s.appendChild(el("span", "?", "stale-mark"));
      s.title = "gossip older than one lease, or a primacy the replicated state gives another: may no longer be true";
    }
    return s;
  }

  function gossipCell(n, now) {
    switch (n.down) {
      case "fenced": return el("span", "OFF (fenced " + ago(n.fencedAt, now) + " by " + (n.fencedBy || "-") + ")", "bad");
      case "unclean": return el("span", "UNCLEAN", "bad");
      case "unconfirmed": return el("span", "DOWN, MAY RUN THE STORAGE", "bad");
    }
    return el("span", n.gossip, n.gossip === "alive" ? "good" : "bad");
  }

  function draw(doc) {
    const now = Date.now();
    const st = doc.status;
    $("cluster").textContent = st.cluster ? "— cluster " + st.cluster : "";
    const q = st.quorum;
    $("quorum").textContent = (q.have ? "yes" : "NO") + " — " + q.votesSeen + " of " + q.configured + " configured nodes seen, " + q.votesNeeded + " needed";
    $("quorum").className = q.have ? "good" : "bad";
    const p = st.primary;
    const prim = $("primary");
    prim.dataset.node = p.node || "";
    prim.dataset.epoch = String(p.epoch || 0);
    if (!p.node) {
      prim.textContent = "none yet";
      prim.className = "";
    } else if (p.blocked) {
      prim.textContent = p.node + ", epoch " + p.epoch + ", BLOCKED: " + (p.reason || "");
      prim.className = "bad";
    } else {
      prim.textContent = p.node + ", epoch " + p.epoch + ", " + p.state + (p.reason ? " — " + p.reason : "");
      prim.className = "";
    }
    const self = st.self;
    if (self.epoch > 0) {
      $("lease").textContent = "held here (" + st.node + "), epoch " + self.epoch + ", " + self.leaseLeftSeconds.toFixed(2) + " s left" + (self.acting ? "" : " (not acting yet)");
    } else {
      $("lease").textContent = p.node ? "held by " + p.node + " (only the holder knows its lease; ask it)" : "none";
    }
    $("leader").textContent = q.leader || "none known";

    const warn = $("warnings");
    warn.replaceChildren();
    for (const [n, why] of Object.entries(p.unclean || {})) {
      warn.appendChild(el("p", "UNCLEAN: " + n + " may still run the group (" + why + ")", "warning"));
    }
    if (self.ineligible) warn.appendChild(el("p", st.node + " is NOT ELIGIBLE for primacy: " + self.ineligible, "warning"));

    const paths = {};
    for (const fp of st.fencePaths || []) paths[fp.node] = fp.state;
    fill("nodes", st.nodes, (n) => {
      const down = n.down !== undefined && n.down !== "";
      return [n.name, n.kind, gossipCell(n, now), n.raftRole, staleText(n.role, n.stale),
        down || !n.epoch ? "-" : staleText(String(n.epoch), n.stale), n.storage, ago(n.lastContact, now), paths[n.name] || "-"];
    }, "no node known");

    fill("pending", doc.pending, (r) => [String(r.id), r.kind, r.target, r.action, String(r.epoch), r.requestedBy,
      ((now - new Date(r.started).getTime()) / 1000).toFixed(1) + " s" + (r.runs > 1 ? " (" + r.runs + " runs)" : ""), r.error || r.reason],
      "no fence under way");

    // The SVG is the daemon's, drawn with its text escaped (timeline.SVG).
    $("timeline").innerHTML = doc.timelineSVG || "";

    $("resnode").textContent = doc.resources.node || st.node;
    fill("resources", doc.resources.resources, (r) => [r.name, r.kind, r.state, ago(r.lastMonitor, now), String(r.failures || 0), r.lastError],
      "no resource group on this node");
    $("devnode").textContent = st.node;
    fill("devices", doc.devices, (d) => [d.name, d.agent, (d.targets || []).join(", "),
      el("span", d.health.state + (d.health.errorKind ? " (" + d.health.errorKind + ")" : ""), d.health.state === "ok" ? "good" : d.health.state === "failing" ? "bad" : ""),
      ago(d.health.lastCheck, now), d.health.error], "no fence device");
    fill("history", (doc.history || []).slice().reverse(), (r) => [String(r.id), ms(r.started), r.kind, r.target,
      (r.outcome || "").toUpperCase(), String(r.epoch), (r.runs > 1 ? r.runs + " runs, the last: " : "") + (r.error || r.reason || "")], "no history");
  }

  function freshness() {
    const now = Date.now();
    const f = $("freshness");
    const late = lastOK === 0 || now - lastOK > 3 * refreshMs;
    if (failure || late) {
      document.body.classList.add("not-updated");
      f.className = "banner";
      const since = lastOK ? "since " + ms(lastOK) + " (" + ((now - lastOK) / 1000).toFixed(1) + " s ago)" : "yet";
      f.textContent = "NOT UPDATED " + since + (failure ? ": " + failure : "") + ". What is shown may no longer be true.";
      return;
    }
    document.body.classList.remove("not-updated");
    f.className = "freshness";
    f.textContent = "Updated " + ms(lastOK) + " from " + lastDoc.status.node + " (generated " + ms(lastDoc.generated) + "), every " + (refreshMs / 1000) + " s.";
  }

  async function poll() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), Math.max(refreshMs, 2000));
    try {
      const resp = await fetch("status.json", { cache: "no-store", signal: ctl.signal });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const doc = await resp.json();
      draw(doc);
      lastDoc = doc;
      lastOK = Date.now();
      failure = "";
      if (doc.refreshSeconds > 0) refreshMs = doc.refreshSeconds * 1000;
    } catch (e) {
      failure = e && e.name === "AbortError" ? "no answer within " + (Math.max(refreshMs, 2000) / 1000) + " s" : String(e && e.message ? e.message : e);
    } finally {
      clearTimeout(timer);
      freshness();
      setTimeout(poll, refreshMs);
    }
  }

  setInterval(freshness, 1000);
  poll();
})();
