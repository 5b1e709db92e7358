// Token alternatives in a popover (playground/page/heatmap.py renders the heatmaps). Delegated from the document, so it
// works for every heatmap Gradio (re-)renders, in the Stats panel and in the chat: a click or tap on a `.pg-tok`
// opens it; a click elsewhere or Escape closes it; Tab reaches a heatmap, Enter opens its first token and the arrow
// keys walk the tokens. A heatmap's numbers are the JSON in its hidden `.pg-tokdata` (the chat's sanitizer keeps no
// data-* attribute); the script sets data-i on the token it opens and data-i / data-alt on each alternative row.
// A request with sampler_logprobs shows two columns, "model" | "after samplers": the chosen token marked in both,
// a model candidate the samplers filtered out as "removed". When the heatmap knows its conversation turn, each
// model candidate has a "continue with this" button that writes "branch:<turn>:<choice>:<pos>:<alt>:<nonce>" into
// the hidden #pg-action box (as playground/page/static/chat.js does for the version links).
(() => {
  if (window.pgTokens) return;
  const parsed = new WeakMap();
  let pop = null;
  let anchor = null;
  // While open: when Gradio re-renders the heatmap under it, the popover goes with its token.
  const gone = new MutationObserver(() => { if (anchor && !anchor.isConnected) close(); });

  function data(box) {
    if (!parsed.has(box)) {
      const el = box.querySelector(':scope > .pg-tokdata');
      let d = null;
      try { d = el ? JSON.parse(el.textContent) : null; } catch (e) { d = null; }
      parsed.set(box, d);
    }
    return parsed.get(box);
  }

  const tokens = (box) => Array.from(box.querySelectorAll('.pg-tok'));
  const pct = (lp) => {
    const p = Math.exp(lp) * 100;
    return p >= 0.05 ? p.toFixed(1) + '%' : '<0.1%';
  };
  const fill = (text, values) => text.replace(/\{(\w+)\}/g, (m, k) => (k in values ? values[k] : m));
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const code = (token) => el('code', '', JSON.stringify(token));

  function popover() {
    if (!pop || !pop.isConnected) {
      pop = el('div', 'pg-tokpop');
      pop.id = 'pg-tokpop';
      pop.setAttribute('role', 'tooltip');
      pop.hidden = true;
      document.body.appendChild(pop);
    }
    return pop;
  }

  const act = (value) => {  // playground/page/static/chat.js `send`
    const box = document.querySelector('#pg-action textarea, #pg-action input');
    if (!box) return;
    box.value = value;
    box.dispatchEvent(new Event('input', {bubbles: true}));
  };

  function branch(d, i, j) {
    const b = el('button', 'pg-branch', d.l.branch);
    b.type = 'button';
    b.addEventListener('click', (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      act(`branch:${d.turn}:${d.c || 0}:${i}:${j}:${Date.now()}`);
      close();
    });
    return b;
  }

  function row(i, token, lp, cls, tag) {
    const li = el('li', 'pg-alt' + (cls ? ' ' + cls : ''));
    li.dataset.i = String(i);
    li.dataset.alt = token;
    const bar = el('span', 'pg-alt-bar');
    bar.style.width = Math.max(1, Math.min(100, Math.exp(lp) * 100)).toFixed(1) + '%';
    li.append(bar, code(token));
    if (tag) li.append(el('span', 'pg-alt-tag', tag));
    li.append(el('span', 'pg-alt-p', pct(lp)));
    return li;
  }

  // The model's candidates, the chosen one marked (after a gap when it is not among them); with a known turn, a
  // "continue with this" button on each.
  function modelList(d, i) {
    const [token, lp, rank, alts] = d.t[i];
    const l = d.l;
    const list = el('ol', 'pg-alts');
    alts.forEach(([alt, alp], j) => {
      const chosen = rank === j + 1;
      const li = row(i, alt, alp, chosen ? 'pg-alt-chosen' : '', chosen ? l.chosen : '');
      li.dataset.j = String(j);
      if (d.turn !== null && d.turn !== undefined) li.append(branch(d, i, j));
      list.append(li);
    });
    if (!rank) {
      list.append(el('li', 'pg-alt-gap', '…'));
      list.append(row(i, token, lp, 'pg-alt-chosen', l.chosen));
    }
    return list;
  }

  // What the samplers left, best first, the chosen one marked; then the model's candidates missing from it:
  // "removed" when the list holds fewer than the model's (the samplers left nothing else), else only lower.
  function afterList(d, i) {
    const [token, , , alts, after, alp] = d.t[i];
    const l = d.l;
    const list = el('ol', 'pg-alts pg-alts-after');
    if (alp === null) {
      list.append(el('li', 'pg-alt-gap', l.forced));
      return list;
    }
    let found = false;
    after.forEach(([alt, v]) => {
      const chosen = !found && alt === token;
      found = found || chosen;
      list.append(row(i, alt, v, chosen ? 'pg-alt-chosen' : '', chosen ? l.chosen : ''));
    });
    if (!found) {
      list.append(el('li', 'pg-alt-gap', '…'));
      list.append(row(i, token, alp, 'pg-alt-chosen', l.chosen));
    }
    const kept = new Set(after.map(([alt]) => alt));
    const removed = after.length < alts.length;
    alts.forEach(([alt]) => {
      if (kept.has(alt) || alt === token) return;
      const li = el('li', 'pg-alt ' + (removed ? 'pg-alt-removed' : 'pg-alt-lower'));
      li.dataset.i = String(i);
      li.dataset.alt = alt;
      li.append(code(alt), el('span', 'pg-alt-p', removed ? l.removed : l.lower));
      list.append(li);
    });
    return list;
  }

  function render(d, i) {
    const [token, lp, rank, alts, after, alp] = d.t[i];
    const l = d.l;
    const two = after !== undefined;
    const p = popover();
    p.replaceChildren();
    p.classList.toggle('pg-tokpop-two', two);
    p.classList.toggle('pg-tokpop-branch', d.turn !== null && d.turn !== undefined && alts.length > 0);
    const head = el('div', 'pg-tokpop-head');
    head.append(code(token), el('b', 'pg-tokpop-p', pct(lp) + (two && alp !== null ? ' → ' + pct(alp) : '')));
    const where = alts.length ? (rank ? fill(l.rank, {r: rank}) : l.notin) : l.noalts;
    const sub = el('div', 'pg-tokpop-sub',
      [fill(l.token, {i: i + 1}), 'logprob ' + lp.toFixed(3), where].join(' · '));
    p.append(head, sub);
    const q = d.q && d.q[i];  // the quality meter's: [KL, top-1 differs, reference's top-1, reference's logprob]
    if (q) {
      p.append(el('div', 'pg-tokpop-q', fill(l.q, {p: pct(q[3]), kl: q[0] < 1e-3 ? q[0].toExponential(1) : q[0].toPrecision(2)})));
      p.append(el('div', 'pg-tokpop-q' + (q[1] ? ' pg-tokpop-differs' : ''),
        q[1] ? fill(l.differs, {tok: JSON.stringify(q[2])}) : l.same));
    }
    if (!two) {
      if (alts.length) p.append(modelList(d, i));
      return;
    }
    const column = (cls, title, body) => {
      const c = el('div', 'pg-tokpop-col ' + cls);
      c.append(el('div', 'pg-tokpop-colhead', title), body);
      return c;
    };
    const cols = el('div', 'pg-tokpop-cols');
    cols.append(column('pg-col-model', l.model, alts.length ? modelList(d, i) : el('div', 'pg-alt-gap', l.noalts)),
                column('pg-col-after', l.after, afterList(d, i)));
    p.append(cols, el('div', 'pg-tokpop-how', l.how));
  }

  function place() {
    if (!anchor || !pop || pop.hidden) return;
    if (!anchor.isConnected) { close(); return; }
    const r = anchor.getBoundingClientRect();
    const w = pop.offsetWidth, h = pop.offsetHeight, vw = document.documentElement.clientWidth;
    let x = Math.min(Math.max(8, r.left), vw - w - 8);
    let y = r.bottom + 6;
    if (y + h > window.innerHeight - 8 && r.top - h - 6 > 8) y = r.top - h - 6;
    pop.style.left = Math.max(8, x) + window.scrollX + 'px';
    pop.style.top = y + window.scrollY + 'px';
  }

  function open(tok) {
    const box = tok.closest('.pg-heatmap');
    const d = box && data(box);
    const i = d ? tokens(box).indexOf(tok) : -1;
    if (!d || i < 0 || !d.t[i]) return;
    close();
    tok.dataset.i = String(i);
    render(d, i);
    anchor = tok;
    tok.classList.add('pg-tok-open');
    tok.setAttribute('aria-describedby', 'pg-tokpop');
    pop.hidden = false;
    gone.observe(document.body, {childList: true, subtree: true});
    place();
  }

  function close() {
    if (anchor) {
      anchor.classList.remove('pg-tok-open');
      anchor.removeAttribute('aria-describedby');
    }
    anchor = null;
    gone.disconnect();
    if (pop) pop.hidden = true;
  }

  function focus(tok) {
    if (!tok) return;
    tok.tabIndex = -1;
    tok.focus();
    open(tok);
  }

  // The native tooltip (the Stats panel's fallback) would pop up over the popover: take it off on the way in.
  const untitle = (ev) => {
    const tok = ev.target instanceof Element && ev.target.closest('.pg-heatmap .pg-tok[title]');
    if (tok) { tok.dataset.tip = tok.title; tok.removeAttribute('title'); }
  };
  document.addEventListener('pointerover', untitle, true);
  document.addEventListener('focusin', untitle, true);

  document.addEventListener('click', (ev) => {
    const t = ev.target instanceof Element ? ev.target : null;
    if (!t || (pop && pop.contains(t))) return;
    const tok = t.closest('.pg-heatmap .pg-tok');
    if (tok) {
      ev.preventDefault();
      ev.stopPropagation();  // not a click on the chat message around it
      if (anchor === tok) close(); else open(tok);
      return;
    }
    close();
  }, true);

  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && anchor) {
      const a = anchor;
      close();
      if (a.isConnected) a.focus();
      ev.preventDefault();
      return;
    }
    const t = ev.target instanceof Element ? ev.target : null;
    if (!t) return;
    const box = t.classList.contains('pg-heatmap') ? t : t.classList.contains('pg-tok') ? t.closest('.pg-heatmap') : null;
    if (!box) return;
    const all = tokens(box);
    const at = all.indexOf(t);  // -1: the heatmap itself has the focus
    const go = {ArrowRight: at + 1, ArrowDown: at + 1, ArrowLeft: at - 1, ArrowUp: at - 1, Home: 0,
                End: all.length - 1}[ev.key];
    if (ev.key === 'Enter' || ev.key === ' ') {
      ev.preventDefault();
      if (at < 0) focus(all[0]); else if (anchor === t) close(); else open(t);
    } else if (go !== undefined && all.length) {
      ev.preventDefault();
      focus(all[Math.max(0, Math.min(all.length - 1, go))]);
    }
  }, true);

  window.addEventListener('scroll', place, true);
  window.addEventListener('resize', place);
  window.pgTokens = {open, close};
})();
