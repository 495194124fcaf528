"""What a browser is shown when a login is refused for now (see guards.LoginThrottle).

Gradio's login form posts with fetch and shows "Incorrect credentials" on a 400; on any
other answer it shows nothing. `WAIT_SCRIPT`, added to a page that shows that form,
says how long to wait when the answer is 429 (from its Retry-After) and counts down.
A form the browser posts itself (Accept: text/html) gets `wait_page`; a program, JSON.
"""

from __future__ import annotations

import html
import json
import re

__all__ = ["WAIT_SCRIPT", "refusal_body", "wait_message", "wait_page", "with_wait_script"]

# Gradio's page carries its config as JSON; a page that shows the login form says so.
_LOGIN_FORM_PAGE = re.compile(rb'"auth_required":\s*true')

WAIT_SCRIPT = """<script id="workbench-login-wait">(() => {
  const send = window.fetch.bind(window);
  let timer = null;
  function notice() {
    let p = document.getElementById("login-wait");
    if (!p) {
      p = document.createElement("p");
      p.id = "login-wait";
      p.setAttribute("role", "alert");
      p.style.cssText = "color:var(--error-text-color,#b00020);font-weight:600;margin:1rem 0";
      const panel = document.querySelector("input[type=password]")?.closest(".wrap");
      const heading = panel?.querySelector("h2");
      if (heading) heading.after(p); else document.body.prepend(p);
    }
    return p;
  }
  // Gradio's "Incorrect Credentials" is about an earlier attempt: hidden while the wait is shown.
  function showCredentialsNote(shown) {
    document.querySelectorAll("p.creds").forEach((p) => { p.style.display = shown ? "" : "none"; });
  }
  function countDown(seconds) {
    clearInterval(timer);
    showCredentialsNote(false);
    const until = Date.now() + seconds * 1000;
    const show = () => {
      const left = Math.ceil((until - Date.now()) / 1000);
      if (left > 0) {
        notice().textContent = "Too many wrong logins came from this address. The next login is checked in "
          + left + " s: wait, then log in again.";
      } else {
        clearInterval(timer);
        notice().textContent = "You can log in again now.";
      }
    };
    show();
    timer = setInterval(show, 250);
  }
  window.fetch = async (input, init) => {
    const response = await send(input, init);
    const url = input instanceof Request ? input.url : String(input);
    const method = (init?.method || (input instanceof Request ? input.method : "GET")).toUpperCase();
    if (method === "POST" && /\\/login\\/?$/.test(new URL(url, location.href).pathname)) {
      if (response.status === 429) {
        countDown(Number(response.headers.get("Retry-After")) || 1);
      } else {
        clearInterval(timer);
        document.getElementById("login-wait")?.remove();
        showCredentialsNote(true);
      }
    }
    return response;
  };
})();</script>"""

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Wait before logging in again</title>
<style>body{{font-family:system-ui,sans-serif;max-width:30rem;margin:4rem auto;padding:0 1rem}}
#login-wait{{color:#b00020;font-weight:600}}</style></head>
<body><h1>Too many wrong logins</h1><p id="login-wait">{message}</p>
<p>Go back to the login page and log in again once the wait is over.</p></body></html>"""


def wait_message(seconds: int) -> str:
    return f"Too many wrong logins came from this address. The next login is checked in {seconds} s."


def wait_page(seconds: int) -> str:
    """The whole page for a login form the browser posted itself."""
    return _PAGE.format(message=html.escape(wait_message(seconds)))


def refusal_body(seconds: int, accept: str) -> tuple[bytes, bytes]:
    """(body, content type) of a 429 for a login: a page for a browser, JSON for a program."""
    if "text/html" in accept:
        return wait_page(seconds).encode(), b"text/html; charset=utf-8"
    body = json.dumps({"detail": wait_message(seconds), "retry_after_s": seconds})
    return body.encode(), b"application/json"


def with_wait_script(page: bytes) -> bytes | None:
    """`page` with WAIT_SCRIPT added, if it is a page that shows Gradio's login form; else None."""
    if not _LOGIN_FORM_PAGE.search(page):
        return None
    head_end = page.find(b"</head>")
    if head_end < 0:
        return None
    return page[:head_end] + WAIT_SCRIPT.encode() + page[head_end:]
