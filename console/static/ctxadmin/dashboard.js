// Refreshes the dashboard in place: fetches the same figures and SVG charts as JSON and swaps
// them into their slots (the charts are rendered and escaped by the server).
(() => {
  "use strict";
  const root = document.getElementById("ops-dashboard");
  if (!root) return;
  const source = root.dataset.source;
  const every = Math.max(Number(root.dataset.refreshSeconds) || 15, 2) * 1000;
  const problem = document.getElementById("ops-problem");
  let busy = false;

  function apply(payload) {
    for (const [name, svg] of Object.entries(payload.charts)) {
      const slot = root.querySelector(`[data-chart-slot="${name}"]`);
      if (slot) slot.innerHTML = svg;
    }
    for (const [name, text] of Object.entries(payload.figures)) {
      for (const node of root.querySelectorAll(`[data-figure="${name}"]`)) node.textContent = text;
    }
    root.dataset.generatedAt = payload.generated_at;
    problem.hidden = true;
  }

  function stale(reason) {
    problem.textContent = `${reason} The figures shown are from ${root.dataset.generatedAt}.`;
    problem.hidden = false;
  }

  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch(source, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        redirect: "manual",
      });
      if (response.type === "opaqueredirect" || response.status === 302) {
        stale("Your session has ended: reload the page to log in again.");
      } else if (!response.ok) {
        stale(`Refresh failed (HTTP ${response.status}).`);
      } else {
        apply(await response.json());
      }
    } catch {
      stale("Refresh failed (the server could not be reached).");
    } finally {
      busy = false;
    }
  }

  setInterval(refresh, every);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
})();
