"""`moe-harness view`: the page of a bundled real run, loaded in a real browser (headless Chromium,
tests/browser.py): no console error, no request leaving the page's folder, the charts holding as many
bars, lanes, kernels and cells as the run has, and a screenshot kept in tests/artefacts/.

Two page loads: the bundled run directory with the shared experts on a side stream (compared with
the other run of its deployment), and the two-rank expert-parallel H200 trace of the accuracy
corpus, whose dispatch and combine have a straggler (TP1-EP1 arrives last at every one)."""
from __future__ import annotations

import csv
import re
import shutil
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from analysis.pipeline import AnalysisOptions, analyze, load_column, load_trace

from analysis.tables.kernel_table import read_kernel_rows
from analysis.report.page.layer_bars import layer_bars
from analysis.report.page.step_timeline import pick_step
from analysis.tables.comm_table import used_steps
from analysis.tables.d4 import table_rows
from browser import Browser, missing_chromium
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
RAY_RUNS = ROOT / "tests/data/sglang-real/ray-run"
FULL = RAY_RUNS / "sglang_dsv3_4l_1gpu_full-20261124-214640"
OTHER = RAY_RUNS / "sglang_dsv3_4l_1gpu-20261124-204402"
EP_TRACES = sorted((ROOT / "tests/data/accuracy/h200x2").glob("dsv3ep-h200x2-e64k8-bs32-eager-TP-*.trace.json.gz"))
ARTEFACTS = ROOT / "tests/artefacts"  # kept after the run (.gitignore covers it)
STEP = 2  # the timeline's step on the bundled run, asked for so the test counts its kernels independently


@pytest.fixture(scope="module")
def full_view(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("view-full") / "view"
    assert main(["view", str(FULL), str(OTHER), "--out", str(out), "--step", str(STEP)]) == 0
    return out


@pytest.fixture(scope="module")
def ep_view(tmp_path_factory) -> tuple[Path, Path]:
    analysis = tmp_path_factory.mktemp("ep") / "analysis"
    assert main(["analyze", *map(str, EP_TRACES), "--name", "h200x2-ep", "--out", str(analysis)]) == 0
    (analysis / "view").mkdir()  # an empty folder to write into (default --out: ANALYSIS/view)
    assert main(["view", str(analysis)]) == 0
    return analysis, analysis / "view"


@pytest.fixture(scope="module")
def browser():
    why = missing_chromium()
    if why:
        pytest.fail(why)
    with Browser() as b:
        yield b


def _count(browser: Browser, selector: str) -> int:
    return browser.evaluate(f"document.querySelectorAll({selector!r}).length")


def _keep_screenshot(png: bytes, name: str) -> None:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    ARTEFACTS.mkdir(exist_ok=True)
    (ARTEFACTS / name).write_bytes(png)


def _links(view: Path) -> list[str]:
    return re.findall(r'<a href="([^"]+)" class="file-link"', (view / "view.html").read_text(encoding="utf-8"))


def test_the_page_is_one_self_contained_file(full_view, ep_view):
    text = (full_view / "view.html").read_text(encoding="utf-8")
    assert "<script" not in text and not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    assert re.findall(r"url\(", text) == []  # no stylesheet fetches either
    links = _links(full_view)
    assert {Path(link).name for link in links} >= {"d4.csv", "steps.csv", "checks.csv", "kernels_long.parquet"}
    for view in (full_view, ep_view[1]):  # a new folder, and an empty one that existed
        for link in _links(view):  # every link resolves from where the page is
            assert (view / unquote(link)).is_file(), link


def test_view_writes_the_annotated_trace_beside_the_page(full_view):
    annotated = sorted(full_view.glob("annotated-*.trace.json.gz"))
    assert len(annotated) == 1 and annotated[0].name.endswith("-TP-0-DECODE.trace.json.gz")
    original = load_trace(str(next((FULL / "traces").glob("*.trace.json.gz"))))
    again = load_trace(str(annotated[0]))
    assert again.kernels == original.kernels and len(again.gpu_annotations) > len(original.gpu_annotations)
    # derived from the trace: the page links it
    assert len(read_kernel_rows(full_view / "kernels_long.parquet")) == 1074


def test_the_bundled_run_in_a_real_browser(full_view, browser):
    page = browser.load((full_view / "view.html").as_uri())
    assert page.console_errors == []
    assert {urlparse(u).scheme for u in page.requests} <= {"file", "data"}
    _keep_screenshot(page.screenshot_png, "view-sglang-ray-run.png")

    # what the page should hold, from the analysis itself
    analysis = analyze([str(p) for p in sorted((FULL / "traces").glob("*.trace.json.gz"))],
                       options=AnalysisOptions(run=FULL.name, jobs=1))
    step_kernels = [r for r in analysis.kernel_rows if (r.rank, r.step) == ("TP0", STEP)]
    assert _count(browser, "svg.layer-bars g.layer-bar") == 4
    assert _count(browser, "g.layer-bar[data-kind=dense]") == 1 and _count(browser, "g.layer-bar[data-kind=moe]") == 3
    for layer in (0, 1):  # a bar's height: the layer's busy time per step, mean over the steps
        per_step = Counter()
        for r in analysis.kernel_rows:
            if r.section == "layer" and r.layer == layer:
                per_step[r.step] += r.busy_us
        shown = browser.evaluate(f"+document.querySelector('g.layer-bar[data-layer=\"{layer}\"]').dataset.totalUs")
        assert shown == pytest.approx(sum(per_step.values()) / len(per_step), abs=1e-3)
    idle, end = 0, None  # stretches over 30 us when no stream runs a kernel: one mark each
    for r in sorted(step_kernels, key=lambda r: r.start_us):
        idle += end is not None and r.start_us - end > 30.0
        end = r.start_us + r.busy_us if end is None else max(end, r.start_us + r.busy_us)
    assert _count(browser, "svg.timeline") == 2  # to scale, then squeezed
    for view in ("svg.timeline.to-scale", "svg.timeline.squeezed"):
        assert _count(browser, f"{view} g.lane") == len({r.stream for r in step_kernels}) == 4
        assert idle > 5 and _count(browser, f"{view} g.idle-gap") == idle
        assert _count(browser, f"{view} rect.kernel") == len(step_kernels)
        assert browser.evaluate(f"[...document.querySelectorAll('{view} g.layer-border')].map(g => g.dataset.kind)"
                                ".join()") == "dense,moe,moe,moe"
    assert _count(browser, "rect.heat-cell") == 0 and _count(browser, ".no-comm") == 1  # one rank: no split
    assert _count(browser, "svg.expert-load g.load-bar") == 3
    columns = [load_column(FULL / "analysis"), load_column(OTHER / "analysis")]
    assert _count(browser, "table.d4.en tbody tr") == len(table_rows(columns)) - 1
    assert _count(browser, "table.changes.en tbody tr") == 1 + 52  # end-to-end + every row either run has (whole kernel names)
    assert _count(browser, "table.changes.en tr.within_noise") == 1 + 28
    # the shared experts (stream 142) drawn beside the MoE layer's routing and experts on stream 13
    beside = browser.evaluate("""(() => {
        const box = r => r.getBoundingClientRect();
        const view = 'svg.timeline.squeezed ';  // to scale, 1 px is 7 us: boxes touch what they do not overlap
        const shared = [...document.querySelectorAll(view + 'g.lane[data-stream="142"] rect.kernel[data-group="combine/share overlap"]')];
        const main = [...document.querySelectorAll(view + 'g.lane[data-stream="13"] rect.kernel')]
            .filter(r => ['gate', 'moe'].includes(r.dataset.group));
        return shared.filter(s => main.some(m => box(m).left < box(s).right && box(s).left < box(m).right)).length
            + '/' + shared.length; })()""")
    shared = sum(1 for r in step_kernels if r.stream == 142 and r.group == "combine/share overlap")
    assert shared == 15 and beside == f"{shared}/{shared}", beside  # 5 per MoE layer, each beside stream 13's MoE work
    # the charts are drawn, not empty boxes
    assert browser.evaluate("document.querySelector('svg.timeline').getBoundingClientRect().width") > 800
    # the language switch: Chinese shown, English hidden, by CSS alone
    browser.evaluate("document.getElementById('lang-zh').click()")
    shown = browser.evaluate("""['table.d4.en', 'table.d4.zh'].map(s =>
        getComputedStyle(document.querySelector(s)).display).join()""")
    assert shown == "none,table"
    assert browser.evaluate("document.querySelector('table.d4.zh th').textContent") == "层级"


def test_the_two_rank_run_shows_its_straggler_in_a_real_browser(ep_view, browser):
    analysis_dir, view = ep_view
    assert not list(view.glob("annotated-*"))  # an analysis folder has no traces to annotate
    page = browser.load((view / "view.html").as_uri())
    assert page.console_errors == []
    assert {urlparse(u).scheme for u in page.requests} <= {"file", "data"}
    _keep_screenshot(page.screenshot_png, "view-h200x2-ep.png")
    cells = browser.evaluate("""[...document.querySelectorAll('rect.heat-cell')].map(c =>
        [c.dataset.module, c.dataset.layer, c.dataset.rank, c.classList.contains('straggler')].join(':'))""")
    assert len(cells) == 2 * 3 * 2  # dispatch and combine x 3 MoE layers x 2 ranks
    stragglers = [c for c in cells if c.endswith(":true")]
    assert Counter(c.split(":")[2] for c in stragglers) == Counter({"TP1-EP1": 6})  # as the Stragglers table says
    assert "| 3 | dispatch | TP1-EP1 | 100% of 2 |" in (analysis_dir / "d4.md").read_text()
    waits = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('rect.heat-cell')].map(c =>
        [c.dataset.module + c.dataset.layer + c.dataset.rank, +c.dataset.waitUs]))""")
    assert waits["dispatch3TP1-EP1"] == 0 and waits["dispatch3TP0-EP0"] > 500  # the others wait for the straggler
    assert _count(browser, "svg.layer-bars g.layer-bar") == 4


def test_a_layer_bar_is_the_mean_over_the_used_steps_only():
    analysis = analyze([str(p) for p in sorted((FULL / "traces").glob("*.trace.json.gz"))], options=AnalysisOptions(jobs=1))
    bars = {b.layer: b for b in layer_bars(analysis.kernel_rows, {("TP0", 3)})}
    step3 = [r for r in analysis.kernel_rows if r.step == 3 and r.section == "layer"]
    for layer, bar in bars.items():
        assert bar.total_us == pytest.approx(sum(r.busy_us for r in step3 if r.layer == layer), abs=1e-9)
    assert [b.kind for b in bars.values()] == ["dense", "moe", "moe", "moe"]


def test_a_typical_step_is_drawn_unless_one_is_asked_for():
    analysis = analyze([str(p) for p in sorted((FULL / "traces").glob("*.trace.json.gz"))], options=AnalysisOptions(jobs=1))
    used = used_steps(analysis.step_rows, "decode", False)
    chosen = pick_step(analysis.step_rows, used)
    times = sorted(s.step_us for s in analysis.step_rows)
    assert chosen.step_us == times[(len(times) - 1) // 2]  # the median (the lower of the middle two)
    assert pick_step(analysis.step_rows, used, step=3).step == 3


@pytest.mark.parametrize("args, message", [
    (["--step", "99"], "--step 99: not a used step of rank TP0 (used: 0, 1, 2, 3, 4, 5)"),
    (["--rank", "TP7"], "--rank TP7: no such rank among TP0"),
])
def test_a_bad_step_or_rank_is_one_line_naming_the_choices(args, message, tmp_path, capsys):
    assert main(["view", str(FULL), "--out", str(tmp_path / "v"), *args]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"moe-harness view: {message}" and not (tmp_path / "v").exists()


def test_view_refuses_what_is_not_a_run_and_a_folder_it_did_not_write(tmp_path, capsys):
    assert main(["view", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"moe-harness view: {tmp_path}: neither an analysis folder (analysis.json "
                                               "inside) nor a run directory (analysis/analysis.json inside)")
    users = tmp_path / "mine"
    users.mkdir()
    (users / "notes.txt").write_text("keep me")
    assert main(["view", str(FULL), "--out", str(users)]) == 2
    assert "holds files that `view` did not write: notes.txt" in capsys.readouterr().err
    assert (users / "notes.txt").read_text() == "keep me" and sorted(p.name for p in users.iterdir()) == ["notes.txt"]


def test_a_run_whose_capture_folders_were_left_empty_is_analysed_without_them(tmp_path, capsys):
    """A run over two nodes keeps capture_traces/node0, node1; a bundled copy may leave them empty."""
    run = tmp_path / FULL.name
    shutil.copytree(FULL, run)
    for node in ("node0", "node1"):
        (run / "capture_traces" / node).mkdir(parents=True)
    assert main(["view", str(run), "--out", str(tmp_path / "v"), "--no-annotated-trace"]) == 0
    assert "note" not in capsys.readouterr().err
    assert (tmp_path / "v" / "kernels_long.parquet").is_file() and not list((tmp_path / "v").glob("annotated-*"))


def test_a_broken_saved_csv_is_one_line_naming_file_line_and_column(ep_view, tmp_path, capsys):
    analysis = tmp_path / "analysis"
    shutil.copytree(ep_view[0], analysis, ignore=shutil.ignore_patterns("view"))
    with open(analysis / "steps.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    rows[2][rows[0].index("step")] = "two"  # line 3 of the file
    with open(analysis / "steps.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    assert main(["view", str(analysis), "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"moe-harness view: {analysis / 'steps.csv'}: line 3: ") and "$.step" in err
    assert not (tmp_path / "v").exists()


def test_view_replaces_its_own_earlier_page_only_with_overwrite(ep_view, capsys):
    analysis, view = ep_view
    before = (view / "view.html").stat().st_mtime_ns
    assert main(["view", str(analysis)]) == 2
    assert "already holds `view` output that would be replaced: view.html" in capsys.readouterr().err
    assert (view / "view.html").stat().st_mtime_ns == before
    assert main(["view", str(analysis), "--overwrite", "--lang", "zh"]) == 0
    assert 'id="lang-zh" class="lang-radio" checked' in (view / "view.html").read_text(encoding="utf-8")


TWO_NODE = RAY_RUNS / "sglang_dsv3_4l_2x2_deepep-20261126-124934"


def test_the_two_node_deepep_run_in_a_real_browser(tmp_path, browser):
    """The real job across two Ray nodes (four ranks, DeepEP low-latency, CUDA graphs): the rank heat map
    has each MoE layer's dispatch and combine on every rank, and the step's timeline draws the shared
    expert on its own stream beside the routed experts' stream."""
    out = tmp_path / "view"
    assert main(["view", str(TWO_NODE), "--out", str(out)]) == 0
    page = browser.load((out / "view.html").as_uri())
    assert page.console_errors == []
    assert {urlparse(u).scheme for u in page.requests} <= {"file", "data"}
    _keep_screenshot(page.screenshot_png, "view-2x2-deepep.png")
    cells = browser.evaluate("""[...document.querySelectorAll('rect.heat-cell')].map(c =>
        [c.dataset.module, c.dataset.layer, c.dataset.rank].join(':'))""")
    for module in ("dispatch", "combine"):
        for layer in (1, 2, 3):
            assert {c.split(":")[2] for c in cells if c.startswith(f"{module}:{layer}:")} == \
                {"TP0-EP0", "TP1-EP1", "TP2-EP2", "TP3-EP3"}
    assert _count(browser, "svg.layer-bars g.layer-bar") == 4
    html = (out / "view.html").read_text(encoding="utf-8")
    assert "shared_experts" in html and "(send)" in html and "(recv)" in html
