"""tests/support/browser.py proves what it reports: console errors raised by a page's script, uncaught exceptions,
images that do not decode, the visible text, and a screenshot in which an embedded image is drawn."""
from __future__ import annotations

import base64
import struct
import zlib

import pytest

from .support.browser import render

pytestmark = [pytest.mark.browser]


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG, made by hand (no imaging library needed)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_render_reports_console_errors_text_and_images(tmp_path):
    red = base64.b64encode(_png(40, 30, (255, 0, 0))).decode()
    page = tmp_path / "report.html"
    page.write_text(f"""<!doctype html><html><head><meta charset="utf-8"><title>t</title></head><body>
<h1>Audit report</h1><p id="n">findings: 3</p>
<img id="chart" alt="chart" src="data:image/png;base64,{red}">
<img id="gone" alt="gone" src="data:image/png;base64,AAAA">
<script>
  console.log("rendered");
  console.error("broken chart", 42);
  document.getElementById("n").textContent += " (checked)";
  undefinedFunctionCall();
</script></body></html>""")
    result = render(page, tmp_path / "shot.png")
    assert "broken chart 42" in result.console_errors
    assert any("undefinedFunctionCall" in e for e in result.console_errors)  # the uncaught ReferenceError
    assert "log: rendered" in result.console_messages and "rendered" not in result.console_errors
    assert "Audit report" in result.page_text and "findings: 3 (checked)" in result.page_text
    assert result.broken_images == 1  # the undecodable one; the data-URI chart decoded
    shot = result.screenshot_path.read_bytes()
    assert result.screenshot_path == tmp_path / "shot.png" and _png_size(shot)[0] == 1280


def test_a_clean_page_has_no_console_errors(tmp_path):
    page = tmp_path / "clean.html"
    page.write_text("<!doctype html><html><body><p>all clear</p><script>console.info('ok')</script></body></html>")
    result = render(page, tmp_path / "clean.png")
    assert result.console_errors == [] and result.broken_images == 0
    assert result.page_text.strip() == "all clear"


def test_render_reports_how_wide_the_page_is(tmp_path):
    """A page wider than the viewport says so (the report's tables must not be); one that wraps does not."""
    wide, narrow = tmp_path / "wide.html", tmp_path / "narrow.html"
    wide.write_text("<!doctype html><html><body style='margin:0'><table><tr><td style='white-space:nowrap'>"
                    + "x" * 400 + "</td></tr></table></body></html>")
    narrow.write_text("<!doctype html><html><body style='margin:0'><div style='overflow-x:auto'><table><tr>"
                      "<td style='white-space:nowrap'>" + "x" * 400 + "</td></tr></table></div><p>"
                      + "word " * 400 + "</p></body></html>")
    assert render(wide, tmp_path / "wide.png", viewport=(800, 600)).page_width > 800
    assert render(narrow, tmp_path / "narrow.png", viewport=(800, 600)).page_width == 800


def test_render_names_the_boxes_that_scroll_sideways(tmp_path):
    page = tmp_path / "boxes.html"
    page.write_text("<!doctype html><html><body style='margin:0'><h2>Wide</h2><div style='overflow-x:auto'><table>"
                    "<tr><td style='white-space:nowrap'>" + "x" * 400 + "</td></tr></table></div><h2>Narrow</h2>"
                    "<div style='overflow-x:auto'><table><tr><td>fits</td></tr></table></div></body></html>")
    result = render(page, tmp_path / "boxes.png", viewport=(800, 600))
    assert result.page_width == 800 and len(result.scrolls_sideways) == 1
    assert result.scrolls_sideways[0].startswith("Wide (")
