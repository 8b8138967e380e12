// The explorer's page (seq2seq/explorer): no library, no request to another host.
// With window.SNAPSHOT (a saved view) it draws the saved answers and asks the server nothing.
(() => {
  "use strict";
  const $ = (selector, root = document) => root.querySelector(selector);
  const snapshot = window.SNAPSHOT || null;
  const state = { models: [], results: {}, masks: {}, views: {} };

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "on") for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
      else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  async function api(path, body) {
    const init = body === undefined ? {} : {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
    const response = await fetch(path, init);
    const text = await response.text();
    let data = null;
    try { data = JSON.parse(text); } catch (err) { data = null; }
    if (!response.ok) throw new Error((data && data.error) || `${path}: HTTP ${response.status}`);
    return data === null ? text : data;
  }

  function say(message) { const box = $("#message"); if (box) box.textContent = message || ""; }
  const fmt = (weight) => weight.toFixed(3);
  function shade(weight) {
    const v = Math.max(0, Math.min(1, weight));
    return `hsl(220, 75%, ${Math.round(100 - 62 * v)}%)`;
  }

  // As seq2seq.evaluation.aer.word_attention: a target word's row is the mean of its pieces'
  // rows, a source word's column the sum of its pieces' columns (a piece split over the words
  // it overlaps), the source EOS last; the target EOS row is no word.
  function toWords(matrix, srcOwners, tgtOwners, nSrc, nTgt) {
    const out = Array.from({ length: nTgt }, () => new Array(nSrc + 1).fill(0));
    const count = new Array(nTgt).fill(0);
    tgtOwners.forEach((owners) => owners.forEach((w) => { count[w] += 1; }));
    tgtOwners.forEach((owners, t) => owners.forEach((w) => {
      const row = matrix[t];
      srcOwners.forEach((sources, s) => sources.forEach((sw) => {
        out[w][sw] += row[s] / sources.length / Math.max(count[w], 1);
      }));
      out[w][nSrc] += row[srcOwners.length] / Math.max(count[w], 1);
    }));
    return out;
  }

  const mean = (matrices) => matrices[0].map((row, q) => row.map((_, k) =>
    matrices.reduce((sum, m) => sum + m[q][k], 0) / matrices.length));

  // What one column draws: a matrix and its labels, for its view (kind, layer, head, pieces).
  function chosenMatrix(result, model, view, pieces) {
    const a = result.attention;
    const srcWords = [...a.src_words, "</s>"];
    const decoderKeys = ["<s>", ...a.tgt_pieces.slice(0, -1)];
    if (view.kind === "cross" && view.layer === "reading") {
      return pieces ? { m: a.pieces, rows: a.tgt_pieces, cols: a.src_pieces }
        : { m: a.words, rows: a.tgt_words, cols: srcWords };
    }
    const layer = view.layer === "reading" ? model.layers[view.kind] - 1 : Number(view.layer);
    const heads = a.heads[view.kind][layer];
    const m = view.head === "mean" ? mean(heads) : heads[Number(view.head)];
    if (view.kind === "encoder") return { m, rows: a.src_pieces, cols: a.src_pieces };
    if (view.kind === "decoder") return { m, rows: a.tgt_pieces, cols: decoderKeys };
    return pieces ? { m, rows: a.tgt_pieces, cols: a.src_pieces }
      : { m: toWords(m, a.src_piece_words, a.tgt_piece_words, a.src_words.length, a.tgt_words.length),
        rows: a.tgt_words, cols: srcWords };
  }

  function heatmap(chosen, weights) {
    const table = el("table", { class: "heatmap" });
    table.append(el("tr", {}, el("th"), chosen.cols.map((label, i) => el("th", { class: "src", "data-index": i }, label))));
    chosen.m.forEach((row, t) => {
      const header = el("th", { class: "tgt", "data-index": t }, chosen.rows[t]);
      const show = () => {
        table.querySelectorAll("th.tgt.active").forEach((th) => th.classList.remove("active"));
        header.classList.add("active");
        if (!weights) return;
        weights.replaceChildren(el("strong", {}, `${chosen.rows[t]} → `),
          ...row.map((w, s) => el("span", { class: "weight", "data-src": s, "data-value": w }, `${chosen.cols[s]} ${fmt(w)}`)));
      };
      header.addEventListener("mouseenter", show);
      table.append(el("tr", {}, header, row.map((w, s) => {
        const cell = el("td", { title: `${chosen.rows[t]} → ${chosen.cols[s]}: ${fmt(w)}`,
          style: `background:${shade(w)};color:${w > 0.5 ? "#fff" : "#222"}` }, w >= 0.95 ? "1" : w >= 0.1 ? w.toFixed(1).slice(1) : "");
        cell.addEventListener("mouseenter", show);
        return cell;
      })));
    });
    return table;
  }

  function linksPicture(a) {
    const width = 560, gap = Math.max(a.src_words.length, a.tgt_words.length, 1);
    const x = (i, n) => 10 + (i + 0.5) * (width - 20) / Math.max(n, 1);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "links"); svg.setAttribute("width", width); svg.setAttribute("height", 90);
    svg.setAttribute("data-words", gap);
    const add = (tag, attrs, text) => {
      const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text !== undefined) node.textContent = text;
      svg.append(node); return node;
    };
    a.links.forEach(([i, j]) => add("line", { x1: x(i, a.src_words.length), y1: 20, x2: x(j, a.tgt_words.length), y2: 70 }));
    a.src_words.forEach((w, i) => add("text", { x: x(i, a.src_words.length), y: 14, "text-anchor": "middle" }, w));
    a.tgt_words.forEach((w, j) => add("text", { x: x(j, a.tgt_words.length), y: 86, "text-anchor": "middle" }, w));
    return svg;
  }

  function select(options, value, onChange) {
    const node = el("select", { on: { change: (e) => onChange(e.target.value) } },
      options.map(([v, label]) => el("option", { value: v, selected: String(v) === String(value) }, label)));
    return node;
  }

  function headsControls(model, view) {
    const update = (key) => (value) => { view[key] = value; render(); };
    const layers = [["reading", view.kind === "cross" ? "align's reading" : "last"],
      ...Array.from({ length: model.layers[view.kind] }, (_, l) => [l, `layer ${l}`])];
    const heads = [["mean", "mean of heads"], ...Array.from({ length: model.heads }, (_, h) => [h, `head ${h}`])];
    return el("div", { class: "heads-controls" },
      el("label", {}, "attention ", select([["cross", "cross"], ["encoder", "encoder self"], ["decoder", "decoder self"]], view.kind,
        (value) => { view.kind = value; view.layer = "reading"; render(); })),
      el("label", {}, select(layers, view.layer, update("layer"))),
      view.kind === "cross" && view.layer === "reading" ? null
        : el("label", {}, select(heads, view.head, update("head"))),
      el("label", {}, el("input", { type: "checkbox", class: "grid-toggle", checked: view.grid,
        on: { change: (e) => { view.grid = e.target.checked; render(); } } }), " all layers × heads"));
  }

  function grid(result, model, view) {
    const box = el("div", { class: "grid", style: `grid-template-columns: repeat(${model.heads}, auto)` });
    for (let layer = 0; layer < model.layers[view.kind]; layer += 1) {
      for (let head = 0; head < model.heads; head += 1) {
        const chosen = chosenMatrix(result, model, { ...view, layer, head }, true);
        box.append(el("figure", {}, heatmap(chosen, null), el("figcaption", {}, `layer ${layer} head ${head}`)));
      }
    }
    return box;
  }

  function maskTable(model) {
    const mask = state.masks[model.id] || [];
    const on = (kind, layer, head) => mask.some((h) => h.kind === kind && h.layer === layer && h.head === head);
    const table = el("table");
    ["encoder", "decoder", "cross"].forEach((kind) => {
      for (let layer = 0; layer < model.layers[kind]; layer += 1) {
        table.append(el("tr", {}, el("td", {}, `${kind} ${layer}`),
          Array.from({ length: model.heads }, (_, head) => el("td", {}, el("label", {},
            el("input", { type: "checkbox", "data-kind": kind, "data-layer": layer, "data-head": head, checked: on(kind, layer, head),
              on: { change: (e) => {
                const now = state.masks[model.id] || [];  // as ticked so far, not as drawn
                const rest = now.filter((h) => !(h.kind === kind && h.layer === layer && h.head === head));
                state.masks[model.id] = e.target.checked ? [...rest, { kind, layer, head }] : rest;
                translateOne(model.id);
              } } }), `${head}`)))));
      }
    });
    return el("details", { class: "mask", open: mask.length > 0 }, el("summary", {}, "switch heads off"), table);
  }

  function column(model) {
    const result = state.results[model.id];
    const view = state.views[model.id] || (state.views[model.id] = { kind: "cross", layer: "reading", head: "mean", grid: false });
    const pieces = snapshot ? false : $("#pieces").checked;
    const box = el("div", { class: "column", "data-model": model.id },
      el("h2", {}, model.label),
      el("div", { class: "meta" }, `${model.src_lang}→${model.tgt_lang}, ${model.corpus}` + (model.step === null ? "" : `, step ${model.step}`)));
    if (!result) return box;
    const translation = el("div", { class: "translation" },
      result.hypotheses.map((h, i) => el("div", { class: `hypothesis${i === 0 ? " chosen" : ""}` },
        el("span", { class: "text" }, h.text), " ", el("span", { class: "meta" }, `(${h.score.toFixed(3)})`))),
      el("div", { class: "meta" }, `${(result.seconds * 1000).toFixed(0)} ms` + (result.mask.length ? `, heads off: ${result.mask.map((h) => h.join(" ")).join("; ")}` : "")),
      result.notice ? el("div", { class: "notice" }, result.notice) : null,
      result.scores ? el("div", { class: "scores" }, `sentence BLEU ${result.scores.bleu.toFixed(2)}, chrF ${result.scores.chrf.toFixed(2)}`) : null,
      result.unmasked ? el("div", { class: "scores unmasked" }, `all heads on: ${result.unmasked.text}` +
        (result.unmasked.scores ? ` (BLEU ${result.unmasked.scores.bleu.toFixed(2)}, chrF ${result.unmasked.scores.chrf.toFixed(2)})` : "")) : null);
    box.append(translation);
    if (result.attention === null) {
      box.append(el("p", { class: "note" }, model.has_attention ? "no attention was read: the translation is empty"
        : `The ${model.model} model has no attention: every decoder step reads one fixed context, the encoder's last state, so there are no weights to show.`));
      return box;
    }
    const a = result.attention;
    box.append(el("div", { class: "reading" }, `read on “${result.target}”: ${a.reading}`));
    if (model.heads > 0) box.append(headsControls(model, view));
    const weights = el("div", { class: "weights" });
    box.append(heatmap(chosenMatrix(result, model, view, pieces), weights), weights);
    if (view.kind === "cross" && view.layer === "reading") box.append(linksPicture(a));
    if (model.heads > 0 && view.grid) box.append(grid(result, model, view));
    if (model.heads > 0 && !snapshot) box.append(maskTable(model));
    return box;
  }

  function render() {
    $("#columns").replaceChildren(...state.models.map(column));
  }

  function request(id) {
    const value = (selector) => $(selector).value.trim();
    return { model: id, text: $("#source").value, beam_size: Number($("#beam").value), nbest: Number($("#nbest").value),
      target: value("#target") || null, reference: value("#reference") || null, mask: state.masks[id] || [] };
  }

  const latest = {};  // model -> the number of its latest request: older answers are dropped
  async function translateOne(id) {
    const number = (latest[id] || 0) + 1;
    latest[id] = number;
    try {
      const answer = await api("/api/translate", request(id));
      if (latest[id] !== number) return;
      state.results[id] = answer;
      say("");
    } catch (err) {
      if (latest[id] !== number) return;
      say(err.message);
    }
    render();
  }

  async function translateAll() {
    say("");
    for (const model of state.models) await translateOne(model.id);
  }

  async function pickSplit() {
    const split = $("#split").value;
    $("#example").replaceChildren();
    if (!split || !state.models.length) return;
    try {
      const rows = await api(`/api/examples?model=0&split=${encodeURIComponent(split)}`);
      state.examples = rows;
      $("#example").replaceChildren(el("option", { value: "" }, `${rows.length} sentences`),
        ...rows.map((row, i) => el("option", { value: i }, row.source.slice(0, 80))));
    } catch (err) { say(err.message); }
  }

  function pickExample() {
    const row = state.examples && state.examples[Number($("#example").value)];
    if (!row || $("#example").value === "") return;
    $("#source").value = row.source; $("#reference").value = row.reference || ""; $("#target").value = "";
  }

  async function save() {
    try {
      const html = await api("/api/view.html", { title: `seq2seq attention: ${$("#source").value.trim()}`,
        source: $("#source").value, models: state.models,
        results: state.models.map((m) => state.results[m.id]).filter(Boolean) });
      const link = el("a", { href: URL.createObjectURL(new Blob([html], { type: "text/html" })), download: "attention.html" });
      document.body.append(link); link.click(); link.remove();
    } catch (err) { say(err.message); }
  }

  async function start() {
    if (snapshot) {
      state.models = snapshot.models;
      snapshot.results.forEach((r) => { state.results[r.model] = r; });
      document.body.prepend(el("h1", {}, snapshot.title), el("p", { class: "hint" }, snapshot.source));
      $("#app").append(el("section", { id: "columns" }));
      render();
      return;
    }
    $("#translate").addEventListener("click", translateAll);
    $("#source").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); translateAll(); } });
    $("#split").addEventListener("change", pickSplit);
    $("#example").addEventListener("change", pickExample);
    $("#pieces").addEventListener("change", render);
    $("#save").addEventListener("click", save);
    try {
      state.models = await api("/api/models");
      $("#beam").value = 1;
      render();
    } catch (err) { say(err.message); }
  }

  start();
})();
