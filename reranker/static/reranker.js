/* reranker.js: search through a reranker service and report clicks on its results.
 * <script src="https://SERVICE/reranker.js" [data-endpoint="URL"] [data-track]></script>
 * The service is the folder of this script's URL, or data-endpoint.
 * reranker.search(query, options): Promise of the /search answer (options: size, ...)
 * reranker.click(impressionId, docId[, ids]): reports a click, even as the page unloads,
 *   with the user_id / session_id its page was searched with (from search(), or ids)
 * reranker.track(container): reports clicks on [data-doc-id] elements under a
 *   [data-impression-id] one (and its data-user-id, data-session-id); returns stop().
 *   data-track: track(document). */
(() => {
  "use strict";
  const script = document.currentScript;
  const given = script && script.getAttribute("data-endpoint");
  let base = given ? new URL(given, location.href).href
    : script && script.src ? new URL(".", script.src).href : location.origin + "/";
  if (!base.endsWith("/")) base += "/";
  const sameOrigin = new URL(base).origin === location.origin;
  const post = (path, body, type, keepalive) =>
    fetch(new URL(path, base).href,
          {method: "POST", body, keepalive, headers: {"Content-Type": type}});

  // The ids the latest pages were searched with: their clicks must carry them.
  const servedTo = new Map();
  const remember = (page, options) => {
    const ids = {};
    for (const key of ["user_id", "session_id"]) {
      if (options && options[key]) ids[key] = options[key];
    }
    if (!page.impression_id || !Object.keys(ids).length) return;
    servedTo.set(page.impression_id, ids);
    if (servedTo.size > 100) servedTo.delete(servedTo.keys().next().value);
  };

  const search = (query, options) =>
    post("search", JSON.stringify(Object.assign({}, options, {query})), "application/json")
      .then((response) => response.json().catch(() => ({})).then((body) => {
        if (response.ok) {
          remember(body, options);
          return body;
        }
        const message = (body.error && body.error.message) || `HTTP ${response.status}`;
        throw Object.assign(new Error(message), {status: response.status});
      }), () => {
        throw new Error(`cannot reach the reranker service at ${base} (is it up, and is ` +
                        `${location.origin} in its server.cors_origins?)`);
      });

  // Same origin: a JSON beacon. Cross-origin: a keepalive fetch with a text/plain body,
  // which needs no preflight and carries this page's Origin (see the README).
  const click = (impressionId, docId, ids) => {
    const body = JSON.stringify(Object.assign({}, servedTo.get(impressionId), ids,
                                              {impression_id: impressionId, doc_id: docId}));
    const type = sameOrigin ? "application/json" : "text/plain";
    if (!sameOrigin || !navigator.sendBeacon ||
        !navigator.sendBeacon(new URL("click", base).href, new Blob([body], {type}))) {
      post("click", body, type, true).catch(() => {});
    }
  };

  const track = (container) => {
    const root = container || document;
    const listener = (event) => {
      if (event.type === "auxclick" && event.button !== 1) return;
      const doc = event.target.closest && event.target.closest("[data-doc-id]");
      const page = doc && doc.closest("[data-impression-id]");
      if (!page || !root.contains(doc)) return;
      const ids = {};
      if (page.dataset.userId) ids.user_id = page.dataset.userId;
      if (page.dataset.sessionId) ids.session_id = page.dataset.sessionId;
      click(page.dataset.impressionId, doc.dataset.docId, ids);
    };
    root.addEventListener("click", listener, true);
    root.addEventListener("auxclick", listener, true);
    return () => {
      root.removeEventListener("click", listener, true);
      root.removeEventListener("auxclick", listener, true);
    };
  };

  window.reranker = {endpoint: base, search, click, track};
  if (script && script.hasAttribute("data-track")) track(document);
})();
