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
    if (data.n_best) {
      const nbest = document.createElement("ol");
      nbest.className = "nbest";
      for (const hyp of data.n_best[i]) {
        const entry = document.createElement("li");
        entry.textContent = `${hyp.output} `;
        const s = document.createElement("span");
        s.className = "score";
        s.textContent = hyp.score.toFixed(4);
        entry.append(s);
        nbest.append(entry);
      }
      item.append(nbest);
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

function drawHeatmap() {
  const att = lastAttention[Number($("sentence").value)];
  if (!att) return;
  const matrix = att.weights[Number($("layer").value)][Number($("head").value)];
  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  const cell = 26;
  ctx.font = "12px monospace";
  const width = (labels) => Math.max(0, ...labels.map((l) => ctx.measureText(l).width));
  const left = width(att.target_pieces) + 12;
  const top = width(att.source_pieces) + 12;
  canvas.width = left + cell * att.source_pieces.length + 10;
  canvas.height = top + cell * att.target_pieces.length + 10;
  ctx.font = "12px monospace";
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  matrix.forEach((row, t) => {
    row.forEach((w, s) => {
      // Square root: weights spread over many pieces stay visible.
      const shade = Math.round(255 * (1 - Math.sqrt(Math.min(Math.max(w, 0), 1))));
      ctx.fillStyle = `rgb(${shade}, ${shade}, 255)`;
      ctx.fillRect(left + s * cell, top + t * cell, cell - 1, cell - 1);
    });
  });
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  att.target_pieces.forEach((piece, t) => ctx.fillText(piece, left - 6, top + t * cell + cell / 2));
  att.source_pieces.forEach((piece, s) => {
    ctx.save();
    ctx.translate(left + s * cell + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(piece, 0, 0);
    ctx.restore();
  });
  canvas.dataset.drawn = `${att.target_pieces.length}x${att.source_pieces.length}`;
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) translate();
});
$("sentence").addEventListener("change", selectSentence);
$("layer").addEventListener("change", drawHeatmap);
$("head").addEventListener("change", drawHeatmap);
loadModel();
