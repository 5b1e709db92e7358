"""The whole page in Chinese for a Chinese browser: every visible string of every tab and accordion, after one
reply, is checked for English that has no Chinese entry.

What may stay English is the allow-list below, each entry with its reason: the API's own names and values (a
request is the same in both languages), units, the model's name and the names of products. The model's reply
text, what the user typed, the Request tab's code (JSON, curl and Python source) and Gradio's footer are not
the page's wording and are left out of the scan.
"""

from __future__ import annotations

import re
from typing import Any

import playground.page.ui  # noqa: F401  (it imports every module, and each registers its labels)
from playground.page.i18n import LABELS  # the labels; tests/playground/test_i18n.py checks each has its Chinese
from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, set_number, shot

LAYER = "browser"  # what this module's own fixtures or bodies need (tests/conftest.py)

pytestmark = NEEDS_CHROMIUM

# Words that stay as they are in the Chinese page, each group with why. Matching is per word, case-sensitive.
ALLOWED_GROUPS = (
    # A request is not translated: its fields and values are spelled as the API spells them (spec §2.2).
    (
        "temperature top_p top_k min_p presence_penalty frequency_penalty repetition_penalty seed max_tokens stop "
        "stop_token_ids include_stop_str_in_output ignore_eos skip_special_tokens n best_of use_beam_search logprobs "
        "top_logprobs response_format json_schema json_object text chat_template_kwargs enable_thinking "
        "thinking_budget chat_template_kwargs.enable_thinking chat_template_kwargs.thinking_budget max_n tool_choice "
        "tools auto none required length tool_calls stream name schema string "
        "integer number boolean array object null true false logit_bias structured_outputs",
        "an API field name or value",
    ),
    ("get_weather get_time", "an example tool's name, as its JSON definition spells it"),
    ("k max", "mathematical notation in a field's help: top_k's k, max(n, best_of)"),
    ("ms s tok MiB GB", "a unit"),
    (
        "JSON CSV JSONL curl Python openai API URL HTTP POST base64 data input_audio file Lark GBNF",
        "a format, protocol, method, grammar notation or tool, spelled as it is (a data URL, a file:// path)",
    ),
    ("token id", "a token and its id: Chinese LLM documentation keeps both words"),
    ("TTFT", "time to first token, the abbreviation the statistics' Chinese name spells out"),
    ("KV", "the key/value cache, as Chinese inference documentation writes it (KV 缓存)"),
    ("SmolLM2-135M-Instruct cpu cuda float32 bfloat16 fp32", "the model's name, its device and dtype"),
    ("LLM Playground", "the product's name"),
    ("MindIE vLLM vLLM-Ascend OpenAI Whisper Qwen2-VL Gradio", "another product's name"),
    ("Enter Shift", "a key's name, as printed on the keyboard"),
    ("A B", "the two sides of an A/B comparison"),
    ("v1 chat completions http https host cat.png clip.mp4 mp4 avi wmv png", "a URL, its parts, or a file type"),
)
ALLOWED = {word for words, _ in ALLOWED_GROUPS for word in words.split()}
# Gradio 6.31's own strings that its zh-CN catalogue lacks (hard-coded in its frontend, or a missing key): the
# copy and download buttons' tooltips, and the status line a screen reader hears when an event completes.
GRADIO_OWN = {"Copy", "Download", "Copy conversation", "Copy message", "common.complete"}

# Parts of the page that are not the page's own wording: the model's reply and what the user typed (chat
# bubbles), source code (the Request tab's JSON, curl and Python; the tools editor), and Gradio's footer.
# The System prompt box's placeholder quotes the model's chat template (its own default system prompt) as it is.
SKIPPED = [
    "#pg-chat .message-row .bot .message-content .prose",
    "#pg-chat [data-testid='user']",
    ".cm-editor",
    "#pg-system",
    "footer",
    ".code-wrap",
    "pre",
    "code",
]

VISIBLE_TEXT_JS = """(skipped) => {
  const out = [];
  const skip = el => skipped.some(s => el.closest(s));
  const where = el => {  // the nearest of the page's own ids (pg-...) or classes, to say where a string is
    for (let a = el; a; a = a.parentElement) {
      if (a.id && a.id.startsWith('pg-')) return '#' + a.id;
      const c = [...a.classList].find(c => c.startsWith('pg-'));
      if (c) return '.' + c;
    }
    return el.tagName.toLowerCase() + '.' + [...el.classList].join('.');
  };
  const shown = el => el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  const walker = document.createTreeWalker(document.querySelector('gradio-app'), NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || !n.textContent.trim() || ['SCRIPT', 'STYLE'].includes(el.tagName) || skip(el) || !shown(el)) continue;
    out.push([where(el), n.textContent]);
  }
  for (const el of document.querySelectorAll('gradio-app [title], gradio-app [placeholder]')) {
    if (skip(el) || !shown(el)) continue;
    for (const a of ['title', 'placeholder']) {
      if (el.getAttribute(a)) out.push([where(el) + ' @' + a, el.getAttribute(a)]);
    }
  }
  return out;
}"""

RUN = re.compile(r"(?<![0-9A-Za-z_])[A-Za-z][A-Za-z0-9_.,'’\-/:()\s]*")  # not the e of 1e-6
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*[A-Za-z0-9]|[A-Za-z0-9]")


def english_runs(text: str) -> list[str]:
    """The runs of English words in `text` that have a word outside ALLOWED (the run is reported whole)."""
    if text.strip() in GRADIO_OWN:
        return []
    bad = []
    for run in RUN.findall(text):
        words = [w for w in WORD.findall(run) if re.search("[A-Za-z]", w)]
        if any(w not in ALLOWED for w in words):
            bad.append(" ".join(run.split()))
    return bad


def open_accordions(page: Any, scope: str) -> None:
    """Open every closed accordion shown in `scope`, one at a time (opening one re-renders its neighbours)."""
    closed = page.locator(f"{scope} .label-wrap:not(.open):visible")
    for _ in range(20):
        if closed.count() == 0:
            return
        closed.first.click()
        page.wait_for_timeout(200)
    raise AssertionError(f"accordions in {scope} would not open")


def test_english_runs_are_found_and_the_allowed_words_pass() -> None:
    assert english_runs("温度 temperature · 最大 max_tokens 32 ms") == []
    assert english_runs("完成原因 finish reason") == ["finish reason"]
    assert english_runs("⚠️ Not connected: 请输入") == ["Not connected:"]
    assert english_runs("模型 SmolLM2-135M-Instruct · cpu · float32") == []
    assert english_runs("范围 (1e-6, 1]；http://host:8000/v1") == []
    assert english_runs("Copy") == [] and english_runs("Copy all") == ["Copy all"]


def test_every_visible_string_of_the_page_is_chinese(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, locale="zh-CN")
    context = page.context

    names = ("stats", "sampling", "tools", "ab", "backend", "server", "request", "prompt")  # every tab, in order
    tabs = [LABELS[f"tab_{k}"][1] for k in names]
    open_tab(page, tabs[1])
    page.locator("#pg-preset label").first.click()  # the first preset: greedy
    set_number(page, "max_tokens", 8)
    open_tab(page, tabs[0])
    page.wait_for_timeout(500)
    page.fill("#pg-input textarea", "Hi")
    page.click("#pg-send")
    page.wait_for_function(
        """() => { const e = document.querySelector("#pg-stats td[data-stat='finish reason']");
      return e && ['length', 'stop'].includes(e.textContent.trim()); }""",
        timeout=120_000,
    )

    found: dict[str, set[str]] = {}

    def scan() -> None:
        for where, text in page.evaluate(VISIBLE_TEXT_JS, SKIPPED):
            for run in english_runs(text):
                found.setdefault(run, set()).add(where)

    open_accordions(page, "#pg-main")
    scan()
    for i, name in enumerate(tabs):
        open_tab(page, name)
        page.wait_for_timeout(300)
        open_accordions(page, "#pg-side")
        scan()
        shot(page, f"i18n-{i + 1}-{names[i]}")
    context.close()
    report = "\n".join(f"  {run!r}  (in {', '.join(sorted(where))})" for run, where in sorted(found.items()))
    assert not found, f"{len(found)} English strings have no Chinese entry:\n{report}"
