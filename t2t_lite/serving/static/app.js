// The Insights page: plain JavaScript, no build step, nothing fetched but this server's API.
"use strict";

const $ = (id) => document.getElementById(id);
let attentionAvailable = false;
let lastAttention = [];

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function loadModel() {
  try {
    const response = await fetch("/v1/models");
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    const model = data.models[0];
    attentionAvailable = model.attention;
    const parts = [model.engine];
    for (const key of ["problem", "hparams_set", "step", "saved_model", "model_dir"]) {
      if (model[key] !== undefined && model[key] !== null) parts.push(`${key} ${model[key]}`);
    }
    const hp = model.decode_hparams || {};
    parts.push(`beam ${hp.beam_size}, alpha ${hp.alpha}`);
    $("model").textContent = parts.join(" · ");
    if ($("beam_size").value === "") $("beam_size").value = hp.beam_size;
    if ($("alpha").value === "") $("alpha").value = hp.alpha;
  } catch (error) {
    $("model").textContent = `Model not ready: ${error.message} (reload the page in a moment)`;
  }
}

function numberOption(id, parse) {
  const text = $(id).value.trim();
  return text === "" ? undefined : parse(text);
}

async function translate() {
  const lines = $("source").value.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  const request = { inputs: lines };
  const beam = numberOption("beam_size", (t) => Number(t));
  const alpha = numberOption("alpha", (t) => Number(t));
  const nBest = numberOption("n_best", (t) => Number(t));
  if (beam !== undefined) request.beam_size = beam;
  if (alpha !== undefined) request.alpha = alpha;
  if (nBest !== undefined) request.n_best = nBest;
  if (attentionAvailable) request.return_attention = true;
  showError("");
  $("translate").disabled = true;
  $("status").textContent = "Translating…";
  const started = performance.now();
  try {
    const response = await fetch("/v1/translate", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request),
    });
    let data;
    try { data = await response.json(); } catch (e) { data = { error: response.statusText }; }
    if (!response.ok) {
      showError(`Error ${response.status}: ${data.error || response.statusText}`);
      $("status").textContent = "";
      return;
    }
    showResults(lines, data);
    $("status").textContent = `${lines.length} sentence(s) in ` +
      `${((performance.now() - started) / 1000).toFixed(2)} s`;
  } catch (error) {
    showError(`The server did not answer: ${error.message}`);
    $("status").textContent = "";
  } finally {
    $("translate").disabled = false;
  }
}

function showResults(lines, data) {
  const list = $("translations");
  list.replaceChildren();
  data.outputs.forEach((output, i) => {
    const item = document.createElement("li");
    const source = document.createElement("div");
    source.className = "source";
    source.textContent = lines[i];
    const line = document.createElement("div");
    const text = document.createElement("span");
    text.className = "output";
    text.id = `output-${i}`;
    text.textContent = output;
    const score = document.createElement("span");
    score.className = "score";
    score.textContent = `score ${data.scores[i].toFixed(4)}`;
    line.append(text, score);
    item.append(source, line);
    // The n-best list under its best line: the other candidates only (the first one is the
    // translation just shown), numbered from 2.
    const others = data.n_best ? data.n_best[i].filter((hyp, k) => !(k === 0 && hyp.output === output)) : [];
    if (others.length) {
      const caption = document.createElement("div");
      caption.className = "nbest-caption";
      caption.textContent = "other candidates";
      const nbest = document.createElement("ol");
      nbest.className = "nbest";
      nbest.id = `nbest-${i}`;
      nbest.start = data.n_best[i].length - others.length + 1;
      for (const hyp of others) {
        const entry = document.createElement("li");
        entry.textContent = `${hyp.output} `;
        const s = document.createElement("span");
        s.className = "score";
        s.textContent = hyp.score.toFixed(4);
        entry.append(s);
        nbest.append(entry);
      }
      item.append(caption, nbest);
    }
    list.append(item);
  });
  $("results").hidden = false;
  lastAttention = data.attention || [];
  $("attention").hidden = lastAttention.length === 0;
  if (lastAttention.length) {
    fillSelect($("sentence"), lastAttention.length, (i) => `${i + 1}: ${lines[i].slice(0, 40)}`);
    selectSentence();
  }
}

function fillSelect(select, count, label) {
  const keep = Math.min(Number(select.value) || 0, count - 1);
  select.replaceChildren();
  for (let i = 0; i < count; i++) {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = label(i);
    select.append(option);
  }
  select.value = String(Math.max(keep, 0));
}

function selectSentence() {
  const att = lastAttention[Number($("sentence").value)];
  fillSelect($("layer"), att.weights.length, (i) => String(i));
  fillSelect($("head"), att.weights[0].length, (i) => String(i));
  drawHeatmap();
}

const JOINER = "\u00b7";  // "Ver·", "·stand": two pieces of one word

// A vocabulary's reserved names ("<EOS>", a subword vocabulary's "<EOS>_", "</s>", "<pad>").
function reservedName(piece) {
  const match = /^(<\/?[A-Za-z]+>)_?$/.exec(piece);
  return match ? match[1] : null;
}

// t2t's subword escapes: "\u" is "_", "\\" is "\", "\123;" is the character 123.
function unescapeSubword(text) {
  return text.replace(/\\(u|\\|[0-9]+;)/g, (all, code) =>
    code === "u" ? "_" : code === "\\" ? "\\" : String.fromCodePoint(parseInt(code, 10)));
}

// The pieces as the words they form: t2t's subwords ("That_" ends a word, "Ver" goes on),
// SentencePiece's ("▁The" starts one) and one-piece words (t2t's numeric tokens) alike.
// Returns {labels, wordStarts}: the label of each piece ("Ver·", "·stand", "That"; reserved
// names as they are) and whether a new word starts at it.
function readablePieces(pieces) {
  const texts = pieces.filter((p) => reservedName(p) === null);
  const subword = texts.length > 0 && texts[texts.length - 1].endsWith("_");
  const sentencepiece = !subword && texts.some((p) => p.startsWith("\u2581"));
  const labels = [];
  const word = [];  // the word of each piece (null: reserved)
  let current = -1;
  let open = false;  // the previous piece's word goes on
  pieces.forEach((piece) => {
    const name = reservedName(piece);
    if (name !== null) {
      labels.push(name);
      word.push(null);
      open = false;
      return;
    }
    let text = piece;
    if (subword) {
      const ends = text.endsWith("_");
      text = unescapeSubword(ends ? text.slice(0, -1) : text);
      if (!open) current++;
      open = !ends;
    } else if (sentencepiece) {
      const starts = text.startsWith("\u2581");
      text = starts ? text.slice(1) : text;
      if (starts || current < 0 || word[word.length - 1] === null) current++;
    } else {
      current++;
    }
    labels.push(text.trim() === "" ? "\u2423" : text.trim());
    word.push(current);
  });
  const wordStarts = word.map((w, k) => k === 0 || w === null || w !== word[k - 1]);
  return {
    labels: labels.map((label, k) => {
      if (word[k] === null) return label;
      const before = k > 0 && word[k - 1] === word[k] ? JOINER : "";
      const after = k + 1 < word.length && word[k + 1] === word[k] ? JOINER : "";
      return before + label + after;
    }),
    wordStarts,
  };
}

// Shade of a weight: square root, so that weights spread over many pieces stay visible.
function shade(w) {
  return Math.round(255 * (1 - Math.sqrt(Math.min(Math.max(w, 0), 1))));
}

const LEGEND_TICKS = [0, 0.05, 0.2, 0.5, 1];

function drawHeatmap() {
  const att = lastAttention[Number($("sentence").value)];
  if (!att) return;
  const matrix = att.weights[Number($("layer").value)][Number($("head").value)];
  const source = readablePieces(att.source_pieces);
  const target = readablePieces(att.target_pieces);
  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  const columns = source.labels.length;
  const rows = target.labels.length;
  // Cells fit the page's width down to 14 px (then the box scrolls), up to 26 px.
  const available = canvas.parentElement.clientWidth || 800;
  let cell = 26;
  let font = "12px sans-serif";
  ctx.font = font;
  const width = (labels) => Math.max(0, ...labels.map((l) => ctx.measureText(l).width));
  const legendWidth = 110;
  const left = Math.ceil(width(target.labels)) + 12;
  cell = Math.max(14, Math.min(26, Math.floor((available - left - legendWidth) / columns)));
  if (cell < 18) font = "11px sans-serif";
  ctx.font = font;
  const top = Math.ceil(width(source.labels)) + 12;
  canvas.width = left + cell * columns + legendWidth;
  canvas.height = Math.max(top + cell * rows + 10, top + 190);
  ctx.font = font;  // resizing the canvas resets its state
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  matrix.forEach((row, t) => {
    row.forEach((w, s) => {
      const v = shade(w);
      ctx.fillStyle = `rgb(${v}, ${v}, 255)`;
      ctx.fillRect(left + s * cell, top + t * cell, cell - 1, cell - 1);
    });
  });
  // Lines between words.
  ctx.strokeStyle = "#c1c7d0";
  ctx.lineWidth = 1;
  source.wordStarts.forEach((starts, s) => {
    if (!starts || s === 0) return;
    ctx.beginPath();
    ctx.moveTo(left + s * cell - 0.5, top);
    ctx.lineTo(left + s * cell - 0.5, top + rows * cell);
    ctx.stroke();
  });
  target.wordStarts.forEach((starts, t) => {
    if (!starts || t === 0) return;
    ctx.beginPath();
    ctx.moveTo(left, top + t * cell - 0.5);
    ctx.lineTo(left + columns * cell, top + t * cell - 0.5);
    ctx.stroke();
  });
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  target.labels.forEach((label, t) => ctx.fillText(label, left - 6, top + t * cell + cell / 2));
  source.labels.forEach((label, s) => {
    ctx.save();
    ctx.translate(left + s * cell + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(label, 0, 0);
    ctx.restore();
  });
  drawLegend(ctx, left + columns * cell + 24, top, 160);
  canvas.dataset.drawn = `${rows}x${columns}`;
}

// The colour legend beside the heatmap: weight 1 at the top, 0 at the bottom, ticks placed
// by the same square root as the cells' shades.
function drawLegend(ctx, x, y, height) {
  const bar = 14;
  for (let i = 0; i < height; i++) {
    const w = Math.pow(1 - i / (height - 1), 2);  // the weight whose shade is drawn here
    const v = shade(w);
    ctx.fillStyle = `rgb(${v}, ${v}, 255)`;
    ctx.fillRect(x, y + i, bar, 1);
  }
  ctx.strokeStyle = "#5e6c84";
  ctx.strokeRect(x - 0.5, y - 0.5, bar + 1, height + 1);
  ctx.fillStyle = "#1d2330";
  ctx.font = "11px sans-serif";
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  for (const w of LEGEND_TICKS) {
    const ty = y + (1 - Math.sqrt(w)) * (height - 1);
    ctx.fillRect(x + bar, ty, 3, 1);
    ctx.fillText(String(w), x + bar + 6, ty);
  }
  ctx.save();
  ctx.translate(x + bar + 52, y + height / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = "center";
  ctx.fillText("attention weight", 0, 0);
  ctx.restore();
  ctx.canvas.dataset.legend = `${x},${y},${bar},${height}`;
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
$("sentence").addEventListener("change", selectSentence);
$("layer").addEventListener("change", drawHeatmap);
$("head").addEventListener("change", drawHeatmap);
loadModel();
