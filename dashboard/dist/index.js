(function () {
  "use strict";
  // Chronicle's tab in Hermes' dashboard. Plain JavaScript, no build step: React and the
  // components come from the host (window.__HERMES_PLUGIN_SDK__), and every request goes
  // through the SDK's fetchJSON, which carries the dashboard's own auth. Read-only.
  const SDK = window.__HERMES_PLUGIN_SDK__;
  if (!SDK || !window.__HERMES_PLUGINS__) return;

  const React = SDK.React;
  const h = React.createElement;
  const useState = SDK.hooks.useState;
  const useEffect = SDK.hooks.useEffect;
  const C = SDK.components || {};
  const Card = C.Card || "section";
  const CardContent = C.CardContent || "div";
  const BASE = "/api/plugins/chronicle";

  function api(path) {
    return SDK.fetchJSON(BASE + path);
  }

  function when(stamp, short) {
    if (!stamp) return "";
    const d = new Date(stamp);
    if (isNaN(d.getTime())) return String(stamp);
    const opts = { month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit" };
    if (!short) opts.year = "numeric";
    return d.toLocaleString([], opts);
  }

  function clip(text, n) {
    text = String(text || "");
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  function qs(params) {
    return Object.keys(params)
      .filter(function (k) { return params[k] !== undefined && params[k] !== null && params[k] !== ""; })
      .map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]); })
      .join("&");
  }

  function Panel(props) {
    return h(Card, { className: "chr-panel", "data-testid": props.testid },
      h(CardContent, { className: "chr-panel-body" },
        h("h3", { className: "chr-title" }, props.title),
        props.children));
  }

  function Conversations(props) {
    return h(Panel, { title: "Conversations", testid: "chronicle-conversations" },
      props.items.length === 0 && h("p", { className: "chr-dim" }, "No conversation yet."),
      h("ul", { className: "chr-list" }, props.items.map(function (c) {
        const active = c.session === props.selected;
        return h("li", { key: c.session },
          h("button", {
            className: "chr-conv" + (active ? " chr-active" : ""),
            "data-session": c.session,
            onClick: function () { props.onSelect(c.session); },
          },
          h("strong", null, c.session),
          h("span", { className: "chr-dim" },
            " " + c.events + " events · " + c.sections + " sections · " + c.sessions.length +
            " session" + (c.sessions.length === 1 ? "" : "s") + " · " + when(c.last_active))));
      })));
  }

  // Estimated prompt tokens over the conversation, with a marker at each compaction.
  function TokenChart(props) {
    const pts = props.points;
    if (!pts.length) return h("p", { className: "chr-dim" }, "No messages yet.");
    const W = 640, H = 180, P = 36;
    const maxSeq = pts[pts.length - 1].seq, minSeq = pts[0].seq;
    const maxTok = Math.max.apply(null, pts.map(function (p) { return p.tokens; })) || 1;
    function x(seq) { return P + (W - 2 * P) * (maxSeq === minSeq ? 0 : (seq - minSeq) / (maxSeq - minSeq)); }
    function y(t) { return H - P - (H - 2 * P) * (t / maxTok); }
    const line = pts.map(function (p) { return x(p.seq).toFixed(1) + "," + y(p.tokens).toFixed(1); }).join(" ");
    const marks = props.compactions.map(function (c, i) {
      return h("g", { key: "c" + i, className: "chr-compaction-mark", "data-seq": c.seq },
        h("line", { x1: x(c.seq), x2: x(c.seq), y1: P - 6 - (i % 2) * 12, y2: H - P, className: "chr-mark-line" }),
        // Labels alternate between two rows so neighbours do not overlap; one near the right
        // edge is written leftwards from its line, so it stays whole.
        h("text", { x: x(c.seq) + (x(c.seq) > W - 140 ? -3 : 3), y: P - 8 - (i % 2) * 12,
          className: "chr-mark-text", textAnchor: x(c.seq) > W - 140 ? "end" : "start" },
          "compaction " + c.tokens_before.toLocaleString() + "→" + c.tokens_after.toLocaleString()));
    });
    return h("svg", { viewBox: "0 0 " + W + " " + H, className: "chr-chart", "data-testid": "chronicle-token-chart" },
      h("line", { x1: P, x2: W - P, y1: H - P, y2: H - P, className: "chr-axis" }),
      h("line", { x1: P, x2: P, y1: P, y2: H - P, className: "chr-axis" }),
      h("text", { x: P + 2, y: P + 10, className: "chr-axis-text" }, maxTok.toLocaleString() + " tokens"),
      h("text", { x: W - P, y: H - 10, className: "chr-axis-text", textAnchor: "end" }, "seq " + maxSeq),
      h("text", { x: P, y: H - 10, className: "chr-axis-text" }, "seq " + minSeq),
      h("polyline", { points: line, className: "chr-line" }),
      marks);
  }

  function Timeline(props) {
    return h("ol", { className: "chr-timeline", "data-testid": "chronicle-timeline" },
      props.items.map(function (t) {
        if (t.kind === "compaction") {
          return h("li", { key: "k" + t.seq, className: "chr-row chr-row-compaction", "data-kind": "compaction" },
            h("span", { className: "chr-seq" }, "seq " + t.seq),
            h("span", { className: "chr-badge" }, "compaction"),
            " sections " + (t.sections.join(", ") || "-") + "; tokens " + t.tokens_before.toLocaleString() +
            " → " + t.tokens_after.toLocaleString() + "; verbatim from seq " + (t.first_kept_seq || "-"));
        }
        if (t.kind === "switch" || t.kind === "branch") {
          return h("li", { key: "s" + t.seq, className: "chr-row chr-row-switch", "data-kind": t.kind },
            h("span", { className: "chr-seq" }, "seq " + t.seq),
            h("span", { className: "chr-badge" }, t.kind === "switch" ? t.reason : "branch"),
            t.kind === "switch" ? " " + t.session + " continues " + t.parent : " " + t.text);
        }
        return h("li", { key: "m" + t.seq, className: "chr-row", "data-kind": "message", "data-seq": t.seq },
          h("span", { className: "chr-seq" }, "seq " + t.seq),
          h("span", { className: "chr-role chr-role-" + t.role }, t.role),
          h("span", { className: "chr-dim" }, " " + when(t.time) + " "),
          h("span", null, t.text));
      }));
  }

  function Sections(props) {
    const [open, setOpen] = useState({});
    function expand(id) {
      if (open[id]) { const next = Object.assign({}, open); delete next[id]; setOpen(next); return; }
      api("/expand?" + qs({ session: props.session, section: id })).then(function (data) {
        const next = Object.assign({}, open); next[id] = data.messages; setOpen(next);
      }).catch(function (err) {
        const next = Object.assign({}, open); next[id] = [{ seq: "!", message: { role: "error", content: String(err) } }]; setOpen(next);
      });
    }
    if (!props.items.length) return h("p", { className: "chr-dim" }, "No sections yet: a conversation gets its first at its first compaction.");
    return h("ul", { className: "chr-list", "data-testid": "chronicle-sections" }, props.items.map(function (s) {
      return h("li", { key: s.id, className: "chr-section", "data-section": s.id },
        h("div", null,
          h("strong", null, "section " + s.id),
          h("span", { className: "chr-dim" }, " cites seq " + s.from_seq + ".." + s.to_seq + " · " + when(s.created_at) + " "),
          h("button", { className: "chr-button", "data-expand": s.id, onClick: function () { expand(s.id); } },
            open[s.id] ? "collapse" : "expand to the originals")),
        h("pre", { className: "chr-prose" }, s.prose),
        open[s.id] && h("ol", { className: "chr-originals", "data-originals": s.id }, open[s.id].map(function (m) {
          const msg = m.message || {};
          let text = msg.content;
          if (typeof text !== "string") text = JSON.stringify(msg.tool_calls || msg.content || "");
          return h("li", { key: m.seq, className: "chr-row", "data-seq": m.seq },
            h("span", { className: "chr-seq" }, "seq " + m.seq),
            h("span", { className: "chr-role chr-role-" + msg.role }, msg.role),
            h("span", null, " " + clip(text, 400)));
        })));
    }));
  }

  function Search(props) {
    const [query, setQuery] = useState("");
    const [scope, setScope] = useState("all");
    const [tools, setTools] = useState(false);
    const [only, setOnly] = useState(false);
    const [result, setResult] = useState(null);
    function run(ev) {
      if (ev) ev.preventDefault();
      if (!query.trim()) return;
      const params = { q: query, scope: scope, include_tools: tools ? "true" : "", session: only ? props.session : "" };
      api("/search?" + qs(params)).then(setResult).catch(function (err) { setResult({ error: String(err), hits: [] }); });
    }
    return h(Panel, { title: "Search", testid: "chronicle-search" },
      h("form", { className: "chr-search", onSubmit: run },
        h("input", { className: "chr-input", name: "q", placeholder: "words to look for", value: query,
          onChange: function (e) { setQuery(e.target.value); } }),
        h("select", { className: "chr-input", name: "scope", value: scope, onChange: function (e) { setScope(e.target.value); } },
          ["all", "messages", "sections", "beliefs", "session"].map(function (s) { return h("option", { key: s, value: s }, s); })),
        h("label", null, h("input", { type: "checkbox", name: "only", checked: only, onChange: function (e) { setOnly(e.target.checked); } }), " this conversation"),
        h("label", null, h("input", { type: "checkbox", name: "tools", checked: tools, onChange: function (e) { setTools(e.target.checked); } }), " agent's tool calls"),
        h("button", { className: "chr-button", type: "submit" }, "search")),
      result && result.error && h("p", { className: "chr-error" }, result.error),
      result && h("ol", { className: "chr-list", "data-testid": "chronicle-hits" }, result.hits.map(function (hit) {
        return h("li", { key: hit.id || hit.rank, className: "chr-row", "data-seq": hit.seq },
          h("span", { className: "chr-seq" }, hit.rank + ". " + (hit.section_id ? "section " + hit.section_id : "seq " + hit.seq)),
          h("span", { className: "chr-role" }, hit.speaker || hit.role || hit.kind),
          h("span", { className: "chr-dim" }, " " + (hit.session || "") + " " + when(hit.time) + " "),
          h("span", null, clip(hit.text || hit.prose || "", 300)));
      })),
      result && result.hidden_tool_hits > 0 && h("p", { className: "chr-dim" },
        result.hidden_tool_hits + " hits from the agent's own chronicle_* tool calls left out."));
  }

  function Maintenance(props) {
    const m = props.data;
    if (!m) return null;
    return h(Panel, { title: "Maintenance", testid: "chronicle-maintenance" },
      m.summary.map(function (line, i) { return h("p", { key: i, className: "chr-line-text" }, line); }),
      h("div", { className: "chr-table-wrap" }, h("table", { className: "chr-table" },
        h("thead", null, h("tr", null, ["task", "cron", "last run", "outcome", "next due"].map(function (c) { return h("th", { key: c }, c); }))),
        h("tbody", null, m.schedules.map(function (s) {
          return h("tr", { key: s.task, "data-task": s.task },
            h("td", null, s.task), h("td", { className: "chr-nowrap" }, s.cron || ""), h("td", { className: "chr-nowrap" }, when(s.last_finished, true)),
            h("td", { className: "chr-outcome" }, s.last_outcome || "-"), h("td", { className: "chr-nowrap" }, when(s.next_due, true)));
        })))));
  }

  function ChroniclePage() {
    const [overview, setOverview] = useState(null);
    const [selected, setSelected] = useState(null);
    const [conv, setConv] = useState(null);
    const [maint, setMaint] = useState(null);
    const [error, setError] = useState(null);

    useEffect(function () {
      api("/overview").then(function (data) {
        setOverview(data);
        if (data.conversations.length) setSelected(data.conversations[0].session);
      }).catch(function (err) { setError(String(err)); });
      api("/maintenance").then(setMaint).catch(function () { setMaint(null); });
    }, []);
    useEffect(function () {
      if (!selected) return;
      setConv(null);
      api("/conversation?" + qs({ session: selected })).then(setConv).catch(function (err) { setError(String(err)); });
    }, [selected]);

    if (error) return h("div", { className: "chr-page" }, h("p", { className: "chr-error", "data-testid": "chronicle-error" }, error));
    if (!overview) return h("div", { className: "chr-page" }, h("p", { className: "chr-dim" }, "Loading Chronicle…"));
    const compactions = conv ? conv.timeline.filter(function (t) { return t.kind === "compaction"; }) : [];
    return h("div", { className: "chr-page", "data-testid": "chronicle-page" },
      h("header", { className: "chr-header" },
        h("h2", null, "Chronicle"),
        h("span", { className: "chr-dim", "data-testid": "chronicle-stats" },
          overview.events.toLocaleString() + " events through seq " + overview.last_seq + " · " +
          overview.sessions + " sessions · ",
          h("span", { title: overview.db_path }, overview.db_shown),
          " · read-only")),
      h("div", { className: "chr-grid" },
        h(Conversations, { items: overview.conversations, selected: selected, onSelect: setSelected }),
        h("div", { className: "chr-main" },
          conv && h(Panel, { title: "Prompt tokens of " + conv.session, testid: "chronicle-tokens" },
            h(TokenChart, { points: conv.tokens, compactions: compactions }),
            h("p", { className: "chr-dim" }, conv.tokens_note)),
          conv && h(Panel, { title: "Sections of " + conv.chronicle, testid: "chronicle-sections-panel" },
            h(Sections, { items: conv.sections, session: conv.session })),
          conv && h(Panel, { title: "Timeline: " + conv.messages + " messages, " + conv.compactions + " compactions", testid: "chronicle-timeline-panel" },
            conv.truncated > 0 && h("p", { className: "chr-dim" }, "(the " + conv.truncated + " oldest entries are not shown)"),
            h(Timeline, { items: conv.timeline })))),
      h("div", { className: "chr-grid chr-grid-bottom" },
        h(Search, { session: selected }),
        h(Maintenance, { data: maint })));
  }

  window.__HERMES_PLUGINS__.register("chronicle", ChroniclePage);
})();
