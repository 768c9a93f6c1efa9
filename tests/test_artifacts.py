"""SPEC A1-A3: artifact threshold, exact preview format, truncated fallback, bounded readers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.tools import artifacts as A

TAIL_LINE = " ... Use read_artifact for byte, line, or search access."


def test_a1_threshold_is_51200_utf8_bytes_not_characters() -> None:
    assert not A.needs_artifact("a" * 51_200)
    assert A.needs_artifact("a" * 51_201)
    # 17,067 CJK characters are 51,201 bytes: over the threshold with a third of the characters.
    assert A.needs_artifact("你" * 17_067)
    assert not A.needs_artifact("你" * 17_066)


def test_a1_preview_exact_format_ascii() -> None:
    text = "H" * 6_000 + "M" * 50_000 + "T" * 3_000
    expected = "H" * 6_000 + "\n[50000 bytes omitted from context]\n" + "T" * 3_000 + "\n[artifact art-1]" + TAIL_LINE
    assert A.artifact_preview(text, "art-1") == expected


def test_a1_preview_counts_omitted_middle_in_utf8_bytes() -> None:
    head, middle, tail = "头" * 6_000, "中" * 20_000 + "é" * 10, "尾" * 3_000
    preview = A.artifact_preview(head + middle + tail, "artifact-xyz")
    n = 20_000 * 3 + 10 * 2
    assert preview == f"{head}\n[{n} bytes omitted from context]\n{tail}\n[artifact artifact-xyz]{TAIL_LINE}"


def test_a1_preview_of_short_text_never_duplicates_characters() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(7_000))
    preview = A.artifact_preview(text, "x")
    head, omitted, tail, ref = preview.split("\n")
    assert head + tail == text
    assert omitted == "[0 bytes omitted from context]"
    assert ref == "[artifact x]" + TAIL_LINE


@given(st.text(min_size=0, max_size=400), st.integers(min_value=0, max_value=30_000))
@settings(max_examples=40, deadline=None)
def test_a1_preview_head_and_tail_are_exact_slices(seed: str, pad: int) -> None:
    text = (seed + "x" * pad + seed) * 2
    preview = A.artifact_preview(text, "id")
    assert preview.startswith(text[:6_000] + "\n[")
    tail_start = max(6_000, len(text) - 3_000)
    omitted = len(text[6_000:tail_start].encode("utf-8", "surrogatepass"))
    assert f"\n[{omitted} bytes omitted from context]\n{text[tail_start:]}\n[artifact id]" in preview


def test_a3_fallback_short_text_is_unchanged() -> None:
    assert A.truncated_fallback("short 文本") == "short 文本"
    assert A.truncated_fallback("z" * 50_000) == "z" * 50_000


@given(st.integers(min_value=50_001, max_value=300_000), st.sampled_from(["a", "中", "😀"]))
@settings(max_examples=25, deadline=None)
def test_a3_fallback_is_at_most_50000_chars_with_marker(n: int, ch: str) -> None:
    text = "S" + ch * (n - 2) + "E"
    out = A.truncated_fallback(text)
    assert len(out) <= A.FALLBACK_MAX_CHARS
    assert "[truncated:" in out and f"of {n} characters omitted" in out
    assert out.startswith("S" + ch) and out.endswith(ch + "E")


def test_a1_record_small_output_is_untouched_and_not_stored() -> None:
    calls: list[str] = []
    assert A.record_tool_output("ok", lambda t: calls.append(t) or "id") == ("ok", None)
    assert calls == []


def test_a1_record_large_output_stores_full_text_and_returns_preview() -> None:
    stored: list[str] = []
    text = "line\n" * 20_000

    def put(t: str) -> str:
        stored.append(t)
        return "art-42"

    content, artifact_id = A.record_tool_output(text, put)
    assert stored == [text]
    assert artifact_id == "art-42"
    assert content == A.artifact_preview(text, "art-42")


def test_a3_record_falls_back_when_put_raises_and_reports_the_error() -> None:
    errors: list[Exception] = []

    def put(_t: str) -> str:
        raise OSError("disk full")

    text = "x" * 120_000
    content, artifact_id = A.record_tool_output(text, put, on_error=errors.append)
    assert artifact_id is None
    assert content == A.truncated_fallback(text)
    assert [str(e) for e in errors] == ["disk full"]


def test_a3_record_without_store_falls_back() -> None:
    content, artifact_id = A.record_tool_output("y" * 60_000, None)
    assert artifact_id is None and len(content) <= 50_000 and "[truncated:" in content


def test_a1_record_lets_keyboard_interrupt_through() -> None:
    def put(_t: str) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        A.record_tool_output("x" * 60_000, put)


TEXT = "\n".join(f"row {i:04d} 数据" for i in range(1, 1001))


def test_a2_read_bytes_range_is_zero_based_end_exclusive() -> None:
    # Each line "row NNNN 数据\n" is 16 bytes: bytes 16..41 are the second line and 9 bytes of the third.
    out = A.read_bytes(TEXT, 16, 41)
    assert out == f"[bytes 16-41 of {len(TEXT.encode())}]\nrow 0002 数据\nrow 0003 "


def test_a2_read_bytes_split_inside_cjk_char_uses_replacement() -> None:
    out = A.read_bytes("你好", 1, 4)  # bytes 1..3 cut both characters
    body = out.splitlines()[1]
    assert body and set(body) == {"\ufffd"}


@pytest.mark.parametrize(
    ("start", "end", "fragment"),
    [(-1, None, "byte_start must be"), (5, 2, "byte_end must be"), (10**9, None, "past the end")],
)
def test_a2_read_bytes_bad_ranges_are_invalid(start: int, end: int | None, fragment: str) -> None:
    out = A.read_bytes(TEXT, start, end)
    assert out.startswith("Invalid byte range") and fragment in out


def test_a2_read_bytes_output_is_bounded() -> None:
    out = A.read_bytes("q" * 100_000, 0, None)
    assert len(out) < A.MAX_READ_CHARS + 200
    assert "[output cut: showing 20000 of 100000 characters" in out


def test_a2_reader_output_stays_under_the_artifact_threshold_for_4_byte_chars() -> None:
    out = A.read_bytes("😀" * 40_000, 0, None)
    assert not A.needs_artifact(out)
    assert len(out.encode()) <= A.MAX_READ_BYTES + 200


def test_a2_read_lines_is_one_based_inclusive_and_numbered() -> None:
    out = A.read_lines(TEXT, 3, 5)
    assert out.splitlines() == ["[lines 3-5 of 1000]", "3: row 0003 数据", "4: row 0004 数据", "5: row 0005 数据"]


def test_a2_read_lines_defaults_to_200_and_clips_end() -> None:
    assert A.read_lines(TEXT, 1).splitlines()[0] == "[lines 1-200 of 1000]"
    assert A.read_lines(TEXT, 990, 5_000).splitlines()[0] == "[lines 990-1000 of 1000]"


@pytest.mark.parametrize(("start", "end"), [(0, None), (5, 4), (1001, None)])
def test_a2_read_lines_bad_ranges_are_invalid(start: int, end: int | None) -> None:
    assert A.read_lines(TEXT, start, end).startswith("Invalid line range")


def test_a2_search_literal_treats_regex_chars_literally() -> None:
    text = "a.b\naxb\nA.B"
    out = A.search(text, "a.b", context=0)
    assert out.splitlines() == ["[search literal 'a.b': 1 matching lines of 3]", ">1: a.b"]


def test_a2_search_regex_with_context_merges_overlapping_windows() -> None:
    text = "\n".join(["x0", "ERROR one", "x2", "ERROR two", "x4", "x5", "x6", "x7", "ERROR three"])
    out = A.search(text, r"ERROR \w+", regex=True, context=1)
    lines = out.splitlines()
    assert lines[0] == "[search regex 'ERROR \\\\w+': 3 matching lines of 9]"
    assert lines[1:] == [
        " 1: x0",
        ">2: ERROR one",
        " 3: x2",
        ">4: ERROR two",
        " 5: x4",
        "--",
        " 8: x7",
        ">9: ERROR three",
    ]


def test_a2_search_hit_limit_is_reported() -> None:
    out = A.search(TEXT, "数据", max_hits=3, context=0)
    assert "1000 matching lines of 1000; showing the first 3" in out
    assert out.count("\n>") == 3


def test_a2_search_no_hits_and_bad_input() -> None:
    assert A.search(TEXT, "absent") == "[search literal 'absent': 0 matching lines of 1000]"
    assert A.search(TEXT, "(unclosed", regex=True).startswith("Invalid regex '(unclosed'")
    assert A.search(TEXT, "").startswith("Invalid search")
    assert A.search(TEXT, "row", context=-1).startswith("Invalid search: context")
    assert A.search(TEXT, "row", max_hits=0).startswith("Invalid search: max_hits")


def test_a2_search_clips_long_lines_around_the_match() -> None:
    line = "a" * 100_000 + "NEEDLE" + "b" * 100_000
    out = A.search(line, "NEEDLE", context=0)
    assert "NEEDLE" in out
    assert len(out) < 1_000
