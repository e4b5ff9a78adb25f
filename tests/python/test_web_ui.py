"""The web UI (web/, docs/web-ui.md) in a real browser: headless Chromium
(Debian's ``chromium``) driven through the DevTools protocol loads the pages a
real collector serves on --http-listen, and the test checks that they load
without console errors or exceptions, list the test's trials, draw the charts
(Chart.js charts and their datasets counted, points compared with what the
test pushed), update live when the test completes a new step, creates a trial
(shown on the trials page within a second) and when a rule reports, draw a
selection box while the mouse drags across a curve and then fetch the selected
steps, compare two trials on one plot, show a trial's collections with their
configuration, and ask for a token (showing no trial) when the collector runs
with --auth-tokens.

Skips with a printed reason without chromium or python3-websocket. Every wait
is bounded; the browser and collectors are stopped at teardown.
"""

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from tensorkeep import Writer

websocket = pytest.importorskip("websocket", reason="python3-websocket (Debian) is not installed")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WAIT = 20.0  # seconds any one page condition may take, at most
# What DevTools answers when an evaluation races a navigation: the old document went away under it.
NAVIGATING = ("Inspected target navigated or closed", "Execution context was destroyed",
              "Cannot find context with specified id")


class Navigating(AssertionError):
    """An evaluation was cut short because the page navigated; a wait tries again."""
STEPS = 10
FIRE_STEP = 6


class Page:
    """One browser tab over the DevTools protocol."""

    def __init__(self, ws_url: str):
        # No Origin header: Chromium refuses DevTools websockets from other origins.
        self.ws = websocket.create_connection(ws_url, timeout=WAIT, suppress_origin=True)
        self.next_id = 0
        self.errors = []
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Page.enable")

    def _event(self, msg) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p['args']]}")
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")

    def call(self, method: str, **params):
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mine:
                if "error" in msg:
                    text = f"{method}: {msg['error']}"
                    raise (Navigating if any(n in text for n in NAVIGATING) else AssertionError)(text)
                return msg.get("result", {})
            self._event(msg)
        raise AssertionError(f"no answer to {method} within {WAIT} s")

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            text = f"{expression}: {r['exceptionDetails']}"
            raise (Navigating if any(n in text for n in NAVIGATING) else AssertionError)(text)
        return r["result"].get("value")

    def goto(self, url: str) -> None:
        self.errors.clear()
        self.eval("window.tkOldPage = true")  # gone once the new document is there
        self.call("Page.navigate", url=url)
        self.loaded(url)

    def loaded(self, what: str) -> None:
        self.wait("!window.tkOldPage && document.readyState === 'complete' && "
                  "document.body.dataset.state !== undefined", f"{what} to load")

    def wait(self, expression: str, what: str):
        deadline = time.monotonic() + WAIT
        while True:
            try:
                value = self.eval(expression)
            except Navigating:  # the document changed under the evaluation: ask the new one
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                body = self.eval("document.body.innerText.slice(0, 2000)")
                raise AssertionError(f"waited {WAIT} s for {what} ({expression}); errors {self.errors}; page:\n{body}")
            time.sleep(0.05)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM:
        pytest.skip("chromium is not installed (apt-get install chromium: scripts/install-deps.sh)")
    profile = tmp_path_factory.mktemp("chromium")
    args = [CHROMIUM, "--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
            f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check", "--disable-gpu",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--disable-dev-shm-usage", "--window-size=1400,1000", "about:blank"]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root (containers)
    log = open(profile / "chromium.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"chromium did not start (exit {proc.poll()}): {(profile / 'chromium.log').read_text()[-1500:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = Page(next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page"))
        yield page
        page.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()




def _grad(layer: int, step: int) -> np.ndarray:
    rng = np.random.default_rng(100 * layer + step)
    return rng.normal(0, 10.0 ** -(layer + step / 5), 256).astype(np.float32)


def _write_step(writers, step: int) -> None:
    for w, writer in enumerate(writers):
        writer.write_tensor("loss", np.float32(1.0 / (1 + step) + w), step=step, collections=("losses",))
        for layer in range(2):
            writer.write_tensor(f"gradient/fc{layer}.weight", _grad(layer, step), step=step, collections=("gradients",))
        writer.end_step(step)
    for writer in writers:
        writer.flush()


def _trial(s, name, steps, workers=2):
    ws = [Writer(s.url(name), worker=f"worker_{w}", num_workers=workers) for w in range(workers)]
    for step in range(steps):
        _write_step(ws, step)
    return ws


def _charts(page, selector):
    """[(number of datasets, [points of each dataset])] of the Chart.js charts on canvases matching selector."""
    return page.eval(f"""[...document.querySelectorAll({json.dumps(selector)})].map(c => Chart.getChart(c))
        .filter(Boolean).map(ch => ch.data.datasets.map(d => d.data.length))""")


def _configure_collections(url):
    """Collections as a hook configures them (one configured but empty)."""
    from tensorkeep import ModeKeys, ReductionConfig, SaveConfig, SaveConfigMode, _collection_wire
    from tensorkeep.core.collection import Collection

    assert _collection_wire.put_collections(url, "worker_0", [
        Collection("gradients", include_regex=["^gradient"], save_config=SaveConfig(mode_save_configs={
            ModeKeys.TRAIN: SaveConfigMode(save_interval=10, end_step=100, save_steps=[3]),
            ModeKeys.EVAL: SaveConfigMode(save_interval=2)}),
            reduction_config=ReductionConfig(reductions=["max"], abs_norms=["l2"], save_raw_tensor=False)),
        Collection("biases", include_regex=["^(?!gradient).*bias"], save_config=SaveConfig(save_interval=4)),
    ])


def _check_collections_table(browser):
    """The trial page's Collections table: every collection (the configured
    empty one too) with its tensors, regexes, save intervals per mode,
    reductions and the workers that configured it."""
    browser.wait("document.querySelectorAll('#collections tr.collection').length === 3", "the collections table")
    rows = browser.eval("""Object.fromEntries([...document.querySelectorAll('#collections tr.collection')]
        .map(r => [r.dataset.name, [...r.cells].map(c => c.innerText)]))""")
    assert rows["gradients"] == ["gradients", "2", "^gradient",
                                 "TRAIN: every 10 from 0 to 100, and steps 3; EVAL: every 2 from 0",
                                 "max, abs l2 norm; raw tensor not saved", "worker_0"]
    assert rows["biases"] == ["biases", "0", "^(?!gradient).*bias", "every mode: every 4 from 0", "hook's default",
                              "worker_0"]
    assert rows["losses"] == ["losses", "1", "–", "–", "–", "not configured"]
    # The per-layer chart offers only collections with tensors.
    assert browser.eval("[...document.querySelector('select[name=collection]').options].map(o => o.value)") == [
        "gradients", "losses"]


def test_pages_draw_and_update_live(http_collector, browser):
    s = http_collector()
    live = _trial(s, "web-live", STEPS)
    _configure_collections(s.url("web-live"))
    done = _trial(s, "web-done", STEPS)
    for w in done:
        w.close(end_of_training=True)
    ui = f"http://{s.http_address}"

    # The trials, live.
    browser.goto(f"{ui}/")
    browser.wait("document.querySelectorAll('tr.trial').length === 2", "both trials listed")
    assert browser.eval("[...document.querySelectorAll('tr.trial')].map(r => r.dataset.trial)") == ["web-done", "web-live"]
    assert browser.eval("document.querySelector('tr[data-trial=web-live]').dataset.lastStep") == str(STEPS - 1)
    _write_step(live, STEPS)
    browser.wait(f"document.querySelector('tr[data-trial=web-live]').dataset.lastStep === '{STEPS}'",
                 "the trials page to show the new step")
    # A trial created after the page opened shows within a second (the trial
    # list's event stream, no re-listing): the page notes when its row appears.
    browser.eval("""(() => { window.tkNewAt = null; new MutationObserver((m, o) => {
        if (document.querySelector('tr[data-trial=web-new]')) { window.tkNewAt = Date.now(); o.disconnect(); }
      }).observe(document.body, {childList: true, subtree: true}); })()""")
    new = _trial(s, "web-new", 1, workers=1)
    acked_ms = time.time() * 1000
    shown_ms = browser.wait("window.tkNewAt", "the new trial's row")
    assert shown_ms - acked_ms < 1000, f"the new trial showed {shown_ms - acked_ms:.0f} ms after its write"
    assert browser.eval("[...document.querySelectorAll('tr.trial')].map(r => r.dataset.trial)") == [
        "web-done", "web-live", "web-new"]
    new[0].close(end_of_training=True)
    browser.wait("document.querySelector('tr[data-trial=web-new]').dataset.state === 'ENDED'", "the new trial's end")
    assert browser.errors == []

    # One trial: every chart drawn from the pushed data.
    browser.goto(f"{ui}/trial/web-live")
    browser.wait("Number(document.body.dataset.drawn) >= 1", "the trial's charts")
    assert _charts(browser, "#scalars") == [[STEPS + 1]]  # loss, first worker, every step
    assert _charts(browser, "#layers") == [[STEPS + 1, STEPS + 1]]  # mean |gradient| of both layers
    [bands] = _charts(browser, "canvas.bands")
    assert bands == [STEPS + 1] * 9  # TensorBoard's nine percentiles at every step
    assert len(_charts(browser, "canvas.ridges")) == 1
    [hist] = _charts(browser, "#histogram")
    assert hist == [40]
    assert browser.eval("Chart.getChart(document.querySelector('#layers')).options.scales.y.type") == "logarithmic"
    _check_collections_table(browser)
    # The loss curve's points are the values pushed (worker_0: 1 / (1 + step)).
    pts = browser.eval("Chart.getChart(document.querySelector('#scalars')).data.datasets[0].data.map(p => [p.x, p.y])")
    assert [p[0] for p in pts] == list(range(STEPS + 1))
    np.testing.assert_allclose([p[1] for p in pts], [1.0 / (1 + k) for k in range(STEPS + 1)], rtol=1e-6)
    # The slider's histogram counts every element of the step shown.
    assert browser.eval("Chart.getChart(document.querySelector('#histogram')).data.datasets[0].data"
                        ".reduce((a, p) => a + p.y, 0)") == 256

    # Live: a new step redraws the curves; a rule firing shows at once, with its step.
    _write_step(live, STEPS + 1)
    browser.wait(f"document.querySelector('#trial-steps').dataset.lastStep === '{STEPS + 1}'", "the new step")
    browser.wait(f"Chart.getChart(document.querySelector('#scalars')).data.datasets[0].data.length === {STEPS + 2}",
                 "the loss curve to grow by the new step")
    from tensorkeep.trials import create_trial

    t = create_trial(s.url("web-live"))
    t.report_rule_status("VanishingGradient", "IssuesFound", step=FIRE_STEP, message="gradients vanish", action="stop")
    fired = browser.wait("[...document.querySelectorAll('tr.rule')].map(r => r.innerText).join('|')", "the rule's row")
    assert "VanishingGradient" in fired and f"fired at step {FIRE_STEP}" in fired
    browser.wait("document.querySelector('#stop') !== null", "the stop request")
    # Every worker: one curve per worker.
    browser.eval("(() => { const s = document.querySelector('select[name=worker]'); s.value = '*';"
                 " s.dispatchEvent(new Event('change')); })()")
    browser.wait("Chart.getChart(document.querySelector('#scalars')).data.datasets.length === 2", "a curve per worker")
    assert browser.errors == []

    # Drag to zoom: real mouse events on the loss chart draw a selection box
    # while dragging; releasing asks the collector for the selected steps.
    browser.eval("""(() => { window.tkFetched = []; const f = window.fetch;
        window.fetch = (u, o) => { window.tkFetched.push(String(u)); return f(u, o); }; })()""")
    box = browser.eval("""(() => { const c = document.querySelector('#scalars'); c.scrollIntoView({block: 'center'});
        const r = c.getBoundingClientRect(), a = Chart.getChart(c).chartArea;
        return {left: r.left, top: r.top, x1: Math.round(r.left + a.left + 0.3 * (a.right - a.left)),
                x2: Math.round(r.left + a.left + 0.7 * (a.right - a.left)), y: Math.round(r.top + (a.top + a.bottom) / 2)}; })()""")
    expect = browser.eval(f"""(() => {{ const x = Chart.getChart(document.querySelector('#scalars')).scales.x;
        return [Math.max(0, Math.floor(x.getValueForPixel({box['x1']} - {box['left']}))),
                Math.ceil(x.getValueForPixel({box['x2']} - {box['left']})) + 1]; }})()""")
    assert 0 < expect[0] < expect[1] <= STEPS + 2, expect

    def mouse(kind, x, buttons):
        browser.call("Input.dispatchMouseEvent", type=kind, x=x, y=box["y"], button="left", buttons=buttons,
                     clickCount=1 if kind != "mouseMoved" else 0)

    mouse("mousePressed", box["x1"], 1)
    for x in np.linspace(box["x1"], box["x2"], 5)[1:]:
        mouse("mouseMoved", int(x), 1)
    drawn = browser.eval("""(() => { const b = document.querySelector('.zoom-box'); if (!b) return null;
        const r = b.getBoundingClientRect();
        return {w: r.width, h: r.height, visible: getComputedStyle(b).display !== 'none',
                from: Number(b.dataset.from), to: Number(b.dataset.to)}; })()""")
    assert drawn and drawn["visible"] and drawn["h"] > 50, drawn
    assert abs(drawn["w"] - (box["x2"] - box["x1"])) <= 2, drawn
    assert abs(drawn["from"] - expect[0]) <= 1 and abs(drawn["to"] - expect[1]) <= 1, (drawn, expect)
    mouse("mouseReleased", box["x2"], 0)
    assert browser.eval("document.querySelector('.zoom-box')") is None  # gone once released
    asked = browser.wait("""window.tkFetched.map(u => new URL(u, location.origin))
        .filter(u => u.pathname.endsWith('/scalars') && u.searchParams.has('from'))
        .map(u => [Number(u.searchParams.get('from')), Number(u.searchParams.get('to'))])[0]""", "the zoomed request")
    assert asked == [drawn["from"], drawn["to"]], (asked, drawn)
    browser.wait(f"Chart.getChart(document.querySelector('#scalars')).data.datasets[0].data.length === {asked[1] - asked[0]}",
                 "the loss curve at full resolution over the selected steps")
    assert browser.eval("document.querySelector('input[name=from]').value") == str(asked[0])
    assert browser.errors == []

    # Compare: both trials on each plot.
    browser.goto(f"{ui}/compare?trials=web-live,web-done")
    browser.wait("document.body.dataset.state === 'ready'", "the compare page")
    compared = _charts(browser, "canvas.compare")
    assert compared == [[STEPS + 2, STEPS], [STEPS + 2, STEPS]], compared
    assert browser.errors == []

    # A page that cannot be shown says why, without a console error of its own.
    browser.goto(f"{ui}/trial/no-such-trial")
    assert "not found" in browser.wait("document.body.dataset.state === 'error' && "
                                       "document.querySelector('#page-error').innerText", "the error")
    for w in live:
        w.close(end_of_training=True)


READ = "tk_web_read_token_0123456789"
WRITE = "tk_web_write_token_0123456789"


def test_tokens(http_collector, browser, tmp_path):
    import tensorkeep

    tokens = tmp_path / "tokens"
    line = lambda tok, rest: f"sha256:{hashlib.sha256(tok.encode()).hexdigest()} {rest}\n"
    tokens.write_text(line(READ, "read reader") + line(WRITE, "write writer"))
    s = http_collector("--auth-tokens", str(tokens))
    tensorkeep.set_credentials(token=WRITE)
    try:
        w = Writer(s.url("web-secret"), retry_timeout=10)
        w.write_tensor("loss", np.float32(1), step=0)
        w.close(end_of_training=True)
    finally:
        tensorkeep.set_credentials()
    ui = f"http://{s.http_address}"
    browser.goto(f"{ui}/")
    browser.wait("document.body.dataset.state === 'token'", "the token form")
    assert browser.eval("document.querySelectorAll('tr.trial').length") == 0
    assert "web-secret" not in browser.eval("document.body.innerText")
    assert browser.eval("fetch('/api/v1/trials').then(r => r.status)") == 401
    # The 401s the page got are its only errors.
    assert browser.errors and all("401" in e for e in browser.errors), browser.errors
    # A wrong token is refused and asked for again; the right one shows the trial.
    for token, state in (("wrong-token", "token"), (READ, "ready")):
        browser.errors.clear()
        browser.eval(f"""(() => {{ window.tkOldPage = true; const f = document.querySelector('form#token');
            f.elements.token.value = {json.dumps(token)}; f.requestSubmit(); }})()""")
        browser.loaded(f"the page after token {token}")
        browser.wait(f"document.body.dataset.state === '{state}'", f"state {state} after token {token}")
        if state == "token":
            assert "refused" in browser.eval("document.querySelector('#token-error').innerText")
    assert browser.eval("[...document.querySelectorAll('tr.trial')].map(r => r.dataset.trial)") == ["web-secret"]
    assert browser.errors == []
    browser.eval("sessionStorage.clear()")


def test_assets_served_without_a_token(http_collector, tmp_path):
    """The files hold no data: served without a token even with tokens on, with
    a Content-Security-Policy; the data still needs one. Needs no browser."""
    import urllib.error

    tokens = tmp_path / "tokens"
    tokens.write_text(f"sha256:{hashlib.sha256(READ.encode()).hexdigest()} read reader\n")
    s = http_collector("--auth-tokens", str(tokens))

    def get(path):
        try:
            with urllib.request.urlopen(f"http://{s.http_address}{path}", timeout=30) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    chartjs = "/usr/share/javascript/chart.js/chart.min.js"
    for path, ctype, needle in [("/", "text/html", b"/ui/app.js"), ("/trial/x", "text/html", b"/ui/app.js"),
                                ("/compare", "text/html", b"/ui/app.js"), ("/ui/app.js", "text/javascript", b"/api/v1/events"),
                                ("/ui/charts.js", "text/javascript", b"tkCharts"), ("/ui/app.css", "text/css", b"body"),
                                ("/ui/chart.min.js", "text/javascript", b"Chart")]:
        status, headers, body = get(path)
        assert status == 200 and headers["Content-Type"].startswith(ctype), (path, status, headers)
        assert needle in body and "script-src 'self'" in headers["Content-Security-Policy"], path
    if os.path.exists(chartjs):  # embedded byte for byte
        with open(chartjs, "rb") as f:
            assert get("/ui/chart.min.js")[2] == f.read()
    for path in ("/ui/nope.js", "/ui/", "/trial/a/b"):
        status, headers, body = get(path)
        assert status == 404 and json.loads(body)["error"]["code"] == "NOT_FOUND", path
    assert get("/api/v1/trials")[0] == 401

