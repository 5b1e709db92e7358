// Page layout and dark mode (issue 17); the style is in layout.css.
(() => {
  // Dark mode: the ◐ button (#pg-dark) calls pgToggleDark, which toggles Gradio's own `dark` class on <body> and
  // keeps the choice in localStorage. On load the stored choice wins over Gradio's default (the system's
  // preference), which Gradio applies when it mounts, possibly after this script: so <body>'s class is watched and
  // put back. A ?__theme= in the URL (Gradio's Settings) is an explicit choice and is left alone.
  const KEY = "pg-dark";
  const read = () => {
    try {
      return localStorage.getItem(KEY);
    } catch (e) {
      return null;
    }
  };
  const wanted = () => ({ 1: true, 0: false })[read()];
  const apply = () => {
    const dark = wanted();
    const body = document.body;
    if (!body || dark === undefined || new URLSearchParams(location.search).get("__theme")) return;
    if (body.classList.contains("dark") !== dark) body.classList.toggle("dark", dark);
  };
  window.pgToggleDark = () => {
    const dark = !document.body.classList.contains("dark");
    try {
      localStorage.setItem(KEY, dark ? "1" : "0");
    } catch (e) {
      // storage refused (private mode): the toggle still works for this page
    }
    document.body.classList.toggle("dark", dark);
    return dark;
  };
  const watchBody = () => {
    apply();
    new MutationObserver(apply).observe(document.body, { attributes: true, attributeFilter: ["class"] });
  };
  if (document.body) watchBody();
  else {
    // this script is in <head>: wait for <body> to exist
    new MutationObserver((_, seen) => {
      if (document.body) {
        seen.disconnect();
        watchBody();
      }
    }).observe(document.documentElement, { childList: true });
  }

  // Rules on Gradio's own page frame, outside what the page's CSS reaches (Gradio scopes that CSS to the app's
  // content): on a phone, less padding around the app.
  const style = document.createElement("style");
  style.id = "pg-layout-frame";
  style.textContent = "@media (max-width: 767px) { .gradio-container > .main.app { padding: .5rem .6rem !important } }";
  (document.head || document.documentElement).appendChild(style);

  // The side panel is one screen tall less its distance from the page top (the header's height, which varies
  // with the model's chips and the width): measured here into --pg-side-top, which layout.css uses.
  let last = "";
  const measure = () => {
    const row = document.querySelector("#pg-side")?.parentElement;
    if (!row) return;
    const top = `${Math.round(row.getBoundingClientRect().top + window.scrollY)}px`;
    if (top !== last) {
      last = top;
      document.documentElement.style.setProperty("--pg-side-top", top);
    }
  };
  window.addEventListener("resize", measure);
  const start = () => {
    measure();
    new ResizeObserver(measure).observe(document.body);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
