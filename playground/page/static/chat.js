// The chat in the page (playground/page/conversation.py draws the marks, playground/page/static/chat.css styles them):
// - "‹" / "›" on a turn with versions are links "#pg-ver-<turn>-prev|next": a click writes "<turn>:<step>:<nonce>"
//   into the hidden #pg-action box, whose change event asks the server for that version (ChatHandlers.version).
// - The check line names the settings at fault in `code`: those controls (#pg-<name>) get the class pg-fault.
// - Enter in a message's edit box saves the edit.
// - The side panel's statistics name the chat messages of the reply they describe (data-messages): those
//   messages get the class pg-described, so the reply the panel describes is visible in the chat.
(() => {
  // Enter in a message's edit box saves the edit, as Enter sends in the input box (Shift+Enter: a new line).
  const SAVE = ["Submit", "提交"]; // Gradio's label of the edit's save button, English and Chinese
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (!box.matches || !box.matches("#pg-chat textarea.edit-textarea")) return;
    const chat = box.closest("#pg-chat"); // one message is edited at a time: its save button is the chat's only one
    const save = [...chat.querySelectorAll("button")].find((b) => SAVE.includes(b.getAttribute("aria-label")));
    if (!save) return;
    event.preventDefault();
    save.click();
  }, true);

  const send = (value) => {
    const box = document.querySelector("#pg-action textarea, #pg-action input");
    if (!box) return;
    box.value = value;
    box.dispatchEvent(new Event("input", { bubbles: true }));
  };
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest('a[href^="#pg-ver-"]');
    if (!link) return;
    event.preventDefault();
    event.stopPropagation();
    const [, turn, step] = link.getAttribute("href").match(/^#pg-ver-(\d+)-(prev|next)$/) || [];
    if (turn) send(`${turn}:${step}:${Date.now()}`);
  }, true);

  const outline = () => {
    const check = document.querySelector("#pg-check");
    const named = new Set(check ? [...check.querySelectorAll("code")].map((c) => c.textContent.trim()) : []);
    document.querySelectorAll(".pg-fault").forEach((e) => {
      if (!named.has(e.id.slice(3))) e.classList.remove("pg-fault");
    });
    named.forEach((name) => {
      if (/^[a-z_]+$/.test(name)) document.getElementById(`pg-${name}`)?.classList.add("pg-fault");
    });
  };
  const highlight = () => {
    const chat = document.querySelector("#pg-chat");
    const described = document.querySelector("#pg-stats .pg-described");
    const wanted = new Set((described?.dataset.messages || "").split(",").filter((x) => x !== "").map(Number));
    if (!chat) return;
    const messages = [...chat.querySelectorAll('[data-testid="bot"], [data-testid="user"]')];
    messages.forEach((m, i) => {
      const box = m.closest(".message") || m;
      if (wanted.has(i) !== box.classList.contains("pg-described")) box.classList.toggle("pg-described");
    });
  };
  let queued = false;
  const soon = () => {
    if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; highlight(); }); }
  };
  const watch = () => {
    const check = document.querySelector("#pg-check");
    const chat = document.querySelector("#pg-chat");
    const stats = document.querySelector("#pg-stats");
    if (!check || !chat || !stats) return setTimeout(watch, 300);
    new MutationObserver(outline).observe(check, { subtree: true, childList: true, characterData: true });
    const all = { subtree: true, childList: true, attributes: true, attributeFilter: ["data-messages"] };
    new MutationObserver(soon).observe(stats, all);
    new MutationObserver(soon).observe(chat, { subtree: true, childList: true });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();
