/* The story language model of chapter 12, running in the page: type a sentence, see its heads.
 *
 * The model is as mha_lib.lm_export.export() writes it ("mha_lib.lm/1": config, tokenizer, weights as
 * base64 little-endian float32, PyTorch's (out, in) layout). mha_lib.viz.text_explorer.text_explorer_html
 * puts it in a <script type="application/json"> next to the explorer's markup; on the website
 * the build (mha_lib.book.sphinx_ext.split_models) moves it to a file of its own,
 * _static/mha-lm-models/<key>.js, which sets window.mhaLMModels[<key>], and gives the explorer's
 * root data-model-src (the file's address) and data-model-key. The page then shows the
 * explorer's controls at once and loads the model with a <script src> (nothing is fetched: the
 * page works offline and from file://) when the explorer comes within LOAD_MARGIN of the
 * viewport or the reader focuses, presses or types anything in it, whichever comes first; a
 * status line (role="status") says it loads, then the explorer draws. A reader who never
 * reaches the explorer never pays for its model. window.mhaLM.loadAll() loads every explorer's
 * model now (the PDF printer, mha_lib.book.pdf, calls it). plotly.js and mha-figures.js are
 * loaded before this script.
 *
 * The forward pass is mha_lib.lm.StoryLM's (see that module's docstring), one position at a
 * time with a key/value cache, in double precision from the float32 weights:
 *   x = E[id];  per block: h = LN1(x); q, k, v = W_q h + b_q, W_k h + b_k, W_v h + b_v;
 *   rotary on q and k (pairs (2i, 2i+1), angle p * base^(-2i/d)); query head h reads the
 *   key/value head h / (H / Hkv); causal softmax(q k / sqrt(d)); x += W_o concat + b_o;
 *   x += W_2 relu(W_1 LN2(x) + b_1) + b_2;  logits = W_out LN(x) + b_out.
 * A hybrid (config.layers, as mha_lib.viz.text_explorer exports it: "gated_deltanet" or
 * "softmax" per layer) has Gated DeltaNet layers (mha_lib.linear.GatedDeltaNet, its recurrent
 * form) in place of attention in some blocks: q, k, v as above without rotary; per head q and
 * k divided by their length (at least 1e-12), beta = sigmoid(W_beta h + b_beta), alpha =
 * sigmoid(W_alpha h + b_alpha); the state S (d x d, zeros at first) becomes alpha S, then
 * S + k^T beta (v - k S); the head's output is q S; x += W_o concat + b_o. Such a layer has no
 * attention weights: the page shows the softmax layers only.
 * Greedy continuation: up to settings.continuation_tokens tokens, up to the first "." (as
 * mha_lib.viz.text_explorer does with StoryLM.generate). For tests: the root element carries
 * .mhaLM = {model, state, shown()} and data-rendered (bumped at each drawing); shown() gives the
 * layer on screen and its heads' weights, and layout image h of the figure is head h's picture.
 */
(function () {
  "use strict";
  var PUNCTUATION = {".": true, ",": true, "'s": true, "!": true, "?": true};  // as mha_lib.stories.detokenize
  var SENTENCE_END = {".": true, "!": true, "?": true};
  var MAX_HINT_ROWS = 3;  // rows of suggestions at most, as mha_lib.viz.text_explorer
  var MASKED_COLOR = "#c8c8c8";  // as mha_lib.viz.heatmaps.MASKED_COLOR: future keys
  var PLOT_CONFIG = {responsive: true, displaylogo: false, displayModeBar: false};
  var CSS = [
    ".mha-lm{margin:0.5rem 0 1rem}.mha-lm label,.mha-lm legend{font-weight:600}",
    ".mha-lm-row{display:flex;flex-wrap:wrap;gap:0.5rem;align-items:center;margin:0.25rem 0 0.5rem}",
    ".mha-lm input[type=text]{flex:1 1 16rem;min-width:0;min-height:2.75rem;font-size:1rem;",
    "padding:0.4rem 0.6rem;border:1px solid var(--pst-color-border,#8a8a8a);border-radius:0.25rem;",
    "background:var(--pst-color-background,#fff);color:var(--pst-color-text-base,#222)}",
    ".mha-lm button{min-height:2.75rem;min-width:2.75rem;font-size:0.95rem;padding:0.3rem 0.75rem;",
    "border:1px solid var(--pst-color-border,#8a8a8a);border-radius:0.25rem;cursor:pointer;",
    "background:var(--pst-color-surface,#f3f4f5);color:var(--pst-color-text-base,#222)}",
    ".mha-lm button:hover{border-color:var(--pst-color-primary,#1a4f8b)}",
    ".mha-lm button:focus-visible,.mha-lm input:focus-visible,.mha-lm summary:focus-visible{",
    "outline:3px solid var(--pst-color-primary,#1a4f8b);outline-offset:2px}",
    ".mha-lm fieldset{border:0;padding:0;margin:0.25rem 0;display:flex;flex-wrap:wrap;gap:0.25rem 1rem;align-items:center}",
    ".mha-lm fieldset legend{float:left;width:auto;margin:0 0.5rem 0 0;padding:0;font-size:1rem;line-height:inherit}",
    ".mha-lm fieldset legend+*{clear:none}",
    ".mha-lm fieldset label{font-weight:400;display:inline-flex;align-items:center;gap:0.3rem;min-height:2.75rem}",
    ".mha-lm input[type=radio]{width:1.1rem;height:1.1rem;accent-color:#3b528b}",
    "html[data-theme=dark] .mha-lm input[type=radio]{accent-color:#8ab4f8}",
    ".mha-lm-tokens{line-height:2;margin:0.25rem 0}",
    ".mha-lm-tok{display:inline-block;padding:0 0.35rem;margin:0 0.15rem 0.2rem 0;border-radius:0.2rem;",
    "border:1px solid var(--pst-color-border,#bbb);font-family:var(--pst-font-family-monospace,monospace);",
    "font-size:0.9em;line-height:1.6}",
    ".mha-lm-tok.mha-lm-unk{border:2px dashed #b35900;font-style:italic}",
    "html[data-theme=dark] .mha-lm-tok.mha-lm-unk{border-color:#ffb366}",
    ".mha-lm-hint{margin:0.25rem 0 0.5rem}.mha-lm-hint p{margin:0.25rem 0}",
    ".mha-lm-continuation{margin:0.5rem 0;font-size:1.05rem}",
    ".mha-lm-status{margin:0.5rem 0;font-style:italic}.mha-lm-status:empty{display:none}",
    ".mha-lm-continuation strong{border-bottom:2px solid var(--pst-color-primary,#1a4f8b)}",
    ".mha-lm-sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}",
    ".mha-lm details{margin:0.5rem 0}.mha-lm summary{cursor:pointer;min-height:2rem}",
    ".mha-lm-figure{width:100%;max-width:100%}",
    // the form (text box, layer choice) sticks under the page's header while the reader scrolls
    // through the heads (mha-site.js sets --mha-sticky-top to the header's height)
    ".mha-lm-form{position:sticky;top:var(--mha-sticky-top,0px);z-index:3;padding:0.25rem 0;",
    "background:var(--pst-color-background,#fff);border-bottom:1px solid var(--pst-color-border,#ccc)}",
    "@media (max-width:575.98px){.mha-lm-form>label{font-size:0.9rem}.mha-lm-form .mha-lm-row{margin:0.1rem 0 0.25rem}",
    ".mha-lm-form fieldset label{min-height:2.2rem}}"
  ].join("");

  // --- the model -----------------------------------------------------------------------------
  function floats(entry) {  // {shape, data: base64 little-endian float32} -> Float32Array
    var bytes = atob(entry.data), n = bytes.length / 4, out = new Float32Array(n);
    var view = new DataView(new ArrayBuffer(bytes.length));
    for (var i = 0; i < bytes.length; i++) view.setUint8(i, bytes.charCodeAt(i));
    for (var j = 0; j < n; j++) out[j] = view.getFloat32(4 * j, true);
    return out;
  }

  function Model(exported) {
    if (!exported || exported.format !== "mha_lib.lm/1") {
      throw new Error("mha-lm: the page's model is not of format mha_lib.lm/1");
    }
    var cfg = exported.config, w = exported.weights, self = this;
    function get(name) {
      if (!w[name]) throw new Error("mha-lm: the exported model lacks " + name);
      return floats(w[name]);
    }
    this.config = cfg;
    this.D = cfg.d_model; this.H = cfg.num_heads; this.Hkv = cfg.num_kv_heads;
    this.N = cfg.num_layers; this.F = cfg.d_ff; this.V = cfg.vocab_size;
    this.d = this.D / this.H;
    this.eps = cfg.layer_norm_eps; this.base = cfg.rope_base;
    this.embedding = get("token_embedding.weight");
    this.kinds = cfg.layers || [];
    this.blocks = [];
    for (var n = 0; n < this.N; n++) {
      var p = "blocks." + n + ".";
      this.kinds[n] = this.kinds[n] || "softmax";
      if (this.kinds[n] !== "softmax" && this.kinds[n] !== "gated_deltanet") {
        throw new Error("mha-lm: layer " + n + " is " + this.kinds[n] + ", not softmax or gated_deltanet");
      }
      this.blocks.push({
        ln1w: get(p + "norm1.weight"), ln1b: get(p + "norm1.bias"),
        Wq: get(p + "attention.W_q.weight"), bq: get(p + "attention.W_q.bias"),
        Wk: get(p + "attention.W_k.weight"), bk: get(p + "attention.W_k.bias"),
        Wv: get(p + "attention.W_v.weight"), bv: get(p + "attention.W_v.bias"),
        Wo: get(p + "attention.W_o.weight"), bo: get(p + "attention.W_o.bias"),
        ln2w: get(p + "norm2.weight"), ln2b: get(p + "norm2.bias"),
        W1: get(p + "feed_forward.0.weight"), b1: get(p + "feed_forward.0.bias"),
        W2: get(p + "feed_forward.3.weight"), b2: get(p + "feed_forward.3.bias")
      });
      if (this.kinds[n] === "gated_deltanet") {
        var blk = this.blocks[n];
        blk.Wbeta = get(p + "attention.W_beta.weight"); blk.bbeta = get(p + "attention.W_beta.bias");
        blk.Walpha = get(p + "attention.W_alpha.weight"); blk.balpha = get(p + "attention.W_alpha.bias");
      }
    }
    this.softmaxLayers = [];
    for (n = 0; n < this.N; n++) if (this.kinds[n] === "softmax") this.softmaxLayers.push(n);
    this.normw = get("norm.weight"); this.normb = get("norm.bias");
    this.Wout = get("unembedding.weight"); this.bout = get("unembedding.bias");
    var tok = exported.tokenizer;
    this.vocab = tok.vocab; this.padId = tok.pad_id; this.unkId = tok.unk_id;
    this.pattern = tok.pattern;
    this.tokenPattern = new RegExp(tok.pattern, "gu");  // the syntax means the same in Python's regex
    this.names = {};
    tok.names.forEach(function (name) { self.names[name] = true; });
    this.ids = Object.create(null);
    this.vocab.forEach(function (token, i) { self.ids[token] = i; });
    // the angular frequencies base^(-2i/d), i = 0 .. d/2 - 1
    this.freqs = [];
    for (var i = 0; i < this.d / 2; i++) this.freqs.push(Math.pow(this.base, -2 * i / this.d));
  }

  // y = W x + b, W (out, inp) row-major
  function linear(W, b, x, out, inp) {
    var y = new Float64Array(out);
    for (var o = 0; o < out; o++) {
      var s = b[o], row = o * inp;
      for (var i = 0; i < inp; i++) s += W[row + i] * x[i];
      y[o] = s;
    }
    return y;
  }

  function layerNorm(x, w, b, eps) {
    var n = x.length, mean = 0, variance = 0, i;
    for (i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (i = 0; i < n; i++) variance += (x[i] - mean) * (x[i] - mean);
    var scale = 1 / Math.sqrt(variance / n + eps), y = new Float64Array(n);
    for (i = 0; i < n; i++) y[i] = (x[i] - mean) * scale * w[i] + b[i];
    return y;
  }

  Model.prototype.rotate = function (x, heads, position) {  // in place, every head of x
    var d = this.d;
    for (var h = 0; h < heads; h++) {
      for (var i = 0; i < d / 2; i++) {
        var angle = position * this.freqs[i], c = Math.cos(angle), s = Math.sin(angle);
        var a = x[h * d + 2 * i], b = x[h * d + 2 * i + 1];
        x[h * d + 2 * i] = a * c - b * s;
        x[h * d + 2 * i + 1] = a * s + b * c;
      }
    }
  };

  /* Per layer: the keys and values of a softmax layer, or the states of a Gated DeltaNet layer
   * after each position (Float64Array H*d*d each: going back to an earlier position is
   * dropping the later states). */
  Model.prototype.newCache = function () {
    var cache = [];
    for (var n = 0; n < this.N; n++) cache.push({keys: [], values: [], states: []});
    return cache;
  };

  function trim(cache, length) {  // forget the positions from `length` on
    cache.forEach(function (c) {
      ["keys", "values", "states"].forEach(function (name) { if (c[name].length > length) c[name].length = length; });
    });
  }

  function sigmoid(z) { return z >= 0 ? 1 / (1 + Math.exp(-z)) : Math.exp(z) / (1 + Math.exp(z)); }

  /* A Gated DeltaNet layer at one position (mha_lib.linear.delta_recurrent): from the state
   * after the previous position to the next (pushed on c.states); returns the heads' outputs
   * (Float64Array D) before W_o. */
  Model.prototype.deltaStep = function (blk, c, q, k, v, hN) {
    var H = this.H, d = this.d, D = this.D, i, j;
    var beta = linear(blk.Wbeta, blk.bbeta, hN, H, D), gate = linear(blk.Walpha, blk.balpha, hN, H, D);
    var last = c.states.length ? c.states[c.states.length - 1] : new Float64Array(H * d * d);
    var S = new Float64Array(H * d * d), out = new Float64Array(D);
    for (var h = 0; h < H; h++) {
      var o = h * d, base = h * d * d, qn = 0, kn = 0;
      for (i = 0; i < d; i++) { qn += q[o + i] * q[o + i]; kn += k[o + i] * k[o + i]; }
      qn = Math.max(Math.sqrt(qn), 1e-12); kn = Math.max(Math.sqrt(kn), 1e-12);  // as F.normalize
      var alpha = sigmoid(gate[h]), b = sigmoid(beta[h]);
      for (i = 0; i < d * d; i++) S[base + i] = alpha * last[base + i];  // forget
      for (j = 0; j < d; j++) {  // error_j = beta (v_j - (k S)_j); S_ij += k_i error_j
        var stored = 0;
        for (i = 0; i < d; i++) stored += (k[o + i] / kn) * S[base + i * d + j];
        var error = b * (v[o + j] - stored);
        for (i = 0; i < d; i++) S[base + i * d + j] += (k[o + i] / kn) * error;
      }
      for (j = 0; j < d; j++) {  // the output q S
        var s = 0;
        for (i = 0; i < d; i++) s += (q[o + i] / qn) * S[base + i * d + j];
        out[o + j] = s;
      }
    }
    c.states.push(S);
    return out;
  };

  /* Feed the token `id` at the position after the cached ones. Returns the next-token logits
   * (Float64Array V) when wantLogits, and each head's weights over keys 0..p in rows[n][h]. */
  Model.prototype.step = function (id, cache, wantLogits) {
    var D = this.D, H = this.H, Hkv = this.Hkv, d = this.d, g = H / Hkv;
    var position = Math.max(cache[0].keys.length, cache[0].states.length), scale = 1 / Math.sqrt(d);
    var x = new Float64Array(D), rows = [], i, j;
    for (i = 0; i < D; i++) x[i] = this.embedding[id * D + i];
    for (var n = 0; n < this.N; n++) {
      var blk = this.blocks[n], c = cache[n];
      var hN = layerNorm(x, blk.ln1w, blk.ln1b, this.eps);
      var q = linear(blk.Wq, blk.bq, hN, D, D);
      if (this.kinds[n] === "gated_deltanet") {  // no weights: a row of nulls per head
        var mixed = this.deltaStep(blk, c, q, linear(blk.Wk, blk.bk, hN, D, D), linear(blk.Wv, blk.bv, hN, D, D), hN);
        rows.push(new Array(H).fill(null));
        this.feedForward(blk, x, linear(blk.Wo, blk.bo, mixed, D, D));
        continue;
      }
      var k = linear(blk.Wk, blk.bk, hN, Hkv * d, D);
      var v = linear(blk.Wv, blk.bv, hN, Hkv * d, D);
      this.rotate(q, H, position);
      this.rotate(k, Hkv, position);
      c.keys.push(k);
      c.values.push(v);
      var concat = new Float64Array(D), layerRows = [];
      for (var h = 0; h < H; h++) {
        var kv = Math.floor(h / g), scores = new Float64Array(position + 1), top = -Infinity;
        for (j = 0; j <= position; j++) {
          var s = 0, key = c.keys[j];
          for (i = 0; i < d; i++) s += q[h * d + i] * scale * key[kv * d + i];
          scores[j] = s;
          if (s > top) top = s;
        }
        var total = 0;
        for (j = 0; j <= position; j++) { scores[j] = Math.exp(scores[j] - top); total += scores[j]; }
        for (j = 0; j <= position; j++) {
          scores[j] /= total;
          var value = c.values[j];
          for (i = 0; i < d; i++) concat[h * d + i] += scores[j] * value[kv * d + i];
        }
        layerRows.push(scores);
      }
      rows.push(layerRows);
      this.feedForward(blk, x, linear(blk.Wo, blk.bo, concat, D, D));
    }
    var logits = wantLogits
      ? linear(this.Wout, this.bout, layerNorm(x, this.normw, this.normb, this.eps), this.V, D)
      : null;
    return {rows: rows, logits: logits};
  };

  /* The rest of a block, in place on x: x += attended; x += W_2 relu(W_1 LN2(x) + b_1) + b_2. */
  Model.prototype.feedForward = function (blk, x, attended) {
    var D = this.D, i;
    for (i = 0; i < D; i++) x[i] += attended[i];
    var hidden = linear(blk.W1, blk.b1, layerNorm(x, blk.ln2w, blk.ln2b, this.eps), this.F, D);
    for (i = 0; i < this.F; i++) if (hidden[i] < 0) hidden[i] = 0;
    var ff = linear(blk.W2, blk.b2, hidden, D, this.F);
    for (i = 0; i < D; i++) x[i] += ff[i];
  };

  function argmax(values) {  // the first index of the largest value, as torch.argmax
    var best = 0;
    for (var i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
    return best;
  }

  /* Read the token ids: weights[n][h] = L rows (row i: the i + 1 weights of query i), the
   * logits at every position (what the model expects next), and the greedy continuation.
   * `previous` (an earlier result) lends the work done on the ids both readings start with:
   * typing at the end of the text runs only the new tokens. */
  Model.prototype.read = function (ids, maxNew, stopToken, previous) {
    var keep = 0, n, h;
    while (previous && keep < ids.length && keep < previous.ids.length && ids[keep] === previous.ids[keep]) keep++;
    if (previous && keep === ids.length && keep === previous.ids.length) return previous;  // the same ids: the same reading
    var cache = keep ? previous.cache : this.newCache();
    trim(cache, keep);
    var weights = [], logits = keep ? previous.logits.slice(0, keep) : [];
    for (n = 0; n < this.N; n++) {
      weights.push([]);
      for (h = 0; h < this.H; h++) weights[n].push(keep ? previous.weights[n][h].slice(0, keep) : []);
    }
    for (var p = keep; p < ids.length; p++) {
      var out = this.step(ids[p], cache, true);
      for (n = 0; n < this.N; n++) for (h = 0; h < this.H; h++) weights[n][h].push(out.rows[n][h]);
      logits.push(out.logits);
    }
    var continuation = [], stop = this.ids[stopToken], last = logits[logits.length - 1];
    for (var t = 0; t < maxNew && last; t++) {
      var next = argmax(last);
      continuation.push(next);
      if (next === stop || t === maxNew - 1) break;
      last = this.step(next, cache, true).logits;
    }
    trim(cache, ids.length);
    return {ids: ids.slice(), weights: weights, logits: logits, continuation: continuation, cache: cache};
  };

  /* As mha_lib.stories.Tokenizer.tokenize, for any text a reader types: NFC (an accent typed as
   * a combining mark joins its letter), lower case, curly quotes as straight ones, then the
   * library's own pattern (Tokenizer.pattern, exported with the model): a word is a run of
   * letters of any script with their marks (and inner apostrophes: "mia's"), so "Zoë", "café"
   * and "東京" stay whole (and unknown); a number is a run of digits; any other visible
   * character is one token (the model's punctuation, or a sign it lacks, marked unknown). */
  Model.prototype.tokenize = function (text) {
    var lower = text.normalize("NFC").toLowerCase().replace(/\u2019/g, "'").replace(/\u2018/g, "'");
    var found = lower.match(this.tokenPattern) || [], tokens = [];
    found.forEach(function (token) {
      if (token.length > 2 && token.slice(-2) === "'s") tokens.push(token.slice(0, -2), "'s");
      else tokens.push(token);
    });
    return tokens;
  };

  Model.prototype.encode = function (tokens) {
    var ids = this.ids, unk = this.unkId;
    return tokens.map(function (t) { return t in ids ? ids[t] : unk; });
  };

  /* Text for token ids, as Tokenizer.decode: <pad> dropped, no space before punctuation,
   * capitals for names and sentence starts (mha_lib.stories.detokenize). */
  Model.prototype.decode = function (ids) {
    var words = [], start = true, self = this;
    ids.forEach(function (id) {
      if (id === self.padId) return;
      var token = self.vocab[id];
      var word = (start || self.names[token]) && /^[a-z]+$/i.test(token)
        ? token.charAt(0).toUpperCase() + token.slice(1).toLowerCase() : token;
      if (words.length && PUNCTUATION[token]) words[words.length - 1] += word;
      else words.push(word);
      if (SENTENCE_END[token]) start = true;
      else if (!PUNCTUATION[token]) start = false;
    });
    return words.join(" ");
  };

  /* What the continuation adds to the text: decode(ids + new) minus decode(ids). */
  Model.prototype.continuationText = function (ids, added) {
    var head = this.decode(ids);
    return this.decode(ids.concat(added)).slice(head.length);
  };

  // --- the explorer's reading of a text ---------------------------------------------------------
  function editDistance(a, b) {  // over code points, as Python's str
    var prev = [], cur, i, j;
    a = Array.from(a); b = Array.from(b);
    for (j = 0; j <= b.length; j++) prev.push(j);
    for (i = 1; i <= a.length; i++) {
      cur = [i];
      for (j = 1; j <= b.length; j++) {
        cur.push(Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1)));
      }
      prev = cur;
    }
    return prev[b.length];
  }

  function isWord(token) { return /^\p{L}/u.test(token); }  // a letter first, as text_explorer._is_word

  /* Up to three known tokens to try instead of the unknown `token` at position i (as
   * mha_lib.viz.text_explorer._suggestions). For a word: the closest known spelling (if it is
   * close), then the words the model expects at i after reading the tokens before it, then more
   * spellings. For a number or a sign: the punctuation the model knows, the most expected first. */
  function suggestions(model, token, i, logits) {
    var word = isWord(token), vocab = model.vocab, candidates = [], out = [];
    vocab.forEach(function (t, v) {
      if (v !== model.padId && v !== model.unkId && t !== "'s" && isWord(t) === word) candidates.push(v);
    });
    var expected = [];
    if (i > 0) {
      var scores = logits[i - 1];
      expected = candidates.slice().sort(function (a, b) { return scores[b] - scores[a]; })
        .map(function (v) { return vocab[v]; });
    }
    if (!word) return (expected.length ? expected : candidates.map(function (v) { return vocab[v]; })).slice(0, 3);
    var close = candidates.map(function (v) { return [editDistance(token, vocab[v]), vocab[v]]; })
      .sort(function (a, b) { return a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0); });
    if (close[0][0] <= Math.max(1, Math.floor(Array.from(token).length / 3))) out.push(close[0][1]);
    expected.concat(close.map(function (c) { return c[1]; })).forEach(function (t) {
      if (out.length < 3 && out.indexOf(t) < 0) out.push(t);
    });
    return out;
  }

  function readText(model, text, settings, previous) {
    var all = model.tokenize(text), tokens = all.slice(0, settings.max_tokens);
    var ids = model.encode(tokens);
    var state = {text: text, tokens: tokens, ids: ids, truncated: all.length > tokens.length,
                 unknown: [], weights: [], continuation: [], continuationText: ""};
    if (!tokens.length) return state;
    var result = model.read(ids, settings.continuation_tokens, settings.stop, previous && previous.result);
    state.result = result;
    state.weights = result.weights;
    state.continuation = result.continuation;
    state.continuationText = model.continuationText(ids, result.continuation);
    tokens.forEach(function (token, i) {
      if (ids[i] === model.unkId && !state.unknown.some(function (u) { return u.token === token; })) {
        // suggestions for the first few only: a row of buttons each, the rest are marked
        var few = state.unknown.length < MAX_HINT_ROWS;
        state.unknown.push({token: token, position: i, suggestions: few ? suggestions(model, token, i, result.logits) : []});
      }
    });
    return state;
  }

  // --- the figure ------------------------------------------------------------------------------
  var CHAR_PX = 6.6;  // width of a character of an 11 px tick label
  var TICK_PX = 13;  // room for one tick label across its axis

  /* Panels of the H heads of one layer: as many columns as fit panels of at least 150 px (100
   * on a phone; 13 px per token up to 12 tokens); tick labels thinned and turned when they
   * would overlap. mha_lib.viz.text_explorer._grid lays out the live figure (in a notebook,
   * at a fixed width) the same way, except that its panels grow to label every token. */
  function panelGrid(tokens, H, width, narrow) {
    var L = tokens.length, longest = 1;
    tokens.forEach(function (t) { longest = Math.max(longest, Math.min(t.length, 14)); });
    var margin = {l: Math.round(longest * CHAR_PX) + (narrow ? 34 : 44), r: narrow ? 62 : 86, t: 12, b: 8};
    var plotW = Math.max(120, width - margin.l - margin.r), gap = 18;
    // a short text (up to 12 tokens) shows every label; beyond, the panels stop growing and the
    // labels thin out: the grid does not change as the reader types on
    var minPanel = Math.max(narrow ? 100 : 150, TICK_PX * Math.min(L, 12));
    var cols = Math.max(1, Math.min(H, Math.floor((plotW + gap) / (minPanel + gap))));
    if (cols === 3 && H === 4) cols = 2;  // 2 x 2 rather than 3 + 1
    var panel = (plotW - gap * (cols - 1)) / cols;
    var step = Math.max(1, Math.ceil(L * TICK_PX / panel));
    var turned = (L / step) * (longest * CHAR_PX + 6) > panel;
    var labelPx = turned ? longest * CHAR_PX + 10 : 18;  // the key labels' depth under a panel
    var rowPx = 22 + panel + labelPx + 22;
    var rows = Math.ceil(H / cols);
    return {cols: cols, panel: panel, gap: gap, plotW: plotW, step: step, turned: turned,
            rowPx: rowPx, labelPx: labelPx, queryPx: Math.round(longest * CHAR_PX) + 16,
            margin: margin, height: Math.round(margin.t + rows * rowPx + margin.b)};
  }

  /* The figure of one layer: plotly draws the frame (a panel per head: axes with the tokens,
   * a title, a grey background; the colour bar) and the weights are pictures over the panels
   * (layout images, one pixel per cell, later keys transparent so the grey shows; see
   * mhaWeightsPicture in mha-figures.js). The frame depends on the grid only: while the reader
   * types and the grid stays, a keystroke moves the axes to the new tokens and swaps the
   * pictures (Plotly.relayout), which redraws no heatmap and measures almost no text; a new grid
   * (another width, a longer word, a new row of labels) draws the frame again (Plotly.react).
   * The one heatmap trace is a 1 x 1 transparent cell that carries the colour bar. */
  function figure(model, state, layer, width, narrow, stops) {
    var L = state.tokens.length, H = model.H;
    var grid = panelGrid(state.tokens, H, width, narrow);
    var plotH = grid.height - grid.margin.t - grid.margin.b;
    var ticks = [], labels = [];
    for (var i = 0; i < L; i += grid.step) { ticks.push(i); labels.push(state.tokens[i]); }
    var data = [{type: "heatmap", z: [[0]], x: [0], y: [0], coloraxis: "coloraxis", opacity: 0,
                 hoverinfo: "skip", showscale: true}];
    var layout = {
      height: grid.height, margin: grid.margin, showlegend: false, hovermode: false,
      plot_bgcolor: "rgba(0,0,0,0)", annotations: [], shapes: [], images: [],
      font: {size: narrow ? 11 : 12},
      coloraxis: {colorscale: "Viridis", cmin: 0, cmax: 1,
                  // its title is a note beside it, as the axes' (see below)
                  colorbar: {thickness: narrow ? 10 : 14, len: Math.min(1, 320 / plotH), y: 1,
                             yanchor: "top", x: 1.01, xpad: 6, ticklabeloverflow: "allow"}}
    };
    layout.annotations.push({text: "weight", xref: "paper", yref: "paper", x: 1.01,
                             xshift: narrow ? 44 : 54, y: 1 - Math.min(1, 320 / plotH) / 2,
                             xanchor: "center", yanchor: "middle", textangle: -90, showarrow: false,
                             font: {size: 12}});
    for (var p = 0; p < H; p++) {
      var col = p % grid.cols, row = Math.floor(p / grid.cols), sfx = p === 0 ? "" : String(p + 1);
      var x0 = col * (grid.panel + grid.gap) / grid.plotW, x1 = x0 + grid.panel / grid.plotW;
      var top = 1 - (row * grid.rowPx + 22) / plotH, bottom = top - grid.panel / plotH;
      // no hiding of overflowing labels: nothing for plotly to measure label by label
      var common = {tickmode: "array", tickvals: ticks, ticktext: labels, showgrid: false,
                    zeroline: false, fixedrange: true, ticks: "", tickfont: {size: 11},
                    ticklabeloverflow: "allow"};
      layout["xaxis" + sfx] = Object.assign({}, common, {
        domain: [x0, Math.min(1, x1)], anchor: "y" + sfx, range: [-0.5, L - 0.5],
        tickangle: grid.turned ? -90 : 0});
      layout["yaxis" + sfx] = Object.assign({}, common, {
        domain: [Math.max(0, bottom), Math.min(1, top)], anchor: "x" + sfx, range: [L - 0.5, -0.5],
        showticklabels: col === 0});
      // the axis titles are notes placed past the tick labels (an axis title would make plotly
      // measure every label at every keystroke to keep clear of them)
      layout.annotations.push({text: "key", xref: "paper", yref: "paper", x: (x0 + Math.min(1, x1)) / 2,
                               y: Math.max(0, bottom), yshift: -grid.labelPx, xanchor: "center",
                               yanchor: "top", showarrow: false, font: {size: 12}});
      if (col === 0) {
        layout.annotations.push({text: "query", xref: "paper", yref: "paper", x: x0, xshift: -grid.queryPx,
                                 y: (Math.max(0, bottom) + Math.min(1, top)) / 2, xanchor: "center",
                                 yanchor: "middle", textangle: -90, showarrow: false, font: {size: 12}});
      }
      layout.shapes.push({type: "rect", xref: "x" + sfx + " domain", yref: "y" + sfx + " domain",
                          x0: 0, x1: 1, y0: 0, y1: 1, layer: "below", fillcolor: MASKED_COLOR,
                          line: {width: 0}});
      layout.annotations.push({name: "head", text: "layer " + layer + ", head " + p, xref: "paper", yref: "paper",
                               x: (x0 + Math.min(1, x1)) / 2, y: Math.min(1, top), xanchor: "center",
                               yanchor: "bottom", showarrow: false, font: {size: narrow ? 12 : 13}});
      layout.images.push({source: window.mhaWeightsPicture(rows(state, layer, p), stops),
                          xref: "x" + sfx, yref: "y" + sfx, x: -0.5, y: -0.5, sizex: L, sizey: L,
                          sizing: "stretch", xanchor: "left", yanchor: "top", layer: "above"});
    }
    // what decides the frame: when it is the same, relayout() moves to the new text
    var frame = JSON.stringify([H, grid.cols, grid.panel, grid.rowPx, grid.height, grid.margin, narrow]);
    return {data: data, layout: layout, grid: grid, frame: frame};
  }

  function rows(state, n, h) {  // (L, L) weights of head h of layer n, later keys null
    var L = state.tokens.length;
    return state.weights[n][h].map(function (row) {
      var z = Array.prototype.slice.call(row);
      while (z.length < L) z.push(null);
      return z;
    });
  }

  /* The relayout that turns the figure drawn as `old` into `fig` (the same frame): axes,
   * ticks, titles and pictures that changed. */
  function relayout(old, fig) {
    var update = {};
    Object.keys(fig.layout).forEach(function (key) {
      if (!/^[xy]axis\d*$/.test(key)) return;
      ["range", "tickvals", "ticktext", "tickangle"].forEach(function (attr) {
        if (JSON.stringify(old.layout[key][attr]) !== JSON.stringify(fig.layout[key][attr])) {
          update[key + "." + attr] = fig.layout[key][attr];
        }
      });
    });
    fig.layout.annotations.forEach(function (a, i) {
      if (old.layout.annotations[i].text !== a.text) update["annotations[" + i + "].text"] = a.text;
    });
    fig.layout.images.forEach(function (image, i) {
      ["source", "sizex", "sizey"].forEach(function (attr) {
        if (old.layout.images[i][attr] !== image[attr]) update["images[" + i + "]." + attr] = image[attr];
      });
    });
    return update;
  }

  // --- the page --------------------------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return node;
  }

  function replaceWord(text, word, replacement) {
    var escaped = word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    var pattern = /^[a-z0-9']+$/.test(word)
      ? new RegExp("(^|[^A-Za-z0-9])(" + escaped + ")(?![A-Za-z0-9])", "i") : new RegExp("()(" + escaped + ")");
    return pattern.test(text) ? text.replace(pattern, function (_, before) { return before + replacement; })
                              : text + " " + replacement;
  }

  function addStyle() {
    if (!document.getElementById("mha-lm-style")) document.head.appendChild(el("style", {id: "mha-lm-style", text: CSS}));
  }

  function mount(root, exported) {  // exported: the model (default: the page's inline one)
    if (root.mhaLM) return root.mhaLM;
    var settings = JSON.parse(root.getAttribute("data-settings"));
    var model = new Model(exported || JSON.parse(document.getElementById(root.getAttribute("data-model")).textContent));
    addStyle();
    var input = root.querySelector("#lm-input"), form = root.querySelector("form");
    var tokensBox = root.querySelector(".mha-lm-tokens"), hint = root.querySelector(".mha-lm-hint");
    var said = root.querySelector(".mha-lm-continuation"), gd = root.querySelector(".mha-lm-figure");
    var writeOn = root.querySelector(".mha-lm-write-on");
    var known = root.querySelector(".mha-lm-known");
    var api = {model: model, state: null, rendered: 0};
    root.mhaLM = api;
    root.querySelector(".mha-lm-fallback").hidden = true;
    root.querySelector(".mha-lm-live").hidden = false;

    known.textContent = model.vocab.filter(function (t) { return t !== model.vocab[model.padId] && t !== model.vocab[model.unkId]; })
      .map(function (t) { return model.names[t] ? t.charAt(0).toUpperCase() + t.slice(1) : t; })
      .sort(function (a, b) { return a.toLowerCase() < b.toLowerCase() ? -1 : 1; }).join(" · ");

    function layer() {  // the layer chosen (a softmax layer: the others have no weights)
      var checked = root.querySelector("input[name=lm-layer]:checked");
      return checked ? Number(checked.value) : model.softmaxLayers[0];
    }
    function narrow() { return window.mhaIsNarrow ? window.mhaIsNarrow(gd) : (gd.parentElement || gd).clientWidth < 560; }

    function showTokens(state) {
      tokensBox.textContent = "";
      if (!state.tokens.length) {
        tokensBox.textContent = "Type a sentence: the model needs at least one word.";
        return;
      }
      tokensBox.appendChild(document.createTextNode("The model reads " + state.tokens.length +
        " token" + (state.tokens.length === 1 ? "" : "s") + ": "));
      var unknown = {};
      state.unknown.forEach(function (u) { unknown[u.token] = true; });
      state.tokens.forEach(function (t) {
        var chip = el("span", {"class": "mha-lm-tok" + (unknown[t] ? " mha-lm-unk" : ""), text: t});
        if (unknown[t]) {
          chip.setAttribute("title", "not in the model's vocabulary: read as <unk>");
          chip.appendChild(el("span", {"class": "mha-lm-sr", text: " (unknown)"}));
        }
        tokensBox.appendChild(chip);
        tokensBox.appendChild(document.createTextNode(" "));
      });
      if (state.truncated) {
        tokensBox.appendChild(document.createTextNode("(only the first " + settings.max_tokens + " tokens are read)"));
      }
    }

    function showHint(state) {
      hint.textContent = "";
      if (!state.unknown.length) return;
      var words = state.unknown.map(function (u) { return "\u201c" + u.token + "\u201d"; }).join(", ");
      hint.appendChild(el("p", {text: "The model does not know " + words + ": it reads " +
        (state.unknown.length === 1 ? "it" : "each") + " as <unk>, a token it never saw in training. " +
        "Try a word it knows:"}));
      state.unknown.forEach(function (u) {
        if (!u.suggestions.length) return;
        var row = el("p", {"class": "mha-lm-row", role: "group", "aria-label": "instead of " + u.token},
                     [el("span", {text: "\u201c" + u.token + "\u201d \u2192"})]);
        u.suggestions.forEach(function (word) {
          var shown = model.names[word] ? word.charAt(0).toUpperCase() + word.slice(1) : word;
          var button = el("button", {type: "button", "class": "mha-lm-suggestion", text: shown,
                                     "aria-label": "replace " + u.token + " by " + shown});
          button.addEventListener("click", function () {
            input.value = replaceWord(input.value, u.token, shown);
            input.focus();
            update();
          });
          row.appendChild(button);
        });
        hint.appendChild(row);
      });
    }

    function showContinuation(state) {
      said.textContent = "";
      if (!state.tokens.length) return;
      var typed = state.text.replace(/\s+$/, ""), tail = typed.length > 70 ? "\u2026" + typed.slice(-70) : typed;
      said.appendChild(document.createTextNode("The model goes on (its most likely words): " + tail));
      said.appendChild(el("strong", {text: state.continuationText}));
    }

    function describe(state, n) {
      return "Attention weights of layer " + n + " of the " + (model.softmaxLayers.length < model.N ? "hybrid " : "") +
        "story model for the text \u201c" +
        state.tokens.join(" ") + "\u201d: one heatmap per head, keys left to right, queries top " +
        "to bottom, colour from 0 (dark purple) to 1 (yellow); grey cells are later keys a query cannot see.";
    }

    var shownWidth = null, pending = false, drawn = null, shownTokens = null;
    function draw() {
      var state = api.state, n = layer();
      shownWidth = gd.clientWidth;
      tip.hide();
      if (!state.tokens.length) {
        gd.style.height = "0px";
        drawn = null;
        return Plotly.react(gd, [], {height: 10}, PLOT_CONFIG);
      }
      // the same tokens, layer and width as on screen (typing on past the tokens read): nothing to draw
      var what = JSON.stringify([state.tokens, n, gd.clientWidth, narrow()]);
      if (drawn && drawn.what === what && gd.mhaSource) return Promise.resolve();
      var fig = figure(model, state, n, gd.clientWidth || 700, narrow(), settings.colorscale);
      fig.what = what;
      gd.setAttribute("aria-label", describe(state, n));
      var old = drawn;
      drawn = fig;
      api.shownLayer = n;
      if (old && old.frame === fig.frame && gd.mhaSource) {
        gd.mhaSource = {data: gd.mhaSource.data, layout: fig.layout, config: PLOT_CONFIG};  // for a theme switch
        var update = relayout(old, fig);
        return Object.keys(update).length ? Plotly.relayout(gd, update) : Promise.resolve();
      }
      gd.style.height = fig.layout.height + "px";
      return Plotly.react(gd, fig.data, fig.layout, PLOT_CONFIG);
    }

    // hover: the weight under the pointer, from the state on screen (plotly's hover is off)
    gd.parentElement.style.position = "relative";
    var tip = window.mhaHoverBox(gd.parentElement);
    function cellAt(event) {  // {head, query, key} under the pointer, or null
      var fig = drawn, state = api.state;
      if (!fig || !state || !state.tokens.length) return null;
      var box = gd.getBoundingClientRect(), g = fig.grid, m = g.margin, L = state.tokens.length;
      var plotW = box.width - m.l - m.r, plotH = fig.layout.height - m.t - m.b;
      var x = event.clientX - box.left - m.l, y = event.clientY - box.top - m.t;
      for (var p = 0; p < model.H; p++) {
        var sfx = p === 0 ? "" : String(p + 1);
        var xd = fig.layout["xaxis" + sfx].domain, yd = fig.layout["yaxis" + sfx].domain;
        var left = xd[0] * plotW, right = xd[1] * plotW, top = (1 - yd[1]) * plotH, bottom = (1 - yd[0]) * plotH;
        if (x < left || x >= right || y < top || y >= bottom) continue;
        var j = Math.floor((x - left) / (right - left) * L), i = Math.floor((y - top) / (bottom - top) * L);
        return j <= i ? {head: p, query: i, key: j} : null;  // later keys have no weight
      }
      return null;
    }
    function hover(event) {
      var cell = cellAt(event);
      if (!cell) { tip.hide(); return; }
      var state = api.state, n = api.shownLayer, w = state.weights[n][cell.head][cell.query][cell.key];
      tip.show(["layer " + n + ", head " + cell.head, "query " + cell.query + ": " + state.tokens[cell.query],
                "key " + cell.key + ": " + state.tokens[cell.key], "weight " + w.toFixed(3)],
               event.clientX, event.clientY);
    }
    gd.addEventListener("pointermove", hover);
    gd.addEventListener("pointerdown", hover);
    gd.addEventListener("pointerleave", tip.hide);

    function finish() {
      api.rendered += 1;
      root.setAttribute("data-rendered", String(api.rendered));
    }
    function update() {
      pending = false;
      api.state = readText(model, input.value, settings, api.state);
      // the token chips and the hint are built again only when what they show changed (typing
      // on in a long text, past the tokens read, changes neither)
      var shows = JSON.stringify([api.state.tokens, api.state.truncated, api.state.unknown]);
      if (shows !== shownTokens) {
        shownTokens = shows;
        showTokens(api.state);
        showHint(api.state);
      }
      showContinuation(api.state);
      writeOn.disabled = !api.state.continuation.length;
      return Promise.resolve(draw()).then(finish);
    }
    function later() {
      if (pending) return;
      pending = true;
      requestAnimationFrame(update);
    }
    input.addEventListener("input", later);
    form.addEventListener("submit", function (event) { event.preventDefault(); update(); });
    writeOn.addEventListener("click", function () {
      if (!api.state || !api.state.continuation.length) return;
      input.value = input.value.replace(/\s+$/, "") + api.state.continuationText;
      update();
    });
    root.querySelectorAll(".mha-lm-example").forEach(function (button) {
      button.addEventListener("click", function () {
        input.value = button.getAttribute("data-text");
        update();
      });
    });
    root.querySelectorAll("input[name=lm-layer]").forEach(function (radio) {
      radio.addEventListener("change", function () { Promise.resolve(draw()).then(finish); });
    });
    // the figure is laid out for its width: draw again when that changes (a window resized or
    // turned, the theme's sidebars opened or closed, the page's styles arriving after the drawing)
    var refit = false;
    function resized() {
      if (refit || !api.state || Math.abs(gd.clientWidth - shownWidth) <= 4) return;
      refit = true;
      requestAnimationFrame(function () {
        refit = false;
        if (Math.abs(gd.clientWidth - shownWidth) > 4) Promise.resolve(draw()).then(finish);
      });
    }
    if (window.ResizeObserver) new ResizeObserver(resized).observe(root);
    window.addEventListener("resize", resized);
    api.update = update;
    // what is on screen, for tests: the layer, and per head its weights (later keys null)
    api.shown = function () {
      var state = api.state, n = api.shownLayer;
      if (!drawn || !state.tokens.length) return {layer: n, heads: []};
      return {layer: n, heads: state.weights[n].map(function (_, h) { return rows(state, n, h); })};
    };
    api.ready = update().then(function () { return api; });
    return api;
  }

  // --- a model in a file of its own (data-model-src), loaded when the reader reaches it ---------
  var LOAD_MARGIN = "1200px 0px";  // load this far ahead of the viewport: drawn by the time it shows

  function statusLine(root) {  // the explorer's status line (role="status": read out politely)
    var line = root.querySelector(".mha-lm-status");
    if (!line) {
      var live = root.querySelector(".mha-lm-live");
      line = el("p", {"class": "mha-lm-status", role: "status"});
      live.insertBefore(line, live.querySelector(".mha-lm-tokens"));
    }
    return line;
  }

  function loadModel(root) {  // a promise of the explorer's api, its model loaded and drawn
    if (root.mhaLM) return root.mhaLM.ready;
    if (root.mhaLMLoading) return root.mhaLMLoading;
    var key = root.getAttribute("data-model-key"), src = root.getAttribute("data-model-src");
    var bytes = Number(root.getAttribute("data-model-bytes")), line = statusLine(root);
    line.textContent = "Loading the story model" + (bytes ? " (" + Math.round(bytes / 1000) + " kB)" : "") + "\u2026";
    root.setAttribute("data-model-state", "loading");
    var models = window.mhaLMModels = window.mhaLMModels || {};
    root.mhaLMLoading = new Promise(function (resolve, reject) {
      if (models[key]) { resolve(models[key]); return; }
      var script = document.createElement("script");
      script.src = src;
      script.onload = function () {
        if (models[key]) resolve(models[key]);
        else reject(new Error("mha-lm: " + src + " holds no model " + key));
      };
      script.onerror = function () { reject(new Error("mha-lm: could not load " + src)); };
      document.head.appendChild(script);
    }).then(function (exported) {
      return mount(root, exported).ready;
    }).then(function (api) {
      line.textContent = "";
      root.setAttribute("data-model-state", "loaded");
      return api;
    }, function (error) {
      root.mhaLMLoading = null;  // the next focus or key press tries again
      root.setAttribute("data-model-state", "failed");
      line.textContent = "The model could not be loaded: reload the page to try again.";
      throw error;
    });
    return root.mhaLMLoading;
  }

  function prepare(root) {  // the controls at once; the model when the reader reaches them
    if (root.mhaLM || root.mhaLMPrepared) return;
    root.mhaLMPrepared = true;
    addStyle();
    var input = root.querySelector("#lm-input"), form = root.querySelector("form");
    root.querySelector(".mha-lm-fallback").hidden = true;
    root.querySelector(".mha-lm-live").hidden = false;
    root.querySelector(".mha-lm-write-on").disabled = true;  // no continuation before the model
    statusLine(root).textContent = "The model loads when you reach this explorer, or type into it.";
    root.setAttribute("data-model-state", "waiting");
    function load() { loadModel(root).catch(function (error) { console.error(error); }); }
    ["focusin", "pointerdown", "keydown", "input"].forEach(function (name) { root.addEventListener(name, load); });
    form.addEventListener("submit", function (event) { if (!root.mhaLM) event.preventDefault(); });
    root.querySelectorAll(".mha-lm-example").forEach(function (button) {  // read once the model is there
      button.addEventListener("click", function () { if (!root.mhaLM) input.value = button.getAttribute("data-text"); });
    });
    if (!window.IntersectionObserver) { load(); return; }
    var seen = new IntersectionObserver(function (entries) {
      if (!entries.some(function (entry) { return entry.isIntersecting; })) return;
      seen.disconnect();
      load();
    }, {rootMargin: LOAD_MARGIN});
    seen.observe(root);
  }

  function loadAll() {  // every explorer's model, now (printing): a promise of their apis
    return Promise.all([].map.call(document.querySelectorAll(".mha-lm[data-model]"), function (root) {
      if (!root.hasAttribute("data-model-src")) return Promise.resolve(mount(root).ready);
      prepare(root);
      return loadModel(root);
    }));
  }

  function mountAll() {
    if (!window.Plotly) return;
    document.querySelectorAll(".mha-lm[data-model]").forEach(function (root) {
      if (root.hasAttribute("data-model-src")) prepare(root);
      else mount(root);
    });
  }

  window.mhaLM = {Model: Model, mount: mount, readText: readText, loadAll: loadAll};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
  else mountAll();
})();
