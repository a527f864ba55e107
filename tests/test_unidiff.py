"""The catalog's diffs: made with difflib, applied exactly, byte for byte, or refused."""

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.review.unidiff import PatchError, apply_diff, make_diff

from conftest import ROOT

SOLUTION = (ROOT / "solutions" / "checkpoint" / "checkpoint.py").read_text()

# A text as lines drawn from a small alphabet (so that hunks repeat and must be placed by their line), with or
# without the final newline, with blank lines, tabs and a form feed (no line end to a diff).
lines = st.lists(st.sampled_from(["a\n", "b\n", "\n", "  c = 1\n", "\td\n", "e\x0cf\n", "g\r\n"]), max_size=40)
texts = st.builds(lambda ls, cut: "".join(ls)[:-1] if cut and ls else "".join(ls), lines, st.booleans())


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_a_diff_turns_the_old_text_into_the_new_one(old, new):
    diff = make_diff(old, new, "a/f", "b/f")
    if old == new:
        assert diff == ""
        return
    assert apply_diff(old, diff) == new


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 400), st.integers(0, 5), st.booleans())
def test_a_hunk_follows_its_code_when_unrelated_edits_move_it(line, added, final_newline):
    old = SOLUTION if final_newline else SOLUTION.rstrip("\n")
    lines = old.splitlines(keepends=True)
    line %= len(lines)
    new = "".join(lines[:line] + ["    pass  # the bug\n"] + lines[line + 1:])
    diff = make_diff(old, new, "a/f", "b/f")
    header = "".join(f"# unrelated {i}\n" for i in range(added))
    assert apply_diff(header + old, diff) == header + new


def test_a_hunk_whose_code_changed_is_refused_and_named():
    new = SOLUTION.replace("@torch.no_grad()\n", "", 1)
    diff = make_diff(SOLUTION, new, "a/f", "b/f")
    edited = SOLUTION.replace("def generate(", "def generate_tokens(", 1)
    with pytest.raises(PatchError, match=r"hunk 1 \(line \d+\) no longer applies"):
        apply_diff(edited, diff)
    with pytest.raises(PatchError, match="no hunk"):
        apply_diff(SOLUTION, "")
    with pytest.raises(PatchError, match="says 3 old"):
        apply_diff(SOLUTION, "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-x\n+y\n")


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is the reference this is compared with")
@settings(max_examples=40, deadline=None)
@given(texts, texts)
def test_gnu_patch_reads_the_diffs_the_same_way(tmp_path_factory, old, new):
    diff = make_diff(old, new, "a/f", "b/f")
    if not diff:
        return
    folder = tmp_path_factory.mktemp("patch")
    (folder / "f").write_bytes(old.encode())
    (folder / "d").write_bytes(diff.encode())
    subprocess.run(["patch", "--quiet", "--fuzz=0", str(folder / "f"), str(folder / "d")], check=True, timeout=30)
    assert (folder / "f").read_bytes() == new.encode() == apply_diff(old, diff).encode()
