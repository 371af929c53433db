// hopper dashboard: a small vanilla script over the JSON API (/api/v1), polling every 2 s.
//
// Views follow the URL hash: #/ (overview), #/jobs?queue=…&state=…&before=… (job list),
// #/jobs/<id> (job detail). Everything shown comes from the API and is written with
// textContent, never as HTML. The token lives in sessionStorage (this tab only).
// Elements have stable ids (and rows data-job-id / data-queue) for browser tests.
"use strict";

(function () {
  const POLL_MS = 2000;
  // The charts are per minute; their query reads every job finished in the window, so
  // they are refreshed less often than the counts.
  const STATS_MS = 10000;
  // The API sits beside the assets, wherever the router is mounted.
  const API = new URL("../api/v1/", document.currentScript.src);
  const TOKEN_KEY = "hopper-token";
  const STATES = ["scheduled", "available", "running", "completed", "failed", "cancelled"];
  const $ = (id) => document.getElementById(id);

  let role = null; // "read" | "admin" once known
  let inFlight = false;
  let again = false; // a refresh was asked for while one was running
  let lastOk = 0;
  let newerStack = []; // cursors of the pages before the current one
  // The overview's page of nodes (a page of the API's size, by name): the cursor it was
  // asked with ("" for the first) and how many pages came before it.
  let nodesBefore = "";
  let nodesPage = 1;
  let currentJob = null;
  let statsAt = 0;

  // ---- API -------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, options = {}) {
    const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      options = Object.assign({}, options, { body: JSON.stringify(options.body) });
    }
    const response = await fetch(new URL(path, API), Object.assign({}, options, { headers }));
    if (response.status === 204) return null;
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      const err = (body && body.error) || {};
      throw new ApiError(response.status, err.code || "error", err.message || response.statusText);
    }
    return body;
  }

  // ---- small DOM helpers -----------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.setAttribute("class", v);
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, String(v));
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function stateBadge(state) {
    return el("span", { class: "state " + state, text: state });
  }

  function fmtNumber(n) {
    return Number(n || 0).toLocaleString();
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms === 0) return "0";
    if (ms < 1) return ms.toFixed(2) + " ms";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    if (ms < 3600000) return (ms / 60000).toFixed(1) + " min";
    return (ms / 3600000).toFixed(1) + " h";
  }

  function fmtTime(iso) {
    if (!iso) return "–";
    const t = new Date(iso);
    const ago = (Date.now() - t.getTime()) / 1000;
    const abs = Math.abs(ago);
    let rel;
    if (abs < 60) rel = Math.round(abs) + " s";
    else if (abs < 3600) rel = Math.round(abs / 60) + " min";
    else if (abs < 86400) rel = Math.round(abs / 3600) + " h";
    else rel = Math.round(abs / 86400) + " d";
    return ago >= 0 ? rel + " ago" : "in " + rel;
  }

  function timeCell(iso) {
    return el("td", { title: iso || "", text: fmtTime(iso) });
  }

  function flash(message, isError) {
    const box = $("flash");
    box.textContent = message;
    box.className = isError ? "error" : "";
    box.hidden = false;
    clearTimeout(flash.timer);
    flash.timer = setTimeout(() => (box.hidden = true), 6000);
  }

  function show(viewId) {
    for (const id of ["view-overview", "view-jobs", "view-job", "view-missing", "login"]) {
      $(id).hidden = id !== viewId;
    }
    $("nav-overview").classList.toggle("current", viewId === "view-overview");
    $("nav-jobs").classList.toggle("current", viewId === "view-jobs" || viewId === "view-job");
  }

  // ---- routing ---------------------------------------------------------------------------

  function route() {
    const hash = location.hash.replace(/^#/, "") || "/";
    const [path, query] = hash.split("?");
    const params = new URLSearchParams(query || "");
    const job = path.match(/^\/jobs\/([0-9a-fA-F-]{36})$/);
    if (job) return { view: "job", id: job[1] };
    if (path === "/jobs") return { view: "jobs", params };
    if (path === "/") return { view: "overview" };
    return { view: "missing" };
  }

  async function refresh() {
    if (document.hidden) return;
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    try {
      if (role === null) await loadRole();
      const r = route();
      if (r.view === "overview") await renderOverview();
      else if (r.view === "jobs") await renderJobs(r.params);
      else if (r.view === "job") await renderJob(r.id);
      else {
        show("view-missing");
        $("missing-message").textContent = "There is no page at " + location.hash + ".";
      }
      lastOk = Date.now();
      setLive("live", "live · " + new Date().toLocaleTimeString());
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        showLogin(sessionStorage.getItem(TOKEN_KEY) ? "That token is not valid." : "");
      } else {
        setLive("down", "error: " + e.message);
      }
    } finally {
      inFlight = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  function setLive(cls, text) {
    const live = $("live-status");
    live.className = "live " + (cls === "live" ? "" : cls);
    live.textContent = text;
  }

  async function loadRole() {
    const who = await api("whoami");
    role = who.role;
    $("role").textContent = who.open ? "open access" : who.role === "admin" ? "admin" : "read-only";
    $("logout").hidden = who.open;
  }

  // ---- login -----------------------------------------------------------------------------

  function showLogin(message) {
    role = null;
    show("login");
    setLive("stale", "signed out");
    $("login-error").textContent = message;
    $("login-error").hidden = !message;
    $("login-token").focus();
  }

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("login-token").value.trim());
    $("login-token").value = "";
    role = null;
    refresh();
  });

  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("");
  });

  // ---- overview --------------------------------------------------------------------------

  async function renderOverview() {
    const wantStats = Date.now() - statsAt > STATS_MS;
    const [queues, stats, nodes] = await Promise.all([
      api("queues"),
      wantStats ? api("stats") : null,
      // A backend that keeps no statistics lists no nodes: the table stays empty.
      api("nodes" + (nodesBefore ? "?before=" + encodeURIComponent(nodesBefore) : "")).catch(() => ({
        nodes: [],
        next_before: null,
      })),
    ]);
    show("view-overview");
    for (const s of STATES) {
      const total = queues.queues.reduce((sum, q) => sum + q[s], 0);
      $("total-" + s).textContent = fmtNumber(total);
    }

    const body = $("queues-body");
    body.replaceChildren(
      ...queues.queues.map((q) => {
        const link = (state, n) => {
          const td = el("td", { class: "num" + (n ? "" : " zero") });
          const query = "queue=" + encodeURIComponent(q.queue) + "&state=" + state;
          td.append(n ? el("a", { href: "#/jobs?" + query, text: fmtNumber(n) }) : "0");
          return td;
        };
        const admin = role === "admin";
        const retry =
          admin && q.failed > 0
            ? el("button", {
                type: "button",
                class: "small secondary",
                "data-action": "retry-failed",
                "data-queue": q.queue,
                text: "Retry failed",
                onclick: () => retryFailed(q.queue),
              })
            : null;
        const toggle = admin
          ? el("button", {
              type: "button",
              class: "small secondary",
              "data-action": q.paused ? "resume" : "pause",
              "data-queue": q.queue,
              text: q.paused ? "Resume" : "Pause",
              onclick: () => setPaused(q.queue, !q.paused),
            })
          : null;
        return el(
          "tr",
          { "data-queue": q.queue, "data-paused": q.paused ? "yes" : "no" },
          el(
            "td",
            {},
            el("a", { href: "#/jobs?queue=" + encodeURIComponent(q.queue), text: q.queue }),
            q.paused ? el("span", { class: "state paused", text: "paused" }) : null
          ),
          ...STATES.map((s) => link(s, q[s])),
          el("td", { class: "num", text: q.available ? fmtMs(q.oldest_available_secs * 1000) : "–" }),
          el("td", { class: "limits", text: limitsText(q.settings) }),
          el("td", { class: "row-actions" }, toggle, retry)
        );
      })
    );
    $("queues-empty").hidden = queues.queues.length > 0;
    $("queue-names").replaceChildren(...queues.queues.map((q) => el("option", { value: q.queue })));
    $("nodes-body").replaceChildren(
      ...nodes.nodes.map((n) =>
        el(
          "tr",
          { "data-node": n.name },
          el("td", { title: n.id, text: n.name }),
          el("td", { text: n.queues.join(", ") }),
          el("td", { class: "num", text: fmtNumber(n.concurrency) }),
          timeCell(n.started_at),
          timeCell(n.heartbeat_at)
        )
      )
    );
    $("nodes-empty").hidden = nodes.nodes.length > 0 || nodesBefore !== "";
    // More nodes than a page: page through them, as through jobs.
    $("nodes-pager").hidden = !nodes.next_before && !nodesBefore;
    $("nodes-next").disabled = !nodes.next_before;
    $("nodes-next").dataset.cursor = nodes.next_before || "";
    $("nodes-first").disabled = !nodesBefore;
    $("nodes-page").textContent = "page " + nodesPage;
    if (stats) {
      statsAt = Date.now();
      drawThroughput(stats);
      drawLatency(stats);
    }
  }

  // A queue's global limits in one line: "5 running · 2 per group · 100/s (burst 10)".
  function limitsText(settings) {
    if (!settings) return "–";
    const parts = [];
    if (settings.max_running != null) parts.push(settings.max_running + " running");
    if (settings.max_running_per_group != null) parts.push(settings.max_running_per_group + " per group");
    const r = settings.rate;
    if (r) {
      const per = { 1000: "s", 60000: "min", 3600000: "h" }[r.per] || fmtMs(r.per);
      parts.push(r.jobs + "/" + per + " (burst " + r.burst + ")");
    }
    return parts.length ? parts.join(" · ") : "–";
  }

  $("nodes-next").addEventListener("click", () => {
    const cursor = $("nodes-next").dataset.cursor;
    if (!cursor) return;
    nodesBefore = cursor;
    nodesPage += 1;
    refresh();
  });

  $("nodes-first").addEventListener("click", () => {
    nodesBefore = "";
    nodesPage = 1;
    refresh();
  });

  async function setPaused(queue, paused) {
    const action = paused ? "pause" : "resume";
    try {
      await api("queues/" + encodeURIComponent(queue) + "/" + action, { method: "POST" });
      flash("Queue " + queue + (paused ? " paused." : " resumed."));
    } catch (e) {
      flash("Could not " + action + " " + queue + ": " + e.message, true);
    }
    refresh();
  }

  async function retryFailed(queue) {
    try {
      const r = await api("jobs/retry-failed", { method: "POST", body: { queue } });
      statsAt = 0;
      flash("Retried " + r.retried + " failed job" + (r.retried === 1 ? "" : "s") + " of " + queue + ".");
    } catch (e) {
      flash("Retry failed: " + e.message, true);
    }
    refresh();
  }

  // ---- charts (inline SVG) ---------------------------------------------------------------

  let W = 600; // set to the chart's width in pixels before each drawing
  const H = 160;
  const PAD = { left: 44, right: 8, top: 8, bottom: 20 };

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function frame(max, formatTick, minutes) {
    const g = svg("g");
    const y0 = H - PAD.bottom;
    g.append(svg("line", { class: "axis", x1: PAD.left, y1: y0, x2: W - PAD.right, y2: y0 }));
    for (const f of [0, 0.5, 1]) {
      const y = y0 - f * (y0 - PAD.top);
      g.append(svg("line", { class: "axis", x1: PAD.left, y1: y, x2: W - PAD.right, y2: y, "stroke-dasharray": f ? "2 3" : "" }));
      g.append(svg("text", { class: "tick", x: PAD.left - 4, y: y + 3, "text-anchor": "end", text: formatTick(max * f) }));
    }
    const n = minutes.length;
    for (const [i, label] of [[0, "-" + n + " min"], [Math.floor(n / 2), "-" + Math.ceil(n / 2) + " min"], [n - 1, "now"]]) {
      const x = PAD.left + ((i + 0.5) / n) * (W - PAD.left - PAD.right);
      g.append(svg("text", { class: "tick", x, y: H - 5, "text-anchor": "middle", text: label }));
    }
    return g;
  }

  function unavailable(target, summary, stats) {
    $(target).replaceChildren(el("p", { class: "muted", text: "Not available: " + (stats.activity_error || "no data") }));
    $(summary).textContent = "";
  }

  function chartWidth(target) {
    return Math.max(300, Math.round($(target).clientWidth) || 600);
  }

  function drawThroughput(stats) {
    if (!stats.minutes) return unavailable("chart-throughput", "throughput-summary", stats);
    W = chartWidth("chart-throughput");
    const minutes = stats.minutes;
    const max = niceMax(Math.max(...minutes.map((m) => m.completed + m.failed)));
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "jobs finished per minute" });
    root.append(frame(max, (v) => fmtNumber(Math.round(v)), minutes));
    const slot = (W - PAD.left - PAD.right) / minutes.length;
    const scale = (H - PAD.bottom - PAD.top) / max;
    minutes.forEach((m, i) => {
      const x = PAD.left + i * slot + 1;
      const w = Math.max(slot - 2, 1);
      let y = H - PAD.bottom;
      const title = new Date(m.minute).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) +
        ": " + m.completed + " completed, " + m.failed + " failed";
      for (const [cls, n] of [["bar-completed", m.completed], ["bar-failed", m.failed]]) {
        if (!n) continue;
        const h = n * scale;
        y -= h;
        root.append(svg("rect", { class: cls, x, y, width: w, height: h }, svg("title", { text: title })));
      }
    });
    $("chart-throughput").replaceChildren(root);
    const s = stats.summary;
    $("throughput-summary").textContent =
      fmtNumber(s.completed) + " completed (" + s.completed_per_minute.toFixed(1) + "/min), " +
      fmtNumber(s.failed) + " failed, mean run " + fmtMs(s.duration_avg_ms);
  }

  function drawLatency(stats) {
    if (!stats.minutes) return unavailable("chart-latency", "latency-summary", stats);
    W = chartWidth("chart-latency");
    const minutes = stats.minutes;
    const active = minutes.map((m, i) => ({ m, i })).filter(({ m }) => m.completed + m.failed > 0);
    const max = niceMax(Math.max(0, ...active.map(({ m }) => m.latency_p95_ms)));
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "latency per minute" });
    root.append(frame(max, fmtMs, minutes));
    const slot = (W - PAD.left - PAD.right) / minutes.length;
    const scale = (H - PAD.bottom - PAD.top) / max;
    for (const [field, cls] of [["latency_avg_ms", "avg"], ["latency_p95_ms", "p95"]]) {
      const points = active.map(({ m, i }) => [PAD.left + (i + 0.5) * slot, H - PAD.bottom - m[field] * scale]);
      if (points.length > 1) {
        root.append(svg("polyline", { class: "line-" + cls, points: points.map((p) => p.join(",")).join(" ") }));
      }
      active.forEach(({ m }, k) => {
        root.append(svg("circle", { class: "dot-" + cls, cx: points[k][0], cy: points[k][1], r: 2 },
          svg("title", { text: cls + " " + fmtMs(m[field]) })));
      });
    }
    $("chart-latency").replaceChildren(root);
    const s = stats.summary;
    $("latency-summary").textContent = active.length
      ? "mean " + fmtMs(s.latency_avg_ms) + ", worst minute p95 " + fmtMs(s.latency_p95_max_ms)
      : "nothing finished in the window";
  }

  // ---- job list --------------------------------------------------------------------------

  const FILTERS = ["queue", "state", "kind", "group", "meta", "since", "until", "limit"];

  function toLocalInput(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    if (isNaN(d)) return "";
    const local = new Date(d.getTime() - d.getTimezoneOffset() * 60000);
    return local.toISOString().slice(0, 19);
  }

  // A listed job's metadata in a list cell: compact JSON, cut at 80 characters; empty for
  // {}. A listing leaves out an args or meta over 4 KiB (args_bytes, meta_bytes give its
  // size): the cell says so, and the job's own page shows it whole.
  function metaSummary(job) {
    const parts = [];
    if (job.meta_bytes != null) {
      parts.push("meta left out (" + job.meta_bytes.toLocaleString("en") + " bytes)");
    } else if (job.meta && Object.keys(job.meta).length > 0) {
      const text = JSON.stringify(job.meta);
      parts.push(text.length > 80 ? text.slice(0, 80) + "…" : text);
    }
    if (job.args_bytes != null) {
      parts.push("args left out (" + job.args_bytes.toLocaleString("en") + " bytes)");
    }
    return parts.join(" · ");
  }

  async function renderJobs(params) {
    const query = new URLSearchParams();
    for (const f of FILTERS) if (params.get(f)) query.set(f, params.get(f));
    if (params.get("before")) query.set("before", params.get("before"));
    const page = await api("jobs?" + query.toString());
    show("view-jobs");

    // Reflect the filters in the form unless the user is editing it.
    if (!$("jobs-filter").contains(document.activeElement)) {
      $("filter-queue").value = params.get("queue") || "";
      $("filter-state").value = params.get("state") || "";
      $("filter-kind").value = params.get("kind") || "";
      $("filter-group").value = params.get("group") || "";
      $("filter-meta").value = params.get("meta") || "";
      $("filter-since").value = toLocalInput(params.get("since"));
      $("filter-until").value = toLocalInput(params.get("until"));
      $("filter-limit").value = params.get("limit") || "50";
    }

    $("jobs-body").replaceChildren(
      ...page.jobs.map((job) => {
        const last = job.errors.length ? job.errors[job.errors.length - 1].error : "";
        return el(
          "tr",
          { "data-job-id": job.id, "data-state": job.state },
          el("td", { class: "mono" }, el("a", { href: "#/jobs/" + job.id, text: job.id })),
          el("td", { text: job.queue }),
          el("td", { text: job.kind }),
          el("td", { text: job.group || "" }),
          el("td", { class: "mono", "data-field": "meta", text: metaSummary(job) }),
          el("td", {}, stateBadge(job.state)),
          el("td", { class: "num", text: job.attempts_used + " / " + job.max_attempts }),
          timeCell(job.created_at),
          timeCell(job.run_at),
          el("td", { class: "error-text", text: last.length > 160 ? last.slice(0, 160) + "…" : last })
        );
      })
    );
    $("jobs-empty").hidden = page.jobs.length > 0;
    $("jobs-older").disabled = !page.next_before;
    $("jobs-older").dataset.cursor = page.next_before || "";
    $("jobs-newer").disabled = !params.get("before");
    $("jobs-page").textContent = "page " + (newerStack.length + 1);
  }

  function jobsHash(overrides) {
    const current = route().params || new URLSearchParams();
    const next = new URLSearchParams();
    for (const f of FILTERS) {
      const v = f in overrides ? overrides[f] : current.get(f);
      if (v) next.set(f, v);
    }
    if (overrides.before) next.set("before", overrides.before);
    const q = next.toString();
    return "#/jobs" + (q ? "?" + q : "");
  }

  $("jobs-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    const iso = (v) => (v ? new Date(v).toISOString() : "");
    newerStack = [];
    location.hash = jobsHash({
      queue: $("filter-queue").value.trim(),
      state: $("filter-state").value,
      kind: $("filter-kind").value.trim(),
      group: $("filter-group").value.trim(),
      meta: $("filter-meta").value.trim(),
      since: iso($("filter-since").value),
      until: iso($("filter-until").value),
      limit: $("filter-limit").value,
    });
  });

  $("filter-clear").addEventListener("click", () => {
    newerStack = [];
    $("jobs-filter").reset();
    location.hash = "#/jobs";
  });

  $("jobs-older").addEventListener("click", () => {
    const cursor = $("jobs-older").dataset.cursor;
    if (!cursor) return;
    newerStack.push((route().params || new URLSearchParams()).get("before") || "");
    location.hash = jobsHash({ before: cursor });
  });

  $("jobs-newer").addEventListener("click", () => {
    const before = newerStack.pop() || "";
    location.hash = jobsHash({ before });
  });

  // ---- job detail ------------------------------------------------------------------------

  async function renderJob(id) {
    let job;
    try {
      job = await api("jobs/" + id);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        show("view-missing");
        $("missing-message").textContent = "No job " + id + " (it may have been deleted or pruned).";
        return;
      }
      throw e;
    }
    currentJob = job;
    show("view-job");
    $("job-title").replaceChildren(job.kind + " ", stateBadge(job.state));
    $("job-back").href = "#/jobs?queue=" + encodeURIComponent(job.queue);

    const latency = job.attempted_at ? new Date(job.attempted_at) - new Date(job.run_at) : null;
    const total = job.finished_at ? new Date(job.finished_at) - new Date(job.created_at) : null;
    const fields = [
      ["id", job.id],
      ["queue", job.queue],
      ["kind", job.kind],
      ["group", job.group || "–"],
      ["unique key", job.unique_key || "–"],
      ["state", job.state],
      ["priority", job.priority + ({ 1: " (high)", 2: " (normal)", 3: " (low)" }[job.priority] || "")],
      ["attempts", job.attempts_used + " of " + job.max_attempts + " (claims: " + job.attempt + ")"],
      ["timeout", fmtMs(job.timeout_ms)],
      ["created", fmtTime(job.created_at) + " · " + job.created_at],
      ["run at", fmtTime(job.run_at) + " · " + job.run_at],
      ["last attempt started", job.attempted_at ? fmtTime(job.attempted_at) + " · " + job.attempted_at : "–"],
      ["wait before last attempt", latency === null ? "–" : fmtMs(Math.max(latency, 0))],
      ["ran for", job.duration_ms !== null ? fmtMs(job.duration_ms)
        : job.errors.length ? fmtMs(job.errors[job.errors.length - 1].duration_ms) + " (last failed attempt)" : "–"],
      ["finished", job.finished_at ? fmtTime(job.finished_at) + " · " + job.finished_at : "–"],
      ["created → finished", total === null ? "–" : fmtMs(total)],
      ["node", job.node_id || "–"],
      ["lease expires", job.lease_expires_at ? fmtTime(job.lease_expires_at) : "–"],
    ];
    $("job-fields").replaceChildren(
      ...fields.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { "data-field": k, text: v })])
    );
    const args = JSON.stringify(job.args, null, 2);
    if ($("job-args").textContent !== args) $("job-args").textContent = args;
    const meta = JSON.stringify(job.meta || {}, null, 2);
    if ($("job-meta").textContent !== meta) $("job-meta").textContent = meta;

    // Each attempt's lines, then a marker row where lines past the bound were dropped.
    const logs = job.logs || [];
    $("job-logs-body").replaceChildren(
      ...logs.flatMap((log) => [
        ...log.lines.map((line) =>
          el(
            "tr",
            { "data-attempt": log.attempt, "data-level": line.level },
            el("td", { class: "num", text: log.attempt }),
            timeCell(line.at),
            el("td", { text: line.level }),
            el("td", { class: "log-text", text: line.message }),
            el("td", { class: "mono", text: line.fields ? JSON.stringify(line.fields) : "" })
          )
        ),
        ...(log.dropped > 0
          ? [el("tr", { class: "log-truncated", "data-attempt": log.attempt },
              el("td", { class: "num", text: log.attempt }),
              el("td", { colspan: 4, text: "truncated: " + log.dropped + " more lines dropped past the per-attempt limit" }))]
          : []),
      ])
    );
    $("job-logs-empty").hidden = logs.some((log) => log.lines.length > 0 || log.dropped > 0);

    $("job-errors-body").replaceChildren(
      ...job.errors
        .slice()
        .reverse()
        .map((e) =>
          el(
            "tr",
            { "data-attempt": e.attempt },
            el("td", { class: "num", text: e.attempt }),
            timeCell(e.at),
            el("td", { class: "num", text: fmtMs(e.duration_ms) }),
            el("td", { class: "mono", text: e.node || "–" }),
            el("td", { class: "error-text", text: e.error })
          )
        )
    );
    $("job-errors-empty").hidden = job.errors.length > 0;

    const admin = role === "admin";
    $("job-retry").hidden = !admin || !["failed", "cancelled"].includes(job.state);
    $("job-cancel").hidden = !admin || !["scheduled", "available", "running"].includes(job.state);
    $("job-delete").hidden = !admin || job.state === "running";
    $("job-readonly").hidden = admin;
  }

  async function jobAction(action, method, doneMessage) {
    if (!currentJob) return;
    const id = currentJob.id;
    try {
      await api("jobs/" + id + (action ? "/" + action : ""), { method });
      flash(doneMessage);
      if (method === "DELETE") {
        location.hash = "#/jobs?queue=" + encodeURIComponent(currentJob.queue);
        return;
      }
    } catch (e) {
      flash(e.message, true);
    }
    refresh();
  }

  $("job-retry").addEventListener("click", () => jobAction("retry", "POST", "Job retried."));
  $("job-cancel").addEventListener("click", () => jobAction("cancel", "POST", "Job cancelled."));
  // Delete asks twice (no browser dialog, so tests can drive it): arm, then confirm.
  $("job-delete").addEventListener("click", () => {
    const button = $("job-delete");
    if (button.dataset.armed === "yes") {
      button.dataset.armed = "";
      button.textContent = "Delete";
      jobAction("", "DELETE", "Job deleted.");
      return;
    }
    button.dataset.armed = "yes";
    button.textContent = "Really delete?";
    setTimeout(() => {
      button.dataset.armed = "";
      button.textContent = "Delete";
    }, 5000);
  });

  // ---- start -----------------------------------------------------------------------------

  window.addEventListener("hashchange", () => {
    if (!route().params || !route().params.get("before")) newerStack = [];
    refresh();
  });
  document.addEventListener("visibilitychange", () => document.hidden || refresh());
  setInterval(() => {
    if (lastOk && Date.now() - lastOk > 3 * POLL_MS) setLive("stale", "stale since " + new Date(lastOk).toLocaleTimeString());
    refresh();
  }, POLL_MS);
  refresh();
})();
