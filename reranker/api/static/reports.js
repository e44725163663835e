// What the report pages (search analytics, compare) share, inlined into each page: building
// elements, reading their JSON endpoint and saying why it failed. Every text of an answer
// reaches a page through textContent and setAttribute only.
"use strict";
function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}
// The answer of a JSON endpoint, or an Error with the message of its JSON error.
function readJSON(url) {
  return fetch(url, {headers: {Accept: "application/json"}, cache: "no-store"})
    .then(function (response) {
      return response.json().then(function (body) {
        if (!response.ok) {
          throw new Error((body.error && body.error.message) || response.statusText);
        }
        return body;
      });
    });
}
// Show what failed in #error, and say so in the element with id statusId.
function showFailure(message, statusId) {
  const error = document.getElementById("error");
  error.textContent = message;
  error.hidden = false;
  document.getElementById(statusId).textContent = "Not loaded";
}
