/* reranker.js: search through a reranker service and report clicks on its results.
 * <script src="https://SERVICE/reranker.js" [data-endpoint="URL"] [data-track]></script>
 * The service is the folder of this script's URL, or data-endpoint.
 * reranker.search(query, options): Promise of the /search answer (options: size, ...)
 * reranker.click(impressionId, docId[, ids]): reports a click, even as the page unloads,
 *   with the user_id / session_id its page was searched with (from search(), or ids);
 *   Promise of the service's answer, rejected with an Error saying why a click was refused
 *   (error.status: 409 when the page's feedback window had closed, ...; error.field).
 * reranker.reward(impressionId, value[, ids]): reports the page's reward (a purchase, a
 *   rating) the same way; Promise as click().
 * reranker.onError(hook): hook(error, {type, impression_id, doc_id | value}) for every
 *   click or reward refused or not delivered, tracked ones included; returns remove().
 *   Without a hook, a refusal is written to the console.
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

  // The service's answer, or an Error with the service's reason and the HTTP status.
  const answer = (response) => response.json().catch(() => ({})).then((body) => {
    if (response.ok) return body;
    const error = body.error || {};
    throw Object.assign(new Error(error.message || `HTTP ${response.status}`),
                        {status: response.status, field: error.field || null});
  });
  const unreachable = () => {
    throw new Error(`cannot reach the reranker service at ${base} (is it up, and is ` +
                    `${location.origin} in its server.cors_origins?)`);
  };

  const search = (query, options) =>
    post("search", JSON.stringify(Object.assign({}, options, {query})), "application/json")
      .then((response) => answer(response).then((body) => {
        remember(body, options);
        return body;
      }), unreachable);

  const hooks = new Set();
  const onError = (hook) => {
    hooks.add(hook);
    return () => hooks.delete(hook);
  };
  const refused = (error, what) => {
    if (!hooks.size) console.warn(`reranker: ${what.type} refused: ${error.message}`);
    for (const hook of hooks) {
      try { hook(error, what); } catch (ignored) { /* a hook's own error is its own */ }
    }
    throw error;
  };

  // Feedback as a keepalive request, which outlives the page that sends it. Same origin: a
  // JSON body. Cross-origin: a text/plain body, which needs no preflight and carries this
  // page's Origin (see docs/tutorials/front-end.md).
  const feedback = (path, fields, ids, what) => {
    const body = JSON.stringify(Object.assign({}, servedTo.get(fields.impression_id), ids,
                                              fields));
    return post(path, body, sameOrigin ? "application/json" : "text/plain", true)
      .then(answer, unreachable)
      .catch((error) => refused(error, what));
  };
  const click = (impressionId, docId, ids) =>
    feedback("click", {impression_id: impressionId, doc_id: docId}, ids,
             {type: "click", impression_id: impressionId, doc_id: docId});
  const reward = (impressionId, value, ids) =>
    feedback("reward", {impression_id: impressionId, value}, ids,
             {type: "reward", impression_id: impressionId, value});

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
      // (a refusal goes to the onError hooks, or the console)
      click(page.dataset.impressionId, doc.dataset.docId, ids).catch(() => {});
    };
    root.addEventListener("click", listener, true);
    root.addEventListener("auxclick", listener, true);
    return () => {
      root.removeEventListener("click", listener, true);
      root.removeEventListener("auxclick", listener, true);
    };
  };

  window.reranker = {endpoint: base, search, click, reward, onError, track};
  if (script && script.hasAttribute("data-track")) track(document);
})();
