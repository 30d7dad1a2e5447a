/* The search page: snippets that show the words searched for, the page that teaches a topic
 * first, and small downloads (added to search.html only, after Sphinx's searchtools.js, by
 * mha_lib/book/sphinx_ext.py).
 *
 * Snippets: Sphinx fetches the whole page of every hit (hundreds of kB each, a megabyte for the
 * chapter that ships a model) to cut a snippet from its text. Here those requests get the
 * page's text instead, written at build time into _static/mha-search/<page>.html (a few tens
 * of kB: headings, prose and code, no outputs or figures). Sphinx looked for the stems of the
 * words ("rotari" for "rotary"), which often do not occur in the text, and then showed the
 * page's first characters (a menu's label, raw TeX); the snippet here is cut around the first
 * place where a word searched for, or a word starting with its stem, occurs, and whitespace
 * is collapsed.
 *
 * Ranking: Sphinx scores a page by whether a word occurs in it (and in its titles); the page
 * that teaches a topic uses its word many times, and names it in a heading. Each hit's score gets
 * 5 * log2(1 + n) for the n occurrences of the words searched for on its page, a word of a
 * section heading counting ten times (_static/mha-search/counts.js).
 */
(function () {
  "use strict";
  var root = document.documentElement.dataset.content_root || "./";
  var here = new URL(root, window.location.href);
  var texts = new URL("_static/mha-search/", here);

  // --- snippets from the pages' texts ------------------------------------------------------
  var rawFetch = window.fetch;
  window.fetch = function (resource, options) {
    if (typeof resource === "string") {
      var url = new URL(resource, window.location.href);
      var path = url.pathname;
      if (url.origin === here.origin && path.indexOf(here.pathname) === 0 && /\.html$/.test(path)
          && path.indexOf("/_static/") < 0) {
        resource = new URL(path.slice(here.pathname.length), texts).href;
      }
    }
    return rawFetch.call(window, resource, options);
  };

  function queryWords() {
    var q = new URLSearchParams(window.location.search).get("q") || "";
    return q.toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter(function (w) { return w.length > 1; });
  }

  function escapeRegExp(text) { return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

  var TEX = [[/\\[()[\]]/g, ""], [/\\sqrt\s*\{([^{}]*)\}/g, "\u221a$1"], [/\\sqrt\s*/g, "\u221a"],
             [/\\infty/g, "\u221e"], [/\\times/g, "\u00d7"], [/\\cdot/g, "\u00b7"], [/\\le(q)?\b/g, "\u2264"],
             [/\\ge(q)?\b/g, "\u2265"], [/\\to\b/g, "\u2192"], [/\\top\b/g, "T"],
             [/\\(?:mathrm|text|mathbf|operatorname|boldsymbol)\s*\{([^{}]*)\}/g, "$1"],
             [/\\(?:mathrm|text|mathbf|operatorname|boldsymbol|left|right|,|;|!)\s*/g, ""],
             [/\\([A-Za-z]+)/g, "$1"],
             [/[{}]/g, ""]];
  function plain(node) {  // the text a reader sees, maths as characters rather than TeX
    var text = (node ? node.textContent : "").replace(/\s+/g, " ").trim();
    TEX.forEach(function (rule) { text = text.replace(rule[0], rule[1]); });
    return text;
  }

  function find(text, words) {  // where the first word searched for (or a word on its stem) starts
    var lower = text.toLowerCase();
    for (var i = 0; i < words.length; i++) {
      var match = new RegExp("(^|[^\\p{L}\\p{N}])" + escapeRegExp(words[i].toLowerCase()), "u").exec(lower);
      if (match) return match.index + match[1].length;
    }
    return -1;
  }

  function summary(htmlText, keywords, anchor) {
    var doc = new DOMParser().parseFromString(htmlText, "text/html");
    var main = doc.querySelector('[role="main"]') || doc.body;
    var scope = (anchor && main.querySelector(anchor)) || main;
    var prose = scope.cloneNode(true);  // a sentence about the word, before code that uses it
    prose.querySelectorAll("pre").forEach(function (pre) { pre.remove(); });
    var words = queryWords().concat(Array.from(keywords || []));
    var text = plain(prose), at = find(text, words);
    if (at < 0) { text = plain(scope); at = find(text, words); }
    if (!text) return null;
    if (at < 0) at = 0;
    var start = Math.max(0, at - 100), end = Math.min(text.length, at + 140);
    if (start > 0) start = text.indexOf(" ", start) + 1 || start;  // whole words
    if (end < text.length && text.lastIndexOf(" ", end) > at) end = text.lastIndexOf(" ", end);
    var p = document.createElement("p");
    p.classList.add("context");
    p.textContent = (start > 0 ? "\u2026" : "") + text.slice(start, end) + (end < text.length ? "\u2026" : "");
    return p;
  }
  // --- ranking ------------------------------------------------------------------------------
  function install() {
    if (typeof Search !== "undefined") Search.makeSearchSummary = summary;
    var counts = window.mhaSearchCounts;
    if (typeof Scorer === "undefined" || !counts) return;
    var docIndex = {};
    counts.docs.forEach(function (doc, i) { docIndex[doc] = i; });
    var stems = null;
    Scorer.score = function (result) {
      if (stems === null) {  // Stemmer: language_data.js, loaded by then
        var stemmer = new Stemmer();
        stems = queryWords().map(function (w) { return stemmer.stemWord(w); });
      }
      var doc = docIndex[result[0]], n = 0;
      stems.forEach(function (stem) {
        var row = counts.terms[stem] || [];
        for (var i = 0; i < row.length; i += 2) if (row[i] === doc) n += row[i + 1];
      });
      return result[4] + 5 * Math.log2(1 + n);
    };
  }
  // Sphinx's search page loads this script before searchtools.js; its search starts on
  // DOMContentLoaded, after the listener added here (every classic script has run by then).
  if (typeof Search !== "undefined") install();
  else document.addEventListener("DOMContentLoaded", install);
})();
