"""The Insights page (`/` of `run.py --mode=serve`) in a real browser: headless Chromium
(Debian's chromium and chromium-driver) driven by selenium against the server on the
session's tiny trained run."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from tests.conftest import require_extra
from tests.server_helpers import ServerProcess, request

webdriver = require_extra("selenium.webdriver", "test")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    if os.environ.get("T2T_LITE_REQUIRE_SHARED") or os.environ.get("CI"):
        raise RuntimeError("chromium and chromium-driver are missing; .ci/run installs them")
    pytest.skip("chromium / chromedriver are not installed (apt-get install chromium "
                "chromium-driver)", allow_module_level=True)

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SENTENCE = "0 1 1 0 1"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def page(tiny_run_trained, tmp_path_factory):
    """(server url, a headless Chromium on its page)."""
    work = tmp_path_factory.mktemp("page")
    process = ServerProcess(tiny_run_trained, cwd=work)
    profile = tempfile.mkdtemp(dir=work)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1200,1000",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = None
    try:
        process.wait_ready()
        driver = webdriver.Chrome(options=options,
                                  service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
        driver.get(process.url + "/")
        WebDriverWait(driver, 60).until(
            lambda d: "t2t_lite" in d.find_element(By.ID, "model").text)
        yield process.url, driver
    finally:
        if driver is not None:
            driver.quit()
        process.stop()


def _translate(driver, text: str, n_best: str = "1", beam_size: str | None = None) -> None:
    source = driver.find_element(By.ID, "source")
    source.clear()
    source.send_keys(text)
    n_best_box = driver.find_element(By.ID, "n_best")
    n_best_box.clear()
    n_best_box.send_keys(n_best)
    if beam_size is not None:
        beam_box = driver.find_element(By.ID, "beam_size")
        beam_box.clear()
        beam_box.send_keys(beam_size)
    driver.find_element(By.ID, "translate").click()


def test_translation_and_attention_heatmap_in_the_page(page, tmp_path):
    url, driver = page
    assert "algorithmic_reverse_binary40_test" in driver.find_element(By.ID, "model").text
    _translate(driver, SENTENCE)
    wait = WebDriverWait(driver, 120)
    wait.until(lambda d: d.find_element(By.ID, "heatmap").get_attribute("data-drawn"))
    _, expected, _ = request(url + "/v1/translate", {
        "inputs": [SENTENCE], "beam_size": 1, "alpha": 0.6, "n_best": 1,
        "return_attention": True})
    assert driver.find_element(By.ID, "output-0").text == expected["outputs"][0]
    attention = expected["attention"][0]
    assert attention["source_pieces"] == SENTENCE.split() + ["<EOS>"]
    drawn = driver.find_element(By.ID, "heatmap").get_attribute("data-drawn")
    assert drawn == f"{len(attention['target_pieces'])}x{len(attention['source_pieces'])}"
    # One layer, two heads in the selectors; the heatmap has coloured cells.
    assert len(driver.find_elements(By.CSS_SELECTOR, "#layer option")) == 1
    assert len(driver.find_elements(By.CSS_SELECTOR, "#head option")) == 2
    coloured = driver.execute_script("""
        const c = document.getElementById('heatmap');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i + 2] === 255 && d[i] < 250) n++;
        return n;""")
    assert coloured > 100
    # The colour legend beside the map: darkest (weight 1) at its top, white (0) at its
    # bottom, right of the last column.
    legend = driver.execute_script("""
        const c = document.getElementById('heatmap');
        const [x, y, w, h] = c.dataset.legend.split(',').map(Number);
        const px = (a, b) => Array.from(c.getContext('2d').getImageData(a, b, 1, 1).data);
        return {x: x, top: px(x + w / 2, y + 1), bottom: px(x + w / 2, y + h - 2),
                cells: c.width};""")
    assert legend["top"][:3] == [0, 0, 255] or max(legend["top"][:2]) < 12
    assert min(legend["bottom"][:3]) > 240
    assert legend["x"] < legend["cells"]
    assert driver.find_element(By.ID, "error").get_attribute("hidden") is not None
    screenshot = tmp_path / "insights.png"
    assert driver.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000


def test_api_errors_are_shown_in_the_page(page):
    _, driver = page
    _translate(driver, SENTENCE, n_best="3")
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert driver.find_element(By.ID, "error").text == (
        "Error 422: n_best=3: must be between 1 and beam_size=1 (and at most 16, "
        "--serve_max_n_best)")
    _translate(driver, "0 2")
    wait.until(lambda d: "not a token id" in d.find_element(By.ID, "error").text
               or "outside" in d.find_element(By.ID, "error").text)
    assert driver.find_element(By.ID, "error").text.startswith("Error 422: inputs[0]:")


def test_pieces_are_shown_as_the_words_they_form(page):
    """The page's labels: subwords without their `_`, escapes undone, SentencePiece's `▁`
    gone, the pieces of one word joined by `·`, reserved names as they are."""
    _, driver = page
    shown = driver.execute_script("""return [
        readablePieces(['That_', 'Ver', 'stand_', '._', '<EOS>_']),
        readablePieces(['\u2581The', '\u2581deb', 'ate', '\u2581is', '.', '</s>']),
        readablePieces(['a\\\\ub_', 'x\\\\228;y_', '<EOS>']),
        readablePieces(['0', '1', '<EOS>'])];""")
    assert [case["labels"] for case in shown] == [
        ["That", "Ver·", "·stand", ".", "<EOS>"],
        ["The", "deb·", "·ate", "is·", "·.", "</s>"],
        ["a_b", "xäy", "<EOS>"],
        ["0", "1", "<EOS>"]]
    assert shown[0]["wordStarts"] == [True, True, False, True, True]


def test_the_n_best_list_does_not_repeat_the_best_line(page):
    url, driver = page
    _translate(driver, SENTENCE, n_best="2", beam_size="2")
    wait = WebDriverWait(driver, 120)
    wait.until(lambda d: d.find_elements(By.ID, "nbest-0"))
    _, expected, _ = request(url + "/v1/translate", {
        "inputs": [SENTENCE], "beam_size": 2, "alpha": 0.6, "n_best": 2})
    best, second = expected["n_best"][0]
    assert driver.find_element(By.ID, "output-0").text == best["output"] == expected["outputs"][0]
    entries = driver.find_elements(By.CSS_SELECTOR, "#nbest-0 li")
    assert len(entries) == 1 and entries[0].text.startswith(second["output"] + " ")
    assert driver.find_element(By.ID, "nbest-0").get_attribute("start") == "2"
