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
  // content): on a phone, less padding around the app; the frame clips what overflows without being a scroll
  // box (its `overflow: hidden` would keep the header from sticking to the screen's top, layout.css); and the
  // side tabs' drawer shown while <body> says open.
  const style = document.createElement("style");
  style.id = "pg-layout-frame";
  style.textContent =
    "@media (max-width: 767px) { .gradio-container > .main.app { padding: .5rem .6rem !important }" +
    " .gradio-container { overflow: clip !important }" +
    " body.pg-drawer-open #pg-side { transform: none !important; visibility: visible !important } }";
  (document.head || document.documentElement).appendChild(style);

  // On a phone the side panel is a drawer (layout.css): the header's ☰ button (#pg-drawer) calls pgToggleDrawer,
  // which puts `pg-drawer-open` on <body>; Escape closes it. The drawer starts right under the header, which
  // stays at the screen's top: its bottom is measured into --pg-drawer-top.
  window.pgToggleDrawer = (open) => {
    const body = document.body;
    const want = open === undefined ? !body.classList.contains("pg-drawer-open") : Boolean(open);
    body.classList.toggle("pg-drawer-open", want);
    document.querySelector("#pg-drawer")?.setAttribute("aria-expanded", String(want));
    placeDrawer();
    return want;
  };
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && document.body?.classList.contains("pg-drawer-open")) window.pgToggleDrawer(false);
  });
  let drawerTop = "";
  const placeDrawer = () => {
    const header = document.querySelector("#pg-dark")?.parentElement;
    if (!header) return;
    const top = `${Math.max(0, Math.round(header.getBoundingClientRect().bottom))}px`;
    if (top !== drawerTop) {
      drawerTop = top;
      document.documentElement.style.setProperty("--pg-drawer-top", top);
    }
  };
  window.addEventListener("scroll", placeDrawer, { passive: true });

  // The side panel is one screen tall less its distance from the page top (the header's height, which varies
  // with the model's chips and the width): measured here into --pg-side-top, which layout.css uses.
  let last = "";
  const measure = () => {
    placeDrawer();
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
