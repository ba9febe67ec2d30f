// The book's translator, German -> English and English -> German: the two trained Multi30k models,
// run in the reader's browser by onnxruntime-web (single-threaded WebAssembly) and tokenized by the
// @huggingface/tokenizers library from the same tokenizer.json as Python. Nothing loads until the
// reader asks for a translation, and then only the model of the direction chosen (model/de-en/ or
// model/en-de/). Greedy and beam search follow annotated/decoding/greedy.py and beam.py step for step.

const HERE = new URL("./", import.meta.url);
const $ = (id) => document.getElementById(id);
const LANGUAGES = { de: "German", en: "English" }; // the page's labels before a model (translator.json) is loaded

let runtime = null; // the promise of onnxruntime-web and the tokenizer library, made on the first click
const models = new Map(); // direction -> the promise of its loaded model, made on its first translation
const tokenizers = new Map(); // tokenizer.json's SHA-256 -> the promise of its Tokenizer (both models share one)
let busy = false;

function forgetOnFailure(map, key, promise) {
  map.set(key, promise);
  promise.catch(() => map.delete(key)); // a failed load may be retried
  return promise;
}

function libraries() {
  runtime ??= (async () => {
    const ort = await import(new URL("ort.wasm.min.mjs", HERE).href);
    ort.env.wasm.numThreads = 1; // no SharedArrayBuffer needed: works on any static host
    ort.env.wasm.wasmPaths = HERE.href;
    const { Tokenizer } = await import(new URL("tokenizers.min.mjs", HERE).href);
    return { ort, Tokenizer };
  })();
  runtime.catch(() => (runtime = null));
  return runtime;
}

function load(direction) {
  // The model that translates `direction` ("de-en" or "en-de"), fetched from model/DIRECTION/ once
  if (models.has(direction)) return models.get(direction);
  const loading = (async () => {
    const { ort, Tokenizer } = await libraries();
    const folder = new URL(`model/${direction}/`, HERE);
    const bytes = async (name) => {
      const response = await fetch(new URL(name, folder));
      if (!response.ok) throw new Error(`could not load ${direction}/${name} (HTTP ${response.status})`);
      return new Uint8Array(await response.arrayBuffer());
    };
    const config = JSON.parse(new TextDecoder().decode(await bytes("translator.json")));
    if (config.direction !== direction) throw new Error(`model/${direction}/ holds a ${config.direction} model`);
    // every other file, checked against the SHA-256 that translator.json records for it: an export
    // stopped between two of its renames would leave files of two exports side by side
    const checked = async (name, expected) => {
      const data = await bytes(name);
      const found = expected && (await sha256(data)); // null: nothing recorded, or no crypto.subtle
      if (found && found !== expected) {
        throw new Error(`model/${direction}/${name} does not belong to the export that translator.json describes; export the model again`);
      }
      return data;
    };
    const sha = config.tokenizer_sha256;
    const readTokenizer = async () => JSON.parse(new TextDecoder().decode(await checked("tokenizer.json", sha)));
    const tokenizer = tokenizers.get(sha) ?? forgetOnFailure(tokenizers, sha, readTokenizer().then((j) => new Tokenizer(j, {})));
    const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
    const session = async (name) => ort.InferenceSession.create(await checked(name, config.sha256?.[name]), options);
    const parts = await Promise.all([tokenizer, session(config.files.encoder), session(config.files.decoder_step)]);
    return { ort, config, tokenizer: parts[0], encoder: parts[1], step: parts[2] };
  })();
  return forgetOnFailure(models, direction, loading);
}

async function sha256(data) {
  // The SHA-256 of `data` in hex, as Python's hashlib writes it. crypto.subtle exists only on a secure
  // page (https, or a server on this machine); elsewhere nothing can be checked and nothing is.
  if (!globalThis.crypto?.subtle) return null;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Let the browser handle input between decoding steps. A message, unlike setTimeout(0), is not
// clamped to 4 ms when it repeats.
function nextFrame() {
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = resolve;
    channel.port2.postMessage(null);
  });
}

// ---- the model's two ONNX graphs ------------------------------------------------------------

function ids(ort, rows) {
  // rows: equal-length arrays of token ids -> an int64 tensor (rows, length)
  const flat = BigInt64Array.from(rows.flat(), (t) => BigInt(t));
  return new ort.Tensor("int64", flat, [rows.length, rows[0].length]);
}

async function encode(m, src, beams) {
  // Encoder-decoder attention keys and values of every decoder layer, copied for each beam: (N, n_beam, H, S, Dk)
  const out = await m.encoder.run({ src: ids(m.ort, [src]) });
  return { cross_k: repeatBatch(m.ort, out.cross_k, beams), cross_v: repeatBatch(m.ort, out.cross_v, beams) };
}

function repeatBatch(ort, tensor, times) {
  const [N, B, ...rest] = tensor.dims; // B = 1
  const block = rest.reduce((a, b) => a * b, 1);
  const data = new Float32Array(N * times * block);
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < times; k++) data.set(tensor.data.subarray(n * block, (n + 1) * block), (n * times + k) * block);
  }
  return new ort.Tensor("float32", data, [N, B * times, ...rest]);
}

function emptyCache(m, beams) {
  const { n_layers: N, n_heads: H, d_model: D } = m.config;
  const empty = () => new m.ort.Tensor("float32", new Float32Array(0), [N, beams, H, 0, D / H]);
  return { self_k: empty(), self_v: empty() };
}

async function step(m, memory, cache, tokens) {
  // One decoder step for every beam: logits (n_beam, n_vocab), the grown cache, encoder-decoder attention (N, n_beam, H, S)
  const out = await m.step.run({ token: ids(m.ort, tokens.map((t) => [t])), ...memory, ...cache });
  return { logits: out.logits, cache: { self_k: out.new_self_k, self_v: out.new_self_v }, weights: out.cross_weights };
}

function reorderCache(m, cache, rows) {
  // Keep the cached keys and values of beams `rows`, in that order (decoding.reorder_cache)
  const pick = (tensor) => {
    const [N, K, ...rest] = tensor.dims;
    const block = rest.reduce((a, b) => a * b, 1);
    const data = new Float32Array(tensor.data.length);
    for (let n = 0; n < N; n++) {
      rows.forEach((r, k) => data.set(tensor.data.subarray((n * K + r) * block, (n * K + r + 1) * block), (n * K + k) * block));
    }
    return new m.ort.Tensor("float32", data, tensor.dims);
  };
  return { self_k: pick(cache.self_k), self_v: pick(cache.self_v) };
}

// ---- decoding (annotated/decoding/) -----------------------------------------------------

function argmaxNoPad(row, pad) {
  let best = -1;
  for (let v = 0; v < row.length; v++) {
    if (v !== pad && (best < 0 || row[v] > row[best])) best = v; // first maximum, like torch.argmax
  }
  return best;
}

async function greedy(m, src, limit) {
  // The most probable token at every step until EOS or `limit` tokens; keeps each step's attention
  const { bos_id: BOS, eos_id: EOS, pad_id: PAD } = m.config.special_ids;
  const memory = await encode(m, src, 1);
  let cache = emptyCache(m, 1);
  const tokens = [], attention = [];
  let last = BOS;
  for (let n = 0; n < limit; n++) {
    const out = await step(m, memory, cache, [last]);
    last = argmaxNoPad(out.logits.data, PAD);
    tokens.push(last);
    attention.push(out.weights.data.slice());
    cache = out.cache;
    if (last === EOS) break;
    await nextFrame();
  }
  return { tokens, attention };
}

const lengthPenalty = (n, alpha) => ((5 + n) / 6) ** alpha; // §6.1, Wu et al.

function logSoftmax(row) {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const log = max + Math.log(sum);
  return Float64Array.from(row, (x) => x - log);
}

function topIndices(values, count) {
  // Indices of the `count` largest values, largest first
  const order = [];
  for (let i = 0; i < values.length; i++) {
    if (order.length < count || values[i] > values[order[order.length - 1]]) {
      let j = order.length < count ? order.length : order.length - 1;
      order[j] = i;
      while (j > 0 && values[order[j]] > values[order[j - 1]]) {
        [order[j], order[j - 1]] = [order[j - 1], order[j]];
        j--;
      }
    }
  }
  return order;
}

async function beamSearch(m, src, limit, K, alpha) {
  // Keep the K best prefixes; return the best finished one (decoding.beam_search for one sentence)
  const { bos_id: BOS, eos_id: EOS, pad_id: PAD } = m.config.special_ids;
  const V = m.config.vocab_size;
  const memory = await encode(m, src, K);
  let cache = emptyCache(m, K);
  let beams = Array.from({ length: K }, () => [BOS]);
  let logP = Array.from({ length: K }, (_, k) => (k === 0 ? 0 : -Infinity)); // K copies of one prefix
  let best = { score: -Infinity, tokens: null };
  for (let n = 1; n <= limit; n++) {
    const out = await step(m, memory, cache, beams.map((b) => b[b.length - 1]));
    const cand = new Float64Array(K * V);
    for (let k = 0; k < K; k++) {
      const logProbs = logSoftmax(out.logits.data.subarray(k * V, (k + 1) * V));
      logProbs[PAD] = -Infinity;
      for (let v = 0; v < V; v++) cand[k * V + v] = logP[k] + logProbs[v];
    }
    const top = topIndices(cand, 2 * K).map((i) => ({ lp: cand[i], row: Math.floor(i / V), token: i % V }));
    const ends = (c) => c.token === EOS || n >= limit;
    top.slice(0, K).forEach((c) => {
      const score = c.lp / lengthPenalty(n, alpha);
      if (ends(c) && score > best.score) best = { score, tokens: [...beams[c.row], c.token] };
    });
    const live = top.map((c) => (c.token === EOS ? -Infinity : c.lp));
    const keep = topIndices(live, K);
    beams = keep.map((j) => [...beams[top[j].row], top[j].token]);
    logP = keep.map((j) => live[j]);
    cache = reorderCache(m, out.cache, keep.map((j) => top[j].row));
    if (best.score >= logP[0] / lengthPenalty(n, alpha) || n >= limit) break;
    await nextFrame();
  }
  const tokens = best.tokens.slice(1);
  return { tokens, attention: await attentionOf(m, src, tokens) };
}

async function attentionOf(m, src, tokens) {
  // Feed the chosen output back one token at a time to read its encoder-decoder attention
  const memory = await encode(m, src, 1);
  let cache = emptyCache(m, 1);
  const attention = [];
  let last = m.config.special_ids.bos_id;
  for (const token of tokens) {
    const out = await step(m, memory, cache, [last]);
    attention.push(out.weights.data.slice());
    cache = out.cache;
    last = token;
  }
  return attention;
}

// ---- the page ---------------------------------------------------------------------------------

function report(state, text, note = "") {
  // state: running | done | error. The attention map belongs to a finished translation only.
  const output = $("translator-output");
  output.textContent = text;
  output.dataset.state = state;
  if (state !== "done") $("translator-map").hidden = true;
  $("translator-note").textContent = note;
  $("translator-note").hidden = !note;
}

function repeats(tokens, times = 3) {
  // True when some run of 1 to 4 tokens comes `times` times in a row ("dog dog dog", "a b a b a b")
  for (let n = 1; n <= 4; n++) {
    for (let start = 0; start + n * times <= tokens.length; start++) {
      let same = true;
      for (let k = n; k < n * times && same; k++) same = tokens[start + k] === tokens[start + (k % n)];
      if (same) return true;
    }
  }
  return false;
}

function sentencesIn(text) {
  // Sentence ends followed by more text: "Ein Hund rennt. Eine Katze schläft." holds two
  return 1 + (text.trim().match(/[.!?…]+["»«”)]*\s+(?=\S)/g) || []).length;
}

function notesOn(text, tokens, finished) {
  // Warnings a reader needs to read the output right; "" when there are none
  const notes = [];
  if (!finished) notes.push(`The model did not end the sentence within ${tokens.length} subwords, so the output was cut there.`);
  if (repeats(tokens)) notes.push("It repeats itself: a sign the input is unlike the image captions it learned from.");
  if (sentencesIn(text) > 1) notes.push("It was trained on single sentences and often translates only the first of several: translate one sentence at a time.");
  return notes.join(" ");
}

// ---- the direction ----------------------------------------------------------------------------

const chosenDirection = () => document.querySelector('input[name="translator-direction"]:checked').value;
const namesOf = (direction) => direction.split("-").map((code) => LANGUAGES[code]); // [source, target]
const withArticle = (language) => `${/^[AEIOU]/.test(language) ? "an" : "a"} ${language}`;

function showLanguages(direction, [source, target]) {
  // Label the input, the output and the map's explanation with the languages of `direction`
  document.querySelectorAll('[data-language="source"]').forEach((node) => (node.textContent = source));
  document.querySelectorAll('[data-language="target"]').forEach((node) => (node.textContent = target));
  [$("translator-input").lang, $("translator-output").lang] = direction.split("-");
}

function chooseDirection() {
  // Labels, examples and the default sentence of the chosen direction; the last translation goes
  const direction = chosenDirection();
  showLanguages(direction, namesOf(direction));
  const lists = [...document.querySelectorAll(".translator-examples")];
  const ours = lists.flatMap((list) => [list.dataset.default, ...[...list.querySelectorAll("button")].map((b) => b.textContent)]);
  lists.forEach((list) => (list.hidden = list.dataset.direction !== direction));
  const input = $("translator-input");
  if (!input.value.trim() || ours.includes(input.value)) {
    // the page's own sentence is replaced; the reader's own text stays
    input.value = lists.find((list) => list.dataset.direction === direction).dataset.default;
  }
  shown = null;
  report("idle", "");
  $("translator-status").textContent = "";
}

async function translate() {
  if (busy) return;
  busy = true;
  const button = $("translator-run"), status = $("translator-status");
  const radios = document.querySelectorAll('input[name="translator-direction"]');
  button.disabled = true;
  radios.forEach((radio) => (radio.disabled = true)); // the result belongs to the direction it started in
  status.textContent = "";
  try {
    const direction = chosenDirection();
    const text = $("translator-input").value;
    if (!text.trim()) {
      report("error", `Type ${withArticle(namesOf(direction)[0])} sentence first.`);
      return;
    }
    report("running", "");
    const started = performance.now();
    if (!models.has(direction)) {
      const size = runtime ? "about 17 MB" : "about 30 MB with its runtime";
      status.textContent = `Loading the ${namesOf(direction).join(" → ")} model (${size}, once)…`;
    }
    const m = await load(direction);
    const loaded = performance.now();
    const [source, target] = m.config.languages;
    showLanguages(direction, [source, target]);
    const encoding = m.tokenizer.encode(text, { add_special_tokens: false });
    const src = encoding.ids;
    const max = m.config.max_source_tokens;
    if (src.length === 0) {
      report("error", "Nothing to translate: the input holds no characters the model knows.");
      return;
    }
    if (src.length > max) {
      report(
        "error",
        `That is ${src.length} subwords; the model was trained on single sentences and reads at most ${max}. ` +
          "Translate a sentence or two at a time."
      );
      return;
    }
    const beam = document.querySelector('input[name="translator-search"]:checked').value === "beam";
    status.textContent = beam ? "Translating (beam search, 4 beams)…" : "Translating (greedy)…";
    const limit = src.length + m.config.extra_target_tokens;
    const result = beam
      ? await beamSearch(m, src, limit, m.config.beam_size, m.config.alpha)
      : await greedy(m, src, limit);
    const { eos_id: EOS } = m.config.special_ids;
    const output = result.tokens.filter((t) => t !== EOS);
    const translation = m.tokenizer.decode(output, { skip_special_tokens: true });
    const finished = result.tokens[result.tokens.length - 1] === EOS;
    const unknown = src.filter((t) => t === m.config.special_ids.unk_id).length;
    const took = performance.now() - loaded;
    status.textContent =
      (started !== loaded && loaded - started > 50 ? `Model loaded in ${((loaded - started) / 1000).toFixed(1)} s. ` : "") +
      `Translated in ${took.toFixed(0)} ms.` +
      (unknown * 2 > src.length ? ` Most of the input is outside the model's vocabulary (${source} image captions).` : "");
    report("done", translation, notesOn(text, output, finished));
    $("translator-output").dataset.ms = took.toFixed(1);
    const targets = result.tokens.map((t) => m.tokenizer.id_to_token(t));
    showAttention(m, encoding.tokens, targets, result.attention, [source, target]);
  } catch (error) {
    report("error", `The translator failed: ${error.message}`);
    status.textContent = "";
    console.warn(error);
  } finally {
    busy = false;
    button.disabled = false;
    radios.forEach((radio) => (radio.disabled = false));
  }
}

// ---- the encoder-decoder attention map -------------------------------------------------------

let shown = null; // what the map draws: { sources, targets, attention, N, H, S, eos, languages }

function showAttention(m, sources, targets, attention, languages) {
  const { n_layers: N, n_heads: H } = m.config;
  const eos = m.tokenizer.id_to_token(m.config.special_ids.eos_id);
  shown = { sources, targets, attention, N, H, S: sources.length, eos, languages };
  const layer = $("translator-layer"), head = $("translator-head");
  if (layer.options.length !== N || head.options.length !== H + 1) { // the other direction's model may differ
    layer.replaceChildren(...Array.from({ length: N }, (_, i) => new Option(`layer ${i + 1}`, i)));
    layer.value = N - 1;
    head.replaceChildren(new Option("mean of the heads", -1), ...Array.from({ length: H }, (_, h) => new Option(`head ${h + 1}`, h)));
  }
  $("translator-map").hidden = false;
  drawAttention();
}

function weightsOf(row, layer, head, H, S) {
  // row: one target token's encoder-decoder attention, (N, 1, H, S) flattened -> (S,) for one head or the mean
  const heads = head < 0 ? [...Array(H).keys()] : [head];
  return Array.from({ length: S }, (_, s) => heads.reduce((sum, h) => sum + row[(layer * H + h) * S + s], 0) / heads.length);
}

function label(token, eos) {
  // A subword as a reader writes it: "▁Hund" -> "Hund" (starts a word), "e" -> "-e" (continues one)
  if (token === eos) return "⟨end⟩";
  if (token.startsWith("▁")) return token.slice(1) || "␣";
  return /^[\p{L}\p{N}]/u.test(token) ? `-${token}` : token;
}

function drawAttention() {
  if (!shown) return;
  const { sources: rawSources, targets: rawTargets, attention, H, S, eos, languages: [source, target] } = shown;
  const sources = rawSources.map((t) => label(t, eos)), targets = rawTargets.map((t) => label(t, eos));
  const layer = Number($("translator-layer").value), head = Number($("translator-head").value);
  const cell = 22, left = 90, top = 90;
  const svgNS = "http://www.w3.org/2000/svg";
  const el = (name, attrs, text) => {
    const node = document.createElementNS(svgNS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const svg = el("svg", { width: left + cell * S + 10, height: top + cell * targets.length + 10, role: "img" });
  svg.append(el("title", {}, `Encoder-decoder attention: each row is ${withArticle(target)} subword, each column ${withArticle(source)} subword`));
  sources.forEach((token, s) => {
    const x = left + s * cell + cell / 2;
    svg.append(el("text", { x, y: top - 6, transform: `rotate(-60 ${x} ${top - 6})`, class: "translator-label" }, token));
  });
  targets.forEach((token, t) => {
    svg.append(el("text", { x: left - 6, y: top + t * cell + cell * 0.7, "text-anchor": "end", class: "translator-label" }, token));
    weightsOf(attention[t], layer, head, H, S).forEach((w, s) => {
      const rect = el("rect", { x: left + s * cell, y: top + t * cell, width: cell - 1, height: cell - 1, fill: `rgba(31, 119, 180, ${w.toFixed(3)})` });
      rect.append(el("title", {}, `${token} → ${sources[s]}: ${w.toFixed(3)}`));
      svg.append(rect);
    });
  });
  $("translator-svg").replaceChildren(svg);
}

$("translator-run").addEventListener("click", translate);
$("translator-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    translate();
  }
});
document.querySelectorAll(".translator-example").forEach((example) =>
  example.addEventListener("click", () => {
    $("translator-input").value = example.textContent;
    translate();
  })
);
document.querySelectorAll('input[name="translator-direction"]').forEach((radio) => radio.addEventListener("change", chooseDirection));
chooseDirection(); // labels and examples of the checked direction (a reload may keep the reader's choice)
$("translator-layer").addEventListener("change", drawAttention);
$("translator-head").addEventListener("change", drawAttention);
$("translator-run").disabled = false; // the script is here: the button works
